// Fast access to a delivered message's NATS headers and JetStream acknowledgement subject, for
// the consumer's hot path. nats.js parses a header block into a MsgHdrs by validating and
// canonicalising every name (a third of a consumer's CPU time per record); here the block is
// decoded once and split into lines, and values are read by exact name, as Go's nats.Header.Get
// does (leading spaces and tabs of a value are trimmed, as nats.go's parser trims them).
//
// The raw bytes come from nats.js's message internals (`_msg.hdr`, the header block's length,
// and `_rdata`, headers then payload: @nats-io/nats-core 3.4, pinned); when they are not there,
// nats.js's own parsed headers are used instead, which have the same get/has/values/keys/code.

const utf8 = new TextDecoder();

/** A parsed header block: status code and description, and the header lines in order. */
export class RawHeaders {
  constructor(text) {
    let end = text.indexOf('\r\n');
    if (end < 0) end = text.length;
    const status = text.slice(0, end);
    this.code = 0;
    this.description = '';
    if (status.length > 8) { // "NATS/1.0 404 No Messages"
      const rest = status.slice(8).trim();
      const sp = rest.indexOf(' ');
      const c = parseInt(sp < 0 ? rest : rest.slice(0, sp), 10);
      if (Number.isInteger(c)) {
        this.code = c;
        this.description = sp < 0 ? '' : rest.slice(sp + 1).trim();
      }
    }
    this.names = [];
    this.vals = [];
    let i = end + 2;
    while (i < text.length) {
      let j = text.indexOf('\r\n', i);
      if (j < 0) j = text.length;
      if (j === i) break; // the blank line ending the block
      const colon = text.indexOf(':', i);
      if (colon > i && colon < j) {
        let v = colon + 1;
        while (v < j && (text.charCodeAt(v) === 32 || text.charCodeAt(v) === 9)) v++;
        this.names.push(text.slice(i, colon));
        this.vals.push(text.slice(v, j));
      }
      i = j + 2;
    }
  }

  /** The first value of a header (exact name), or ''. */
  get(name) {
    const i = this.names.indexOf(name);
    return i < 0 ? '' : this.vals[i];
  }

  has(name) { return this.names.includes(name); }

  /** Every value of a header, in order. */
  values(name) {
    const out = [];
    for (let i = 0; i < this.names.length; i++) if (this.names[i] === name) out.push(this.vals[i]);
    return out;
  }

  /** The header names, each once, in order. */
  keys() { return [...new Set(this.names)]; }
}

/** A message's headers (RawHeaders, or nats.js's MsgHdrs), or null when it has none. */
export function headersOf(msg) {
  const m = msg._msg;
  const d = msg._rdata;
  if (m && d instanceof Uint8Array && typeof m.hdr === 'number') {
    if (m.hdr <= 0) return null;
    return new RawHeaders(utf8.decode(d.subarray(0, m.hdr)));
  }
  return msg.headers ?? null;
}

/**
 * The fields of a JetStream acknowledgement subject, `$JS.ACK.<stream>.<consumer>.<delivered>.
 * <sseq>.<cseq>.<ts>.<pending>` (9 tokens) or `$JS.ACK.<domain>.<account>.<stream>.<consumer>.
 * <delivered>.<sseq>.<cseq>.<ts>.<pending>.<token>` (12 tokens), read from the reply subject's
 * bytes when nats.js exposes them (no string decoding per message). `consumer` (the expected
 * consumer name's bytes): a message of another consumer gives false. Returns {seq, cseq, tsMs,
 * tsRest (the nanoseconds below the millisecond), pending}, false, or null (not an ack subject).
 */
export function ackInfo(msg, consumer) {
  const r = msg._msg?.reply;
  if (!(r instanceof Uint8Array)) return ackInfoOf(msg.reply, consumer);
  const dots = [];
  for (let i = 0; i < r.length && dots.length < 12; i++) if (r[i] === 46) dots.push(i);
  const n = dots.length + 1;
  if (n !== 9 && n !== 12) return null;
  const b = n === 9 ? 2 : 4; // the stream token
  const start = (k) => (k === 0 ? 0 : dots[k - 1] + 1);
  const end = (k) => (k < dots.length ? dots[k] : r.length);
  const cs = start(b + 1);
  if (end(b + 1) - cs !== consumer.length) return false;
  for (let i = 0; i < consumer.length; i++) if (r[cs + i] !== consumer[i]) return false;
  const num = (s, e) => {
    let v = 0;
    for (let i = s; i < e; i++) v = v * 10 + (r[i] - 48);
    return v;
  };
  const ts = start(b + 5);
  const te = end(b + 5);
  const cut = Math.max(ts, te - 6);
  return {
    seq: num(start(b + 3), end(b + 3)),
    cseq: num(start(b + 4), end(b + 4)),
    tsMs: num(ts, cut),
    tsRest: num(cut, te),
    pending: num(start(b + 6), end(b + 6)),
  };
}

const encoder = new TextEncoder();

function ackInfoOf(reply, consumer) {
  if (!reply) return null;
  const t = reply.split('.');
  if (t.length !== 9 && t.length !== 12) return null;
  const b = t.length === 9 ? 2 : 4;
  const name = encoder.encode(t[b + 1]);
  if (name.length !== consumer.length || name.some((x, i) => x !== consumer[i])) return false;
  const ts = t[b + 5];
  return { seq: Number(t[b + 3]), cseq: Number(t[b + 4]), tsMs: Number(ts.slice(0, -6) || '0'), tsRest: Number(ts.slice(-6)), pending: Number(t[b + 6]) };
}
