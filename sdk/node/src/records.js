// Record headers and timestamps (spec/protocol.md §5.3): application headers travel as NATS
// headers of the record's message, names never Pctl-* or Nats-*; the producer's record time is
// Pctl-Time (unix milliseconds); a record's stored size (header block + value) is checked against
// the stream's max_msg_size before it is sent.

import { BadRequestError } from './errors.js';

/** The record time header (unix milliseconds, decimal). */
export const TIME_HEADER = 'Pctl-Time';
/** At most this many bytes of application headers per record (`name: value\r\n` lines). */
export const MAX_HEADER_BYTES = 65536;
/** The partition streams' default max_msg_size (spec/protocol.md §9). */
export const DEFAULT_MAX_RECORD_BYTES = 1 << 20;

const NAME_RE = /^[A-Za-z0-9_.-]{1,128}$/;
const RESERVED_RE = /^(pctl|nats)-/i;
// eslint-disable-next-line no-control-regex
const BAD_VALUE_RE = /[\u0000-\u001f\u007f]/;
const TIME_RE = /^(0|[1-9][0-9]{0,15})$/;

/** Whether a header name is the protocol's or JetStream's (never an application header). */
export function reservedHeader(name) { return RESERVED_RE.test(name); }

/**
 * Validates application headers and returns them as [name, value] pairs and their encoded size.
 * `headers`: an object {name: value | value[]}, a Map of the same, or an array of [name, value]
 * pairs. Throws BadRequestError naming what is wrong.
 */
export function headerPairs(headers) {
  if (headers === undefined || headers === null) return { pairs: null, bytes: 0 };
  let entries;
  if (headers instanceof Map) entries = [...headers.entries()];
  else if (Array.isArray(headers)) entries = headers;
  else if (typeof headers === 'object') entries = Object.entries(headers);
  else throw new BadRequestError(`record headers are an object {name: value or [values]}, a Map or an array of [name, value] pairs, not ${typeof headers}`);
  const pairs = [];
  let bytes = 0;
  for (const entry of entries) {
    if (!Array.isArray(entry) || entry.length !== 2) throw new BadRequestError('record headers given as an array must be [name, value] pairs');
    const [name, v] = entry;
    if (typeof name !== 'string' || !NAME_RE.test(name)) {
      throw new BadRequestError(`record header name ${JSON.stringify(name)}: a header name is 1 to 128 characters of A-Z a-z 0-9 _ . - (spec/protocol.md §5.3)`);
    }
    if (RESERVED_RE.test(name)) {
      throw new BadRequestError(`record header name ${JSON.stringify(name)} is reserved: names starting with Pctl- or Nats- (any case) belong to pctl and JetStream; use the record's timestamp option for the record time`);
    }
    for (const value of Array.isArray(v) ? v : [v]) {
      if (typeof value !== 'string') {
        throw new BadRequestError(`record header ${name}: a value is a string, not ${value === null ? 'null' : typeof value} (encode binary data yourself, as base64 for example)`);
      }
      if (BAD_VALUE_RE.test(value)) throw new BadRequestError(`record header ${name}: the value contains a control character (CR, LF, tab, NUL...), which NATS headers cannot carry`);
      if (value !== value.trim()) throw new BadRequestError(`record header ${name}: the value starts or ends with a space, which NATS clients trim: remove it`);
      pairs.push([name, value]);
      bytes += Buffer.byteLength(name) + Buffer.byteLength(value) + 4; // "name: value\r\n"
    }
  }
  if (bytes > MAX_HEADER_BYTES) {
    throw new BadRequestError(`record headers of ${bytes} bytes: at most ${MAX_HEADER_BYTES} bytes of application headers per record (spec/protocol.md §5.3)`);
  }
  return { pairs: pairs.length ? pairs : null, bytes };
}

/** The Pctl-Time value of a timestamp (a Date or unix milliseconds), or null for none. */
export function timeHeader(ts) {
  if (ts === undefined || ts === null) return null;
  const ms = ts instanceof Date ? ts.getTime() : ts;
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new BadRequestError(`record timestamp ${String(ts)}: a timestamp is a Date or an integer of unix milliseconds in [0, 2^53) (spec/protocol.md §5.3)`);
  }
  return String(ms);
}

/** Parses a Pctl-Time value: unix milliseconds, or null when absent or malformed. */
export function parseTime(v) {
  if (!v || !TIME_RE.test(v)) return null;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : null;
}

/** The bytes of a NATS header block with these header lines (`NATS/1.0\r\n`, lines, `\r\n`). */
export function headerBlockBytes(lineBytes) { return lineBytes === 0 ? 0 : 10 + lineBytes + 2; }

/**
 * The application headers of a stored message (nats MsgHdrs) as {name: [values]} (a null-
 * prototype object), or null when it has none.
 */
export function appHeaders(h) {
  if (!h) return null;
  let out = null;
  for (const k of h.keys()) {
    if (RESERVED_RE.test(k)) continue;
    out ??= Object.create(null);
    out[k] = h.values(k);
  }
  return out;
}
