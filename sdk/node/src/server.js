// The nats-server version pctl's clients need, and the check that refuses an older server
// (spec/protocol.md §5.1 for the producer: fast batches; §6.1 for a consumer: the conditioned
// write that proves a group absent, which a server older than 2.11 ignores). The producer and the
// consumer share it: one minimum, one comparison, one form of message.

import { UnavailableError } from './errors.js';

/** The oldest nats-server the producer and the consumer work with. */
export const MIN_SERVER_VERSION = '2.14.0';

/**
 * Whether a "major.minor.patch[-suffix]" version (a leading "v" allowed) is at least
 * major.minor. The patch and a pre-release suffix are not compared: '2.14.0-RC.1' is 2.14.
 */
export function versionAtLeast(v, major, minor) {
  const m = /^v?(\d+)\.(\d+)/.exec(String(v ?? ''));
  if (!m) return false;
  const ma = Number(m[1]);
  const mi = Number(m[2]);
  return ma > major || (ma === major && mi >= minor);
}

/**
 * Throws UnavailableError when `version` (what the server at `server` reports in INFO) is older
 * than MIN_SERVER_VERSION; `who` needs it ("pctl's consumer"), for `why` (the feature, the spec).
 */
export function checkServer(version, server, who, why) {
  if (versionAtLeast(version, 2, 14)) return;
  throw new UnavailableError(`the server at ${server} runs nats-server ${JSON.stringify(version)}; ${who} needs nats-server ${MIN_SERVER_VERSION} or later on every node (${why}): upgrade the NATS servers`);
}

/** checkServer on the server a client is connected to. */
export function requireServer(client, who, why) {
  checkServer(client.nc.info?.version ?? '', client.opts.server, who, why);
}
