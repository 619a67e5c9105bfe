// The native fast path (spec/builtins.md, "The native fast path"): JavaScript implementations of
// the built-in partitioners, written from spec/builtins.md, used instead of a topic's module only
// when the client was connected with `nativeBuiltins: true` and the epoch's module has exactly the
// digest of a built-in module this package ships (builtin/), without config, and only in the call
// shapes where the native function is the faster (NATIVE_SHAPES: never for jump). The module stays the
// reference: tests/native.test.js pins every function here to it (random keys, both entry
// points) and to spec/vectors; any other digest (an upload claiming compatible:<builtin>
// included) runs as a module.

import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Partitioner, builtinNames, keyBytes } from './partitioner.js';
import { LIMITS, PluginModule } from './runtime/host.js';
import { BadRequestError } from './errors.js';
import { murmur2 } from './murmur2.js';

const encoder = new TextEncoder();
const builtinDir = new URL('../builtin/', import.meta.url);

/** kafka-murmur2: (murmur2(key) & 0x7fffffff) % n. */
function kafkaMurmur2(key, n, len = key.length, off = 0) {
  return (murmur2(key, len, off) & 0x7fffffff) % n;
}

/** linear-murmur2: h % 2b, folded by b when it is >= n (b = 2^floor(log2 n)). */
function linearMurmur2(key, n, len = key.length, off = 0) {
  const h = murmur2(key, len, off) & 0x7fffffff;
  const b = 2 ** (31 - Math.clz32(n)); // n >= 1: b <= n < 2b
  let p = h % (2 * b);
  if (p >= n) p -= b;
  return p;
}

const CRC_TABLE = (() => {
  const t = new Int32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[i] = c;
  }
  return t;
})();

/** librdkafka-consistent: crc32 (IEEE, as zlib) of the key, unsigned % n. */
function librdkafkaConsistent(key, n, len = key.length, off = 0) {
  let c = -1;
  for (let i = off, end = off + len; i < end; i++) c = CRC_TABLE[(c ^ key[i]) & 0xff] ^ (c >>> 8);
  return ((c ^ -1) >>> 0) % n;
}

/** FNV-1a 32 of the key's len bytes from off as an int32. */
function fnv1a32(key, len, off) {
  let h = 0x811c9dc5 | 0;
  for (let i = off, end = off + len; i < end; i++) h = Math.imul(h ^ key[i], 0x01000193);
  return h;
}

/** librdkafka-fnv1a: abs(h) as u32 (abs(INT32_MIN) = 0x80000000), unsigned % n. */
function librdkafkaFNV1a(key, n, len = key.length, off = 0) {
  const h = fnv1a32(key, len, off);
  return ((h < 0 ? -h : h) >>> 0) % n; // -INT32_MIN is 2^31 as a Number: >>> 0 keeps 0x80000000
}

/** sarama-fnv1a: h % n truncating (JavaScript's % on Numbers), negated if negative. */
function saramaFNV1a(key, n, len = key.length, off = 0) {
  const p = fnv1a32(key, len, off) % n;
  return p < 0 ? -p : p | 0; // | 0: a negative h with p = 0 gives -0 in JavaScript
}

// XXH64 and jump's 64-bit LCG on pairs of uint32 halves (hi, lo), no BigInt: a BigInt operation
// allocates, and jump ran 7 to 10 times slower natively than its module did. Results of mul64
// and the rounds come back in the module-level R, a Uint32Array (a uint32 above 2^30 in a plain
// variable is a heap number: an allocation on every store); every
// value is a uint32 (>>> 0) between the steps.
const R = new Uint32Array(2); // R[0]:R[1], the high and low halves of a result

/**
 * R = (ah:al * bh:bl) mod 2^64 for 32-bit halves (uint32 or int32 alike): al*bl whole from 16-bit
 * limbs, its 16-bit columns summed with their carries, plus the cross terms' low halves (Math.imul);
 * integer operations only, each sum exact, the stores into R taking them mod 2^32.
 */
function mul64(ah, al, bh, bl) {
  const a0 = al & 0xffff;
  const a1 = al >>> 16;
  const b0 = bl & 0xffff;
  const b1 = bl >>> 16;
  const p00 = Math.imul(a0, b0);
  const p01 = Math.imul(a0, b1);
  const p10 = Math.imul(a1, b0);
  const c16 = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff); // bits 16-31 and their carry, < 3 * 2^16
  R[1] = (c16 << 16) | (p00 & 0xffff);
  R[0] = Math.imul(a1, b1) + (p01 >>> 16) + (p10 >>> 16) + (c16 >>> 16) + Math.imul(ah, bl) + Math.imul(al, bh);
}

// The primes of XXH64 (Cyan4973/xxHash, doc/xxhash_spec.md), as hi, lo.
const P1H = 0x9e3779b1, P1L = 0x85ebca87;
const P2H = 0xc2b2ae3d, P2L = 0x27d4eb4f;
const P3H = 0x165667b1, P3L = 0x9e3779f9;
const P4H = 0x85ebca77, P4L = 0xc2b2ae63;
const P5H = 0x27d4eb2f, P5L = 0x165667c5;

/** R = round(acc, input) = rotl(acc + input * P2, 31) * P1. */
function round(ah, al, ih, il) {
  mul64(ih, il, P2H, P2L);
  const l = al + R[1];
  const h = (ah + R[0] + (l > 0xffffffff ? 1 : 0)) >>> 0;
  const lo = l >>> 0;
  mul64(((h << 31) | (lo >>> 1)) >>> 0, ((lo << 31) | (h >>> 1)) >>> 0, P1H, P1L);
}

/** R = (acc ^ round(0, val)) * P1 + P4. */
function merge(ah, al, vh, vl) {
  round(0, 0, vh, vl);
  mul64((ah ^ R[0]) >>> 0, (al ^ R[1]) >>> 0, P1H, P1L);
  const l = R[1] + P4L;
  R[0] = (R[0] + P4H + (l > 0xffffffff ? 1 : 0)) >>> 0;
  R[1] = l >>> 0;
}

const le32 = (k, i) => (k[i] | (k[i + 1] << 8) | (k[i + 2] << 16) | (k[i + 3] << 24)) >>> 0;

/** rotl of h:l by r in [1, 31]: the high half into R[0], the low half returned. */
function rotl(h, l, r) {
  R[0] = ((h << r) | (l >>> (32 - r))) >>> 0;
  return ((l << r) | (h >>> (32 - r))) >>> 0;
}

/** XXH64 of the key's len bytes from off with seed 0 (as Cyan4973/xxHash) into R. */
function xxh64HL(key, len, off) {
  let i = off;
  const end = off + len;
  let hh;
  let hl;
  if (len >= 32) {
    // v1 = P1 + P2, v2 = P2, v3 = 0, v4 = -P1 (seed 0)
    let v1h = 0x60ea27ee, v1l = 0xadc0b5d6;
    let v2h = P2H, v2l = P2L;
    let v3h = 0, v3l = 0;
    let v4h = 0x61c8864e, v4l = 0x7a143579;
    for (; i + 32 <= end; i += 32) {
      round(v1h, v1l, le32(key, i + 4), le32(key, i)); v1h = R[0]; v1l = R[1];
      round(v2h, v2l, le32(key, i + 12), le32(key, i + 8)); v2h = R[0]; v2l = R[1];
      round(v3h, v3l, le32(key, i + 20), le32(key, i + 16)); v3h = R[0]; v3l = R[1];
      round(v4h, v4l, le32(key, i + 28), le32(key, i + 24)); v4h = R[0]; v4l = R[1];
    }
    // h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18), summed in doubles (< 2^35) with the carries
    let l = rotl(v1h, v1l, 1);
    let h = R[0];
    l += rotl(v2h, v2l, 7);
    h += R[0];
    l += rotl(v3h, v3l, 12);
    h += R[0];
    l += rotl(v4h, v4l, 18);
    h += R[0];
    hh = (h + Math.floor(l / 4294967296)) >>> 0;
    hl = l >>> 0;
    merge(hh, hl, v1h, v1l);
    merge(R[0], R[1], v2h, v2l);
    merge(R[0], R[1], v3h, v3l);
    merge(R[0], R[1], v4h, v4l);
    hh = R[0];
    hl = R[1];
  } else {
    hh = P5H;
    hl = P5L;
  }
  // h += len (len <= 65536 here, and any array length < 2^32)
  let l = hl + len;
  hh = (hh + (l > 0xffffffff ? 1 : 0)) >>> 0;
  hl = l >>> 0;
  for (; i + 8 <= end; i += 8) {
    round(0, 0, le32(key, i + 4), le32(key, i));
    l = rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 27);
    mul64(R[0], l, P1H, P1L);
    l = R[1] + P4L;
    hh = (R[0] + P4H + (l > 0xffffffff ? 1 : 0)) >>> 0;
    hl = l >>> 0;
  }
  if (i + 4 <= end) {
    mul64(0, le32(key, i), P1H, P1L);
    l = rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 23);
    mul64(R[0], l, P2H, P2L);
    l = R[1] + P3L;
    hh = (R[0] + P3H + (l > 0xffffffff ? 1 : 0)) >>> 0;
    hl = l >>> 0;
    i += 4;
  }
  for (; i < end; i++) {
    mul64(0, key[i], P5H, P5L);
    l = rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 11);
    mul64(R[0], l, P1H, P1L);
    hh = R[0];
    hl = R[1];
  }
  // avalanche: h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32
  hl = (hl ^ (hh >>> 1)) >>> 0;
  mul64(hh, hl, P2H, P2L);
  hl = (R[1] ^ ((R[1] >>> 29) | (R[0] << 3))) >>> 0;
  hh = (R[0] ^ (R[0] >>> 29)) >>> 0;
  mul64(hh, hl, P3H, P3L);
  R[1] = (R[1] ^ R[0]) >>> 0;
}

/** XXH64 of the key with seed 0 (as Cyan4973/xxHash), as a BigInt (for tests; jump uses the halves). */
export function xxh64(key) {
  xxh64HL(key, key.length, 0);
  return (BigInt(R[0]) << 32n) | BigInt(R[1]);
}

// jump's LCG multiplier 2862933555777941757 = 0x27bb2ee687b0b0fd.
const JH = 0x27bb2ee6;
const JL = 0x87b0b0fd;

/** jump: the paper's jump consistent hash over XXH64 (seed 0), its float expression in order. */
function jump(key, n, len = key.length, off = 0) {
  xxh64HL(key, len, off);
  let kh = R[0];
  let kl = R[1];
  let b = -1;
  let j = 0;
  while (j < n) {
    b = j;
    mul64(kh, kl, JH, JL); // k = k * 2862933555777941757 + 1
    const l = R[1] + 1;
    kh = (R[0] + (l > 0xffffffff ? 1 : 0)) >>> 0;
    kl = l >>> 0;
    j = Math.trunc((b + 1) * (2147483648 / ((kh >>> 1) + 1))); // k >> 33 is the high half >>> 1
  }
  return b;
}

/**
 * The native functions by built-in name: f(bytes, n, len = bytes.length, off = 0) -> partition of
 * the key that is bytes[off, off + len), for 1 <= n <= 2^31-1.
 */
export const NATIVE = Object.freeze({
  jump,
  'kafka-murmur2': kafkaMurmur2,
  'librdkafka-consistent': librdkafkaConsistent,
  'librdkafka-fnv1a': librdkafkaFNV1a,
  'linear-murmur2': linearMurmur2,
  'sarama-fnv1a': saramaFNV1a,
});

let digests = null;

/** digest -> built-in name, for the modules this package ships (builtin/), computed once. */
export function builtinDigests() {
  if (!digests) {
    digests = new Map();
    for (const name of builtinNames()) {
      if (!NATIVE[name]) continue;
      const d = createHash('sha256').update(readFileSync(new URL(`${name}.wasm`, builtinDir))).digest('hex');
      digests.set(d, name);
    }
  }
  return digests;
}

/**
 * Where the native function is chosen, per built-in and call shape: `call` (partition) and `many`
 * (partitionMany); a built-in not listed is native in both. The fast path exists to be faster than
 * the module, and a native path slower than the module on V8 must not be chosen (RATIONALE.md,
 * "Why does Python's native batch pack keys..."): jump's XXH64 and 64-bit LCG on 32-bit halves cost
 * some ten integer operations per 64-bit multiply, where its module does one i64.mul, and measured
 * 0.70-0.85x of the module's speed (tests/native.test.js, "per call", 16-byte keys: single calls
 * and batches, byte and string keys alike, in the same runs), so both of its shapes run its module.
 * The native function stays pinned to the module by the tests (NATIVE.jump) for when V8 changes.
 */
export const NATIVE_SHAPES = Object.freeze({
  jump: Object.freeze({ call: false, many: false }),
});
const EVERY_SHAPE = Object.freeze({ call: true, many: true });

/**
 * A built-in's Partitioner that partitions natively: its module is loaded (digest, name, metadata
 * are the module's) but partition and partitionMany run the JavaScript function, each unless its
 * shape runs the module (NATIVE_SHAPES). The checks and errors are the module path's:
 * BadRequestError for a bad n or a key over 65536 bytes.
 */
export class NativePartitioner extends Partitioner {
  /** @private use nativeFor(). */
  constructor(module, config, fn, shapes = EVERY_SHAPE) {
    super(module, config);
    this.native = fn;
    this.shapes = shapes;
  }

  partition(key, n) {
    if (!this.shapes.call) return super.partition(key, n);
    if ((n | 0) !== n || n < 1) checkN(n);
    if (typeof key === 'string') return this.native(scratch, n, encodeKey(key, -1), 0);
    const k = keyBytes(key);
    if (k.length > LIMITS.maxKey) throw new BadRequestError(`key too long: ${k.length} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    return this.native(k, n, k.length, 0);
  }

  partitionMany(keys, n) {
    if (!this.shapes.many) return super.partitionMany(keys, n);
    checkN(n);
    const f = this.native;
    const out = new Int32Array(keys.length);
    let i = 0;
    while (i < keys.length) {
      const key = keys[i];
      if (typeof key === 'string') {
        i = stringRun(f, keys, i, n, out);
      } else {
        const k = keyBytes(key);
        if (k.length > LIMITS.maxKey) throw new BadRequestError(`key too long: key ${i} has ${k.length} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
        out[i] = f(k, n, k.length, 0);
        i++;
      }
    }
    return out;
  }
}

/**
 * The partitions of the run of string keys from keys[i] (up to RUN_UNITS UTF-16 units and
 * RUN_KEYS keys of them, at least one key) into out; returns the index after the run. The run is
 * encoded with one encodeInto of the keys joined, and every key is hashed in place at its offset,
 * no call into C++ per key. When every unit is ASCII (bytes written = units read: any other unit
 * takes 2 or 3 bytes, a surrogate pair 4 for its 2 units) each key's bytes are its units. Otherwise
 * the joined UTF-8 is still each key's UTF-8 laid end to end (UTF-8 encodes each code point on its
 * own) except where a key's trailing high surrogate meets the next key's leading low one, which
 * joined are one pair (4 bytes) and apart two U+FFFD (3 each): a key without a unit that is not
 * ASCII (found by NON_ASCII_G from the last such key on) has as many bytes as units, a key with
 * one is measured by utf8Length from that unit on, and a key that would pair is encoded on its own
 * (encodeKey) and ends the run. A run dense in keys that are not ASCII is finished key by key, and
 * so are the next keys (DENSE_KEYS below). A key of more than RUN_UNITS units is a run of its own,
 * encoded on its own (the limit's check is there).
 */
function stringRun(f, keys, i, n, out) {
  let s = keys[i];
  let j = i + 1;
  if (perKeyLeft > 0 || s.length > RUN_UNITS) { // after a dense run: the next keys one by one
    const last = Math.min(keys.length, i + Math.max(perKeyLeft, 1));
    while (j < last && typeof keys[j] === 'string') j++;
    perKeyLeft = Math.max(0, perKeyLeft - (j - i));
    keyByKey(f, keys, i, j, n, out);
    return j;
  }
  const last = Math.min(keys.length, i + runKeys);
  for (; j < last; j++) {
    const k = keys[j];
    if (typeof k !== 'string' || s.length + k.length > RUN_UNITS) break;
    s += k;
  }
  let off = 0;
  if (encoder.encodeInto(s, scratch).written === s.length) {
    for (let x = i; x < j; x++) {
      const len = keys[x].length;
      out[x] = f(scratch, n, len, off);
      off += len;
    }
    backoff = 0;
    if (runKeys < RUN_KEYS) runKeys *= 2;
    return j;
  }
  NON_ASCII_G.lastIndex = 0;
  let p = NON_ASCII_G.exec(s).index; // the next unit that is not ASCII (there is one)
  let u = 0; // units of the keys before x
  let seen = 0; // keys with a unit that is not ASCII
  for (let x = i; x < j; x++) {
    const key = keys[x];
    const len = key.length;
    if (p >= u + len) { // ASCII
      out[x] = f(scratch, n, len, off);
      off += len;
      u += len;
      continue;
    }
    if (++seen > DENSE_KEYS && DENSE_SHARE * seen > x - i) { // dense: the rest of the run key by key
      keyByKey(f, keys, x, j, n, out);
      perKeyLeft = backoff = Math.min(MAX_BACKOFF, 2 * backoff || RUN_KEYS);
      runKeys = MIN_RUN_KEYS;
      return j;
    }
    u += len;
    const end = key.charCodeAt(len - 1);
    if (end >= 0xd800 && end <= 0xdbff && u < s.length && (s.charCodeAt(u) & 0xfc00) === 0xdc00) {
      out[x] = f(scratch, n, encodeKey(key, x), 0); // joined, a pair with the next key's low surrogate
      return x + 1;
    }
    const bytes = utf8Length(key, p - (u - len));
    if (bytes > LIMITS.maxKey) throw keyTooLong(bytes, x);
    out[x] = f(scratch, n, bytes, off);
    off += bytes;
    NON_ASCII_G.lastIndex = u;
    const m = NON_ASCII_G.exec(s);
    p = m === null ? s.length : m.index;
  }
  backoff = 0;
  if (runKeys < RUN_KEYS) runKeys *= 2;
  return j;
}

// The partitions of the string keys keys[i:j], each encoded on its own into scratch.
function keyByKey(f, keys, i, j, n, out) {
  for (let x = i; x < j; x++) {
    const k = keys[x];
    out[x] = f(scratch, n, k.length <= SHORT_UNITS ? encoder.encodeInto(k, scratch).written : encodeKey(k, x), 0);
  }
}

// The UTF-8 length of key, whose units before `from` are ASCII, as encodeInto writes it: a lone
// surrogate becomes U+FFFD (3 bytes), a pair 4 bytes.
function utf8Length(key, from) {
  let b = from;
  const len = key.length;
  for (let q = from; q < len; q++) {
    const c = key.charCodeAt(q);
    if (c < 0x80) b++;
    else if (c < 0x800) b += 2;
    else if ((c & 0xfc00) === 0xd800 && q + 1 < len && (key.charCodeAt(q + 1) & 0xfc00) === 0xdc00) {
      b += 4;
      q++;
    } else b += 3;
  }
  return b;
}

// String keys are hashed from their UTF-8 in one buffer, reused by every call (one thread: a call
// never yields between encoding and hashing), not from a Uint8Array allocated per key. A UTF-16
// unit takes at most 3 bytes of UTF-8, so any string of at most LIMITS.maxKey units fits, and a
// longer one has more than LIMITS.maxKey bytes anyway.
const scratch = new Uint8Array(3 * LIMITS.maxKey);
// A batch's run of string keys encoded at once (stringRun): at most this many UTF-16 units, so
// its UTF-8 fits scratch, and no key of the run can be over the limit but by its non-ASCII units;
// and at most RUN_KEYS keys. (Before, a run that was not all ASCII ended at its first key that
// was not, and the next keys were encoded one by one for a while: keys of which one in 50 is not
// ASCII measured 0.69x of key-by-key encoding.)
const RUN_UNITS = LIMITS.maxKey;
// A key of at most this many units has at most LIMITS.maxKey bytes: no check of its length.
const SHORT_UNITS = Math.floor(LIMITS.maxKey / 3);
const NON_ASCII_G = /[^\x00-\x7f]/g;
const RUN_KEYS = 4096;
// Finding each key that is not ASCII costs more than encoding it on its own when many are: a run
// in which more than DENSE_KEYS keys and more than one in DENSE_SHARE so far are not ASCII is
// finished key by key, and the next perKeyLeft string keys too (backoff: RUN_KEYS, doubled after
// each further dense run to MAX_BACKOFF, none after a run that was not dense); the run after
// those takes MIN_RUN_KEYS keys (runKeys), twice as many after each run that was not dense, up to
// RUN_KEYS. The state is only speed: every key's bytes are the same.
const MIN_RUN_KEYS = 64;
let runKeys = RUN_KEYS;
const DENSE_KEYS = 8;
const DENSE_SHARE = 8;
const MAX_BACKOFF = 8 * RUN_KEYS;
let backoff = 0;
let perKeyLeft = 0;

/** The UTF-8 of key into scratch, its length returned; a key over the limit throws (key i, or -1 for a single call). */
function encodeKey(key, i) {
  const len = key.length <= LIMITS.maxKey ? encoder.encodeInto(key, scratch).written : Buffer.byteLength(key, 'utf8');
  if (len > LIMITS.maxKey) throw keyTooLong(len, i);
  return len;
}

const keyTooLong = (len, i) => new BadRequestError(`key too long: ${i < 0 ? `${len} bytes` : `key ${i} has ${len} bytes`}; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);

function checkN(n) {
  if (!Number.isInteger(n) || n < 1 || n > LIMITS.maxPartitions) {
    throw new BadRequestError(`invalid partition count: ${n} is not an integer in [1, ${LIMITS.maxPartitions}]`);
  }
}

/**
 * The native Partitioner for an epoch's partitioner {digest, config}, or null: only when the
 * digest is exactly that of a built-in module this package ships, there is no config and the
 * built-in is native in at least one call shape (NATIVE_SHAPES; jump is in none). The module bytes
 * are given (verified against the digest by the caller, Client.module) or read from builtin/.
 * `everyShape: true` (tests and benchmarks) runs the native function in every shape.
 */
export function nativeFor(p, bytes, { everyShape = false } = {}) {
  if (p.config) return null; // base64 config: any config at all runs the module
  const name = builtinDigests().get(p.digest);
  if (!name) return null;
  const shapes = everyShape ? EVERY_SHAPE : (NATIVE_SHAPES[name] ?? EVERY_SHAPE);
  if (!shapes.call && !shapes.many) return null; // the module is faster in every shape
  const b = bytes ?? readFileSync(new URL(`${name}.wasm`, builtinDir));
  const module = PluginModule.compile(b instanceof Uint8Array ? b : new Uint8Array(b), { source: `built-in ${name}` });
  if (module.digest !== p.digest) return null;
  return new NativePartitioner(module, new Uint8Array(0), NATIVE[name], shapes);
}
