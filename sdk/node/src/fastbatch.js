// The wire format of JetStream fast batches (nats-server 2.14+), as spec/protocol.md §5.1.1 pins
// it: the reply subject that makes a publish part of a batch, the replies the stream leader sends
// back, record identities (tokens) and the check that a stored message is a given record. No
// state here: the sink (sink.js) owns the protocol. The Go reference is client/fastbatch.go.

import { randomBytes, createHash } from 'node:crypto';
import { RawHeaders } from './headers.js';
import { jsRequest, JsApiError, JS } from './jsapi.js';
import { NotFoundError } from './errors.js';

const decoder = new TextDecoder();

/** Fast-batch operations, the <op> token of the reply subject. */
export const OP = Object.freeze({ start: 0, append: 1, commit: 2, eob: 3, ping: 4 });

/** JetStream API error codes the producer acts on (spec/protocol.md §5.1.1). */
export const ERR = Object.freeze({
  tooLarge: 10054, // message size exceeds maximum allowed
  dupConflict: 10071, // duplicate message id is still being replicated
  batchDisabled: 10205, // batch publish is disabled on the stream
  badPattern: 10206, // batch publish pattern is invalid
  badBatchId: 10207,
  unknownBatch: 10208, // batch closed, expired or never started
  tooManyOpen: 10211, // too many batches open on the stream or server
});

/** The kinds of server reply about a message of a fast batch. */
export const KIND = Object.freeze({
  flowAck: 'flow ack', // {"type":"ack","seq":S,"msgs":M}: batch seqs 1..S persisted
  gap: 'gap', // {"type":"gap","last_seq":E,"seq":C}: the batch ends
  flowErr: 'error', // {"type":"err","seq":C,"error":{...}}: the batch ends
  pubAck: 'PubAck', // the batch is closed; count messages persisted
  refusal: 'refusal', // an error PubAck: the message was refused
  noResponders: 'no responders', // status 503: no stream on the subject
  garbage: 'unparsable reply', // anything else (never trusted)
});

/** The reply subject of one message of a fast batch (gap mode always "fail"). */
export function replySubject(inbox, batch, flow, seq, op) {
  return `${inbox}.${batch}.${flow}.fail.${seq}.${op}.$FI`;
}

/** Splits a reply subject made by replySubject under inbox: {batch, seq, op} or null. */
export function parseReplySubject(inbox, subject) {
  if (!subject.startsWith(inbox) || subject.charCodeAt(inbox.length) !== 46 || !subject.endsWith('.$FI')) return null;
  const parts = subject.slice(inbox.length + 1, subject.length - 4).split('.');
  if (parts.length !== 5 || parts[2] !== 'fail') return null;
  const seq = Number(parts[3]);
  const op = Number(parts[4]);
  if (!Number.isSafeInteger(seq) || !Number.isInteger(op)) return null;
  return { batch: parts[0], seq, op };
}

/** Decodes a server reply (a nats.js message) about batch message (batch, seq, op). */
export function parseReply(msg, batch, seq, op) {
  const r = { batch, seq, op, kind: KIND.garbage, ackSeq: 0, gapExpected: 0, gapGot: 0, errCode: 0, errText: '', stream: '', streamSeq: 0, count: 0, ackBatch: '', duplicate: false };
  const data = msg.data;
  if ((!data || data.length === 0) && msg.headers?.code === 503) {
    r.kind = KIND.noResponders;
    return r;
  }
  let body;
  try {
    body = JSON.parse(decoder.decode(data));
  } catch (e) {
    r.errText = `unparsable reply: ${e.message}`;
    return r;
  }
  if (body === null || typeof body !== 'object') {
    r.errText = 'reply is not a JSON object';
    return r;
  }
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  if (body.type === 'ack') {
    r.kind = KIND.flowAck;
    r.ackSeq = num(body.seq);
  } else if (body.type === 'gap') {
    r.kind = KIND.gap;
    r.gapExpected = num(body.last_seq);
    r.gapGot = num(body.seq);
  } else if (body.type === 'err') {
    r.kind = KIND.flowErr;
    r.errCode = num(body.error?.err_code);
    r.errText = String(body.error?.description ?? '');
    r.gapGot = num(body.seq);
  } else if (body.type !== undefined && body.type !== '') {
    r.errText = `unknown reply type ${JSON.stringify(body.type)}`;
  } else if (body.error) {
    r.kind = KIND.refusal;
    r.errCode = num(body.error.err_code);
    r.errText = String(body.error.description ?? '');
    r.stream = String(body.stream ?? '');
  } else if (body.stream) {
    r.kind = KIND.pubAck;
    r.stream = String(body.stream);
    r.streamSeq = num(body.seq);
    r.count = num(body.count);
    r.ackBatch = String(body.batch ?? '');
    r.duplicate = body.duplicate === true;
  } else {
    r.errText = 'reply without type, error or stream';
  }
  return r;
}

/** n random bytes from the operating system's CSPRNG as 2n lowercase hex digits. */
export function randomHex(n) { return randomBytes(n).toString('hex'); }

/** A record's random token (spec/protocol.md §5.1: 32 lowercase hex digits). */
export function newToken() { return randomHex(16); }

/**
 * The content token of a record (spec/protocol.md §5.2): the first 32 hex digits of SHA-256 over
 * "pctl-record-v1", a zero byte, then "k" + the 4-byte big-endian key length + the key (or "n"
 * for a keyless record), then the value. The same record gets the same token in every run.
 */
export function recordToken(key, value) {
  const h = createHash('sha256');
  h.update('pctl-record-v1\x00');
  if (key === null) {
    h.update('n');
  } else {
    const l = Buffer.alloc(5);
    l[0] = 0x6b; // 'k'
    l.writeUInt32BE(key.length, 1);
    h.update(l);
    h.update(key);
  }
  h.update(value);
  return h.digest('hex').slice(0, 32);
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  return Buffer.from(a.buffer, a.byteOffset, a.length).equals(Buffer.from(b.buffer, b.byteOffset, b.length));
}

/**
 * Whether a stored message {headers: RawHeaders, data} is the record pd: producer, sequence,
 * deduplication id and key header for header, value byte for byte, and no fence marker. It is
 * how a producer proves that a duplicate acknowledgement (or a record found by a search) is its
 * own record and not a look-alike (spec/protocol.md §5.1.2).
 */
export function sameRecord(m, pd) {
  if (!m || !pd.value) return false;
  const h = m.headers;
  if (h.has('Pctl-Fence')) return false;
  if (h.get('Pctl-Producer') !== pd.producer || h.get('Pctl-Seq') !== pd.seqText || h.get('Nats-Msg-Id') !== pd.msgId) return false;
  const keys = h.values('Pctl-Key');
  if (pd.keyHdr === null ? keys.length !== 0 : keys.length !== 1 || keys[0] !== pd.keyHdr) return false;
  return sameBytes(m.data, pd.value);
}

/**
 * Reads message seq of a stream with $JS.API.STREAM.MSG.GET, which the stream leader answers (a
 * direct get may come from a replica that lags behind). Returns {seq, subject, headers
 * (RawHeaders), data} or null when there is no such message; throws NotFoundError when the stream
 * is gone, JsApiError or PctlError otherwise.
 */
export function leaderGet(nc, stream, seq, timeout) {
  return leaderRequest(nc, stream, `message ${seq}`, { seq }, timeout);
}

/**
 * The stream's last message as the stream leader answers STREAM.MSG.GET with
 * {"last_by_subj": ">"}: null when the stream is empty or its last message is gone (deleted,
 * expired). The end of a read-back (spec/protocol.md §5.1.2, "the read-back's end").
 */
export function leaderLast(nc, stream, timeout) {
  return leaderRequest(nc, stream, 'the last message', { last_by_subj: '>' }, timeout);
}

/**
 * The stream's first message at or after sequence from, from the stream leader (STREAM.MSG.GET
 * with {"seq": from, "next_by_subj": ">"}): null when there is none.
 */
export function leaderNext(nc, stream, from, timeout) {
  return leaderRequest(nc, stream, `the first message from ${from}`, { seq: from, next_by_subj: '>' }, timeout);
}

// One STREAM.MSG.GET request (req) and the message it returns; what names it in errors.
async function leaderRequest(nc, stream, what, req, timeout) {
  let r;
  try {
    r = await jsRequest(nc, `$JS.API.STREAM.MSG.GET.${stream}`, req, timeout);
  } catch (e) {
    if (e instanceof JsApiError && e.errCode === JS.noMessageFound) return null;
    if (e instanceof JsApiError && e.errCode === JS.streamNotFound) throw new NotFoundError(`partition stream ${stream} is gone`, { cause: e });
    throw e;
  }
  const m = r.message;
  if (!m) throw new Error(`${what} of ${stream}: empty answer`);
  const hdrs = m.hdrs ? Buffer.from(m.hdrs, 'base64').toString('utf8') : 'NATS/1.0\r\n\r\n';
  const data = m.data ? new Uint8Array(Buffer.from(m.data, 'base64')) : new Uint8Array(0);
  return { seq: m.seq, subject: m.subject, headers: new RawHeaders(hdrs), data };
}
