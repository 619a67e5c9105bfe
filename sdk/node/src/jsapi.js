// The few JetStream API calls the consumer needs, spoken directly (like publisher.js): JSON
// requests to $JS.API.*, stream info, direct gets and publishes that expect a PubAck. Errors come
// back as JsApiError (JetStream's own code and err_code) or as the SDK's PctlError when the
// server could not be reached or refused the subject.

import { headers as natsHeaders } from '@nats-io/transport-node';
import { violationOf, isNoResponders, isTimeout } from './natserrors.js';
import { UnavailableError, permissionError } from './errors.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const EMPTY = new Uint8Array(0);

/** JetStream error codes the consumer branches on (nats-server's errors.json). */
export const JS = Object.freeze({
  streamNotFound: 10059,
  consumerNotFound: 10014,
  wrongLastSequence: 10071,
  // "wrong last sequence" without the sequence: a replicated stream's leader refusing a
  // compare-and-set while a write of the subject it checks is in flight.
  wrongLastSequenceConstant: 10164,
  noMessageFound: 10037,
  messageTooLarge: 10054,
});

/** A JetStream API error reply: `code` is the HTTP-like status, `errCode` JetStream's err_code. */
export class JsApiError extends Error {
  constructor(subject, e) {
    super(`${subject}: ${e.description ?? 'JetStream error'} (JetStream error ${e.err_code ?? e.code})`);
    this.name = 'JsApiError';
    this.code = e.code;
    this.errCode = e.err_code;
    this.description = e.description ?? '';
  }
}

// Maps a failed request to the SDK's errors: permission (with the subject), unavailable.
function requestError(subject, e, timeout) {
  const v = violationOf(e);
  if (v) return permissionError(v.subject || subject, e);
  if (isNoResponders(e)) return new UnavailableError(`no JetStream answers ${subject} (no responders): is JetStream enabled and the stream there?`, { cause: e });
  if (isTimeout(e)) return new UnavailableError(`JetStream did not answer ${subject} within ${timeout}ms`, { cause: e });
  return new UnavailableError(`${subject}: ${e?.message ?? e}`, { cause: e });
}

/** A JetStream API request with a JSON body and reply; throws JsApiError or PctlError. */
export async function jsRequest(nc, subject, body, timeout = 5000) {
  let m;
  try {
    m = await nc.request(subject, body === undefined ? EMPTY : encoder.encode(JSON.stringify(body)), { timeout });
  } catch (e) {
    throw requestError(subject, e, timeout);
  }
  let r;
  try {
    r = JSON.parse(decoder.decode(m.data));
  } catch (e) {
    throw new UnavailableError(`${subject}: unreadable reply: ${e.message}`, { cause: e });
  }
  if (r.error) throw new JsApiError(subject, r.error);
  return r;
}

/** Stream info (`$JS.API.STREAM.INFO.<stream>`), optionally with subjects matching a filter. */
export function streamInfo(nc, stream, { subjectsFilter, timeout } = {}) {
  return jsRequest(nc, `$JS.API.STREAM.INFO.${stream}`, subjectsFilter ? { subjects_filter: subjectsFilter } : undefined, timeout);
}

/**
 * A direct get (the stream must allow direct gets). `req` is JetStream's request: {seq},
 * {last_by_subj}, {start_time}, {seq, next_by_subj}. With `lastBySubject`, the subject form
 * `$JS.API.DIRECT.GET.<stream>.<subject>` is used (no body). Returns null when there is no such
 * message, else {seq, subject, time (RFC 3339 string), headers (MsgHdrs), data, deleted}.
 */
export async function directGet(nc, stream, req, { lastBySubject, timeout = 5000 } = {}) {
  const subject = lastBySubject ? `$JS.API.DIRECT.GET.${stream}.${lastBySubject}` : `$JS.API.DIRECT.GET.${stream}`;
  let m;
  try {
    m = await nc.request(subject, req ? encoder.encode(JSON.stringify(req)) : EMPTY, { timeout });
  } catch (e) {
    throw requestError(subject, e, timeout);
  }
  const h = m.headers;
  const code = h?.code ?? 0;
  if (code === 404) return null;
  if (code >= 300 || !h) {
    throw new JsApiError(subject, { code, description: h?.description || 'direct get failed' });
  }
  const op = h.get('KV-Operation');
  return {
    seq: Number(h.get('Nats-Sequence')),
    subject: h.get('Nats-Subject'),
    time: h.get('Nats-Time-Stamp'),
    headers: h,
    data: m.data,
    deleted: op === 'DEL' || op === 'PURGE',
  };
}

/**
 * A JetStream publish that waits for its PubAck: returns {stream, seq, duplicate}. `hdrs` is a
 * plain object of header values. Throws JsApiError (for example 10071 when an expected last
 * sequence header does not match) or PctlError.
 */
export async function jsPublish(nc, subject, data, hdrs, timeout = 5000) {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(hdrs ?? {})) h.set(k, String(v));
  let m;
  try {
    m = await nc.request(subject, data ?? EMPTY, { timeout, headers: h });
  } catch (e) {
    throw requestError(subject, e, timeout);
  }
  if (m.headers?.code === 503) throw new UnavailableError(`no stream takes ${subject} (no responders)`);
  let r;
  try {
    r = JSON.parse(decoder.decode(m.data));
  } catch (e) {
    throw new UnavailableError(`${subject}: unreadable acknowledgement: ${e.message}`, { cause: e });
  }
  if (r.error) throw new JsApiError(subject, r.error);
  return { stream: r.stream, seq: r.seq, duplicate: r.duplicate === true };
}
