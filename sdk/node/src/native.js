// The native fast path (spec/builtins.md, "The native fast path"): JavaScript implementations of
// the built-in partitioners, written from spec/builtins.md, used instead of a topic's module only
// when the client was connected with `nativeBuiltins: true` and the epoch's module has exactly the
// digest of a built-in module this package ships (builtin/), without config. The module stays the
// reference: tests/native.test.js pins every function here to it (random keys, both entry
// points) and to spec/vectors; any other digest (an upload claiming compatible:<builtin>
// included) runs as a module.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Partitioner, builtinNames, keyBytes } from './partitioner.js';
import { LIMITS, PluginModule } from './runtime/host.js';
import { BadRequestError } from './errors.js';
import { murmur2 } from './murmur2.js';

const encoder = new TextEncoder();
const builtinDir = new URL('../builtin/', import.meta.url);

/** kafka-murmur2: (murmur2(key) & 0x7fffffff) % n. */
function kafkaMurmur2(key, n) {
  return (murmur2(key) & 0x7fffffff) % n;
}

/** linear-murmur2: h % 2b, folded by b when it is >= n (b = 2^floor(log2 n)). */
function linearMurmur2(key, n) {
  const h = murmur2(key) & 0x7fffffff;
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
function librdkafkaConsistent(key, n) {
  let c = -1;
  for (let i = 0; i < key.length; i++) c = CRC_TABLE[(c ^ key[i]) & 0xff] ^ (c >>> 8);
  return ((c ^ -1) >>> 0) % n;
}

/** FNV-1a 32 of the key as an int32. */
function fnv1a32(key) {
  let h = 0x811c9dc5 | 0;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key[i], 0x01000193);
  return h;
}

/** librdkafka-fnv1a: abs(h) as u32 (abs(INT32_MIN) = 0x80000000), unsigned % n. */
function librdkafkaFNV1a(key, n) {
  const h = fnv1a32(key);
  return ((h < 0 ? -h : h) >>> 0) % n; // -INT32_MIN is 2^31 as a Number: >>> 0 keeps 0x80000000
}

/** sarama-fnv1a: h % n truncating (JavaScript's % on Numbers), negated if negative. */
function saramaFNV1a(key, n) {
  const p = fnv1a32(key) % n;
  return p < 0 ? -p : p | 0; // | 0: a negative h with p = 0 gives -0 in JavaScript
}

const U64 = (x) => BigInt.asUintN(64, x);
const P1 = 0x9e3779b185ebca87n;
const P2 = 0xc2b2ae3d27d4eb4fn;
const P3 = 0x165667b19e3779f9n;
const P4 = 0x85ebca77c2b2ae63n;
const P5 = 0x27d4eb2f165667c5n;
const rotl = (x, r) => U64((x << BigInt(r)) | (x >> BigInt(64 - r)));
const round = (acc, input) => U64(rotl(U64(acc + U64(input * P2)), 31) * P1);
const merge = (acc, val) => U64((acc ^ round(0n, val)) * P1 + P4);
const le32 = (k, i) => BigInt((k[i] | (k[i + 1] << 8) | (k[i + 2] << 16) | (k[i + 3] << 24)) >>> 0);
const le64 = (k, i) => le32(k, i) | (le32(k, i + 4) << 32n);

/** XXH64 of the key with seed 0 (as Cyan4973/xxHash), as a BigInt. */
export function xxh64(key) {
  const len = key.length;
  let i = 0;
  let h;
  if (len >= 32) {
    let v1 = U64(P1 + P2);
    let v2 = P2;
    let v3 = 0n;
    let v4 = U64(-P1);
    for (; i + 32 <= len; i += 32) {
      v1 = round(v1, le64(key, i));
      v2 = round(v2, le64(key, i + 8));
      v3 = round(v3, le64(key, i + 16));
      v4 = round(v4, le64(key, i + 24));
    }
    h = U64(rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18));
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = P5;
  }
  h = U64(h + BigInt(len));
  for (; i + 8 <= len; i += 8) h = U64(rotl(h ^ round(0n, le64(key, i)), 27) * P1 + P4);
  if (i + 4 <= len) {
    h = U64(rotl(h ^ U64(le32(key, i) * P1), 23) * P2 + P3);
    i += 4;
  }
  for (; i < len; i++) h = U64(rotl(h ^ U64(BigInt(key[i]) * P5), 11) * P1);
  h ^= h >> 33n;
  h = U64(h * P2);
  h ^= h >> 29n;
  h = U64(h * P3);
  h ^= h >> 32n;
  return h;
}

/** jump: the paper's jump consistent hash over XXH64 (seed 0), its float expression in order. */
function jump(key, n) {
  let k = xxh64(key);
  let b = -1;
  let j = 0;
  while (j < n) {
    b = j;
    k = U64(k * 2862933555777941757n + 1n);
    j = Math.trunc((b + 1) * (2147483648 / (Number(k >> 33n) + 1)));
  }
  return b;
}

/** The native functions by built-in name: f(keyBytes, n) -> partition, for 1 <= n <= 2^31-1. */
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
 * A built-in's Partitioner that partitions natively: its module is loaded (digest, name, metadata
 * are the module's) but partition and partitionMany run the JavaScript function. The checks and
 * errors are the module path's: BadRequestError for a bad n or a key over 65536 bytes.
 */
export class NativePartitioner extends Partitioner {
  /** @private use nativeFor(). */
  constructor(module, config, fn) {
    super(module, config);
    this.native = fn;
  }

  partition(key, n) {
    if ((n | 0) !== n || n < 1) checkN(n);
    const k = typeof key === 'string' ? encoder.encode(key) : keyBytes(key);
    if (k.length > LIMITS.maxKey) throw new BadRequestError(`key too long: ${k.length} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    return this.native(k, n);
  }

  partitionMany(keys, n) {
    checkN(n);
    const ks = keys.map((k) => (typeof k === 'string' ? encoder.encode(k) : keyBytes(k)));
    ks.forEach((k, i) => {
      if (k.length > LIMITS.maxKey) throw new BadRequestError(`key too long: key ${i} has ${k.length} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    });
    const out = new Int32Array(ks.length);
    for (let i = 0; i < ks.length; i++) out[i] = this.native(ks[i], n);
    return out;
  }
}

function checkN(n) {
  if (!Number.isInteger(n) || n < 1 || n > LIMITS.maxPartitions) {
    throw new BadRequestError(`invalid partition count: ${n} is not an integer in [1, ${LIMITS.maxPartitions}]`);
  }
}

/**
 * The native Partitioner for an epoch's partitioner {digest, config}, or null: only when the
 * digest is exactly that of a built-in module this package ships and there is no config. The
 * module bytes are given (verified against the digest by the caller, Client.module) or read from
 * builtin/.
 */
export function nativeFor(p, bytes) {
  if (p.config) return null; // base64 config: any config at all runs the module
  const name = builtinDigests().get(p.digest);
  if (!name) return null;
  const b = bytes ?? readFileSync(new URL(`${name}.wasm`, builtinDir));
  const module = PluginModule.compile(b instanceof Uint8Array ? b : new Uint8Array(b), { source: `built-in ${name}` });
  if (module.digest !== p.digest) return null;
  return new NativePartitioner(module, new Uint8Array(0), NATIVE[name]);
}
