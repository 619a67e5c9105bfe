// The record lines of `pctl consume --format jsonl --timestamps`, byte for byte (cmd/pctl/consume.go):
//   {"topic","partition","epoch","seq","key"|"key_b64","value"|"value_b64","producer","pseq","ts"}
// in that order; key (absent for a keyless record) and value as strings when they are valid UTF-8,
// else as standard base64 in key_b64/value_b64; producer, pseq and ts left out when empty or 0.
// Strings are escaped the way Go's encoding/json does: \" \\ \b \f \n \r \t, other control
// characters as \u00XX, and <, >, &, U+2028, U+2029 as \u003c, \u003e, \u0026, \u2028, \u2029.

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
// eslint-disable-next-line no-control-regex
const NEEDS_ESCAPE = /["\\<>&\u0000-\u001f\u2028\u2029]/;
const SHORT = { '"': '\\"', '\\': '\\\\', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * A string as Go's %q (strconv.Quote) writes it: printable characters as they are; \a \b \f
 * \n \r \t \v \\ \"; other control characters as \xNN; other unprintable ones as \uNNNN or
 * \UNNNNNNNN. (Printable: Unicode letters, marks, numbers, punctuation, symbols and the ASCII
 * space, as Go's unicode.IsPrint; the two Unicode versions may differ on new characters.)
 */
export function goQuote(s) {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (c === 0x20 || (c > 0x7e || c > 0x20) && PRINT_RE.test(ch) && c !== 0x7f) out += ch;
    else if (GO_ESC[ch]) out += GO_ESC[ch];
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else if (c < 0x10000) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += `\\U${c.toString(16).padStart(8, '0')}`;
  }
  return `${out}"`;
}
const PRINT_RE = /^[\p{L}\p{M}\p{N}\p{P}\p{S}]$/u;
const GO_ESC = { '\x07': '\\a', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v' };

/** A JSON string literal as Go's json.Marshal writes it. */
export function goString(s) {
  if (!NEEDS_ESCAPE.test(s)) return `"${s}"`;
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (SHORT[ch]) out += SHORT[ch];
    else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&' || c === 0x2028 || c === 0x2029) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

// The UTF-8 text of bytes, or null when they are not valid UTF-8 (Go's utf8.Valid).
function text(b) {
  try {
    return utf8.decode(b);
  } catch {
    return null;
  }
}

function field(name, bytes) {
  const s = text(bytes);
  return s === null ? `,"${name}_b64":"${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('base64')}"` : `,"${name}":${goString(s)}`;
}

// Pctl-Seq as Go's strconv.ParseUint reads it (0, left out, when it is not a uint64).
function pseqOf(v) {
  if (!v || !/^[0-9]+$/.test(v)) return '0';
  const n = BigInt(v);
  return n > 0xffffffffffffffffn ? '0' : n.toString();
}

/** One output line (with its newline) for a delivered Message; ts: BigInt nanoseconds or null. */
export function recordLine(m, ts) {
  const h = m.raw.headers;
  let line = `{"topic":${goString(m.topic)},"partition":${m.partition},"epoch":${Number.isInteger(m.epoch) ? m.epoch : 0},"seq":${m.seq}`;
  if (m.key !== null) line += field('key', m.key);
  line += field('value', m.value);
  const producer = h ? h.get('Pctl-Producer') : '';
  if (producer) line += `,"producer":${goString(producer)}`;
  const pseq = pseqOf(h ? h.get('Pctl-Seq') : '');
  if (pseq !== '0') line += `,"pseq":${pseq}`;
  if (ts) line += `,"ts":${ts}`;
  if (m.misplaced) {
    line += ',"misplaced":true';
    if (m.misplaced.expected >= 0) line += `,"expected_partition":${m.misplaced.expected}`;
    if (m.misplaced.reason) line += `,"misplaced_reason":${goString(m.misplaced.reason)}`;
  }
  if (m.tombstone) line += ',"tombstone":true';
  if (m.backfill) line += `,"backfill":"${m.backfill.epoch}/${m.backfill.partition}/${m.backfill.seq}"`;
  return `${line}}\n`;
}
