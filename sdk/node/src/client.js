// A connection to a pctl broker (spec/protocol.md): NATS with an NKey seed file, the broker API
// (§3) with its errors mapped to PctlError codes, plugins fetched by digest and verified, and
// partitioners cached by (digest, config).

import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { connect as natsConnect, nkeyAuthenticator, createInbox, errors as natsErrors } from '@nats-io/transport-node';
import { violationOf, isNoResponders, isTimeout } from './natserrors.js';
import { fromSeed } from '@nats-io/nkeys';
import { Partitioner } from './partitioner.js';
import { nativeFor } from './native.js';
import { Producer } from './producer.js';
import { Consumer, resetGroup } from './consumer.js';
import {
  PctlError, BadRequestError, UnavailableError, PermissionError, InternalError,
  errorFromCode, permissionError,
} from './errors.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Defaults of connect(), documented on each option there. */
export const DEFAULTS = Object.freeze({
  server: 'nats://127.0.0.1:4222',
  timeout: 30_000,
  ackTimeout: 5_000,
  reconnectWait: 250,
  name: 'pctl-node',
});

/** Reads an NKey seed file (admin.nk, producer.nk, consumer.nk): the first line that is a seed. */
export function readSeed(path) {
  let text;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new BadRequestError(`credentials ${path}: ${e.message} (use a .nk seed file from the broker's data directory: admin.nk, producer.nk or consumer.nk)`, { cause: e });
  }
  const line = text.split(/\r?\n/).map((l) => l.trim()).find((l) => /^S[A-Z2-7]{20,}$/.test(l));
  if (!line) {
    throw new BadRequestError(`credentials ${path}: no NKey seed in the file (a line starting with "S"); use admin.nk, producer.nk or consumer.nk from the broker's data directory`);
  }
  const seed = encoder.encode(line);
  try {
    fromSeed(seed);
  } catch (e) {
    throw new BadRequestError(`credentials ${path}: not a valid NKey seed: ${e.message}`, { cause: e });
  }
  return seed;
}

/**
 * Connects to a broker. Options (all optional):
 * - `server`: URL, or several comma-separated (a cluster's nodes); default $PCTL_SERVER, else
 *   nats://127.0.0.1:4222.
 * - `creds`: NKey seed file path; default $PCTL_CREDS; none: connect without credentials.
 * - `name`: connection name shown by the server; default "pctl-node".
 * - `timeout`: milliseconds for each broker API request; default 30000.
 * - `ackTimeout`: milliseconds to wait for a publish acknowledgement before the publish counts as
 *   ambiguous and is retried with the same Nats-Msg-Id; default 5000.
 * - `reconnectWait`: milliseconds between reconnection attempts; default 250 (forever).
 * - `sharedInbox`: with NKey credentials, replies come to the private inbox prefix
 *   `_INBOX_<public key>` (spec/protocol.md §8.3; a scoped credential may subscribe there only);
 *   true uses the shared `_INBOX` instead, for a server configured before private inboxes.
 *   Default false.
 * - `nativeBuiltins`: producers and consumers partition with the JavaScript implementation of a
 *   built-in when an epoch's module is exactly that built-in's (by digest), without config (the
 *   native fast path of spec/builtins.md; src/native.js, pinned to the modules by its tests).
 *   Default false: the WebAssembly module, the reference, runs.
 * Throws PermissionError (credentials refused), UnavailableError (no server), BadRequestError
 * (unreadable credentials).
 */
export async function connect(opts = {}) {
  const o = {
    server: opts.server || process.env.PCTL_SERVER || DEFAULTS.server,
    creds: opts.creds ?? process.env.PCTL_CREDS ?? '',
    name: opts.name || DEFAULTS.name,
    timeout: opts.timeout || DEFAULTS.timeout,
    ackTimeout: opts.ackTimeout || DEFAULTS.ackTimeout,
    reconnectWait: opts.reconnectWait || DEFAULTS.reconnectWait,
    sharedInbox: !!opts.sharedInbox,
    nativeBuiltins: !!opts.nativeBuiltins,
  };
  const nopts = {
    servers: o.server.split(',').map((u) => u.trim()).filter(Boolean), // a cluster: every node's URL, comma-separated
    name: o.name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: o.reconnectWait,
    reconnectJitter: 50,
    noAsyncTraces: true,
  };
  if (o.creds) {
    const seed = readSeed(o.creds);
    nopts.authenticator = nkeyAuthenticator(seed);
    if (!o.sharedInbox) nopts.inboxPrefix = `_INBOX_${fromSeed(seed).getPublicKey()}`;
  }
  let nc;
  try {
    nc = await natsConnect(nopts);
  } catch (e) {
    if (e instanceof natsErrors.AuthorizationError || /authoriz/i.test(String(e?.message))) {
      throw new PermissionError(`permission denied: the broker at ${o.server} refused the credentials ${JSON.stringify(o.creds)}: ${e.message}; use admin.nk, producer.nk or consumer.nk from the broker's data directory (creds option or PCTL_CREDS)`, { cause: e });
    }
    throw new UnavailableError(`cannot connect to ${o.server}: ${e.message}; is 'pctl serve' running? (server option or PCTL_SERVER)`, { cause: e });
  }
  return new Client(nc, o);
}

/**
 * A connection to a broker. Make producers with `client.producer(topic)`. Close it with
 * `await client.close()` (after closing its producers).
 */
export class Client {
  /** @private use connect(). */
  constructor(nc, opts) {
    this.nc = nc;
    this.opts = opts;
    this.modules = new Map(); // digest -> verified bytes
    this.partitioners = new Map(); // digest + config -> Partitioner
    this.violationListeners = new Set();
    this.statusListeners = new Set();
    this.closed = false;
    this.watchStatus();
  }

  /** A new inbox subject under this connection's inbox prefix (private with NKey credentials). */
  inbox() { return createInbox(this.nc.options?.inboxPrefix); }

  /** The underlying NATS connection (@nats-io/transport-node). */
  get connection() { return this.nc; }

  // The server reports a forbidden publish asynchronously (-ERR 'Permissions Violation ...').
  // Requests are failed by nats.js itself; listeners (producers) hear about the rest.
  async watchStatus() {
    try {
      for await (const s of this.nc.status()) {
        for (const l of this.statusListeners) l(s);
        if (s.type !== 'error') continue;
        const v = violationOf(s.error);
        if (v && v.operation === 'publish') for (const l of this.violationListeners) l(v.subject, v);
      }
    } catch {
      // the connection closed
    }
  }

  /** Calls fn(status) for every status event of the connection (disconnect, reconnect, ...). */
  onStatus(fn) {
    this.statusListeners.add(fn);
    return () => this.statusListeners.delete(fn);
  }

  onViolation(fn) {
    this.violationListeners.add(fn);
    return () => this.violationListeners.delete(fn);
  }

  /**
   * Sends a broker API request (spec/protocol.md §3): `body` is an object (JSON) or bytes. Returns
   * the reply message. A failed request throws the PctlError of its code.
   */
  async requestMsg(subject, body, { timeout } = {}) {
    const data = body instanceof Uint8Array ? body : encoder.encode(JSON.stringify(body ?? {}));
    timeout ||= this.opts.timeout;
    let m;
    try {
      m = await this.nc.request(subject, data, { timeout });
    } catch (e) {
      const v = violationOf(e);
      if (v) throw permissionError(v.subject || subject, e);
      if (isNoResponders(e)) throw new UnavailableError(`no broker answers ${subject}; is 'pctl serve' running and connected to ${this.opts.server}?`, { cause: e });
      if (isTimeout(e)) throw new UnavailableError(`the broker did not answer ${subject} within ${timeout}ms`, { cause: e });
      throw new UnavailableError(`${subject}: ${e.message}`, { cause: e });
    }
    const code = m.headers?.get('Pctl-Error');
    if (code) {
      let er = {};
      try {
        er = JSON.parse(decoder.decode(m.data));
      } catch {
        // the header alone still says what failed
      }
      throw errorFromCode(er.code || code, er.message || `${subject} failed: ${code}`, { detail: er.detail, remote: true });
    }
    return m;
  }

  /** A broker API request with a JSON reply. */
  async request(subject, body, opts) {
    const m = await this.requestMsg(subject, body, opts);
    try {
      return JSON.parse(decoder.decode(m.data));
    } catch (e) {
      throw new InternalError(`bad reply to ${subject}: ${e.message}`, { cause: e });
    }
  }

  /**
   * A topic's descriptor (spec/protocol.md §4) and its KV revision: {topic, revision}. Throws
   * NotFoundError for an unknown topic. `timeout` (milliseconds) overrides the client's.
   */
  async topic(name, { timeout } = {}) {
    return this.request('pctl.api.topic.get', { topic: name }, { timeout });
  }

  /**
   * A plugin's module bytes by digest (or built-in name), verified: the SHA-256 of the bytes must
   * equal the digest asked for and the Pctl-Digest header (spec/protocol.md §3). Cached by digest.
   */
  async module(ref) {
    const hit = this.modules.get(ref);
    if (hit) return hit;
    const m = await this.requestMsg('pctl.api.plugin.get', { plugin: ref });
    const bytes = m.data;
    const d = createHash('sha256').update(bytes).digest('hex');
    const header = m.headers?.get('Pctl-Digest') ?? '';
    if (header !== d || (/^[0-9a-f]{64}$/.test(ref) && ref !== d)) {
      throw new InternalError(`plugin ${ref}: the ${bytes.length} bytes received hash to ${d} (Pctl-Digest header ${JSON.stringify(header)}): refusing to run them`);
    }
    this.modules.set(ref, bytes);
    this.modules.set(d, bytes);
    return bytes;
  }

  /**
   * The Partitioner of an epoch's partitioner {name, digest, config (base64 or null)}: its module
   * fetched by digest and verified, instantiated with the config. Cached.
   */
  async partitioner(p) {
    const cacheKey = `${p.digest}/${p.config ?? ''}`;
    const hit = this.partitioners.get(cacheKey);
    if (hit) return hit;
    const bytes = await this.module(p.digest);
    const native = this.opts.nativeBuiltins ? nativeFor(p, bytes) : null; // the native fast path
    if (native) {
      this.partitioners.set(cacheKey, native);
      return native;
    }
    const config = p.config ? new Uint8Array(Buffer.from(p.config, 'base64')) : new Uint8Array(0);
    const part = Partitioner.fromBytes(bytes, { config, source: p.name ? `plugin ${p.name}` : `sha256:${p.digest.slice(0, 12)}` });
    this.partitioners.set(cacheKey, part);
    return part;
  }

  /**
   * A producer for a topic (client-side partitioning, spec/protocol.md §5.1). Options: `id` (the
   * producer id; default random), `maxInFlight` (unacknowledged publishes per partition; default
   * 1024), `maxBuffered` (records sent and not yet settled before `ready()` waits; default 65536).
   * Throws NotFoundError for an unknown topic.
   */
  async producer(topic, opts = {}) {
    return Producer.create(this, topic, opts);
  }

  /**
   * A member of a consumer group (spec/protocol.md §6). Options: `group` (required), `member`
   * (default random), `fromBeginning` (a new group starts at the first record; default: after
   * what is there), `autoCommit` (default true; false: acknowledge each record with m.ack()),
   * `resetTo` ('beginning', 'end' or a time: reset the group when joining), `heartbeat` (1000
   * ms), `sessionTimeout` (6000 ms), `commitInterval` (200 ms), `prefetch` (records read ahead per
   * partition, 1024), `revokeTimeout` (1500 ms), the callbacks `onAssigned`, `onRevoked`,
   * `onKeysAssigned`, `onKeysRevoked`, `onReset`, and `onLog(line)`. Needs the consumer or admin
   * role. Throws NotFoundError for an unknown topic, BadRequestError for bad options.
   */
  async consumer(topic, opts = {}) {
    return Consumer.create(this, topic, opts);
  }

  /**
   * Resets a group to 'beginning', 'end' or a time (Date, unix ms, RFC 3339), running members or
   * not (spec/protocol.md §6.6). Returns the reset {generation, to, time, positions, by, at}.
   */
  async resetGroup(topic, group, target, opts) {
    return resetGroup(this, topic, group, target, opts);
  }

  /** Drains and closes the connection. */
  async close() {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.nc.drain();
    } catch {
      await this.nc.close();
    }
  }
}

export { PctlError };
