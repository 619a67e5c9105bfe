// Canonical config bytes of spec/abi-v1.md §2.5, with the validation of Go's
// partitioner.EncodeConfig: lines "K=V\n" sorted by K (bytewise), K matching [A-Za-z0-9_.-]+ and
// given at most once, V UTF-8 without "\n"; no pairs is the empty config.

const KEY_RE = /^[A-Za-z0-9_.-]+$/;

/** Thrown for a pair that breaks the rules; the message starts with "bad partitioner config". */
export class ConfigError extends Error {}

/** pairs: array of "K=V" strings. Returns a Uint8Array. */
export function encodeConfig(pairs) {
  const seen = new Map();
  for (const p of pairs) {
    const i = p.indexOf('=');
    if (i < 0) throw new ConfigError(`bad partitioner config: ${JSON.stringify(p)} has no '='; write KEY=VALUE`);
    const k = p.slice(0, i);
    const v = p.slice(i + 1);
    if (!KEY_RE.test(k)) throw new ConfigError(`bad partitioner config: key ${JSON.stringify(k)} must match [A-Za-z0-9_.-]+`);
    if (v.includes('\n') || !v.isWellFormed()) throw new ConfigError(`bad partitioner config: value of ${JSON.stringify(k)} must be UTF-8 without newlines`);
    if (seen.has(k)) throw new ConfigError(`bad partitioner config: key ${JSON.stringify(k)} given twice (${JSON.stringify(seen.get(k))} and ${JSON.stringify(v)})`);
    seen.set(k, v);
  }
  // Keys are ASCII, so UTF-16 order is byte order.
  const keys = [...seen.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return new TextEncoder().encode(keys.map((k) => `${k}=${seen.get(k)}\n`).join(''));
}
