// The native fast path (spec/builtins.md): every JavaScript built-in of src/native.js against its
// spec/vectors file (partitions computed by the real clients, never by pctl), against this SDK's
// own run of the built-in's WebAssembly module on random keys through both entry points, and the
// switch: only connect({nativeBuiltins: true}) and only a built-in's exact digest without config
// take the native path (a real broker: a topic of the built-in and one of another module).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { loadavg } from 'node:os';
import { Partitioner, builtinNames, BadRequestError, connect } from '../src/index.js';
import { NATIVE, NATIVE_SHAPES, NativePartitioner, nativeFor, builtinDigests, xxh64 } from '../src/native.js';
import { startBroker, missingToolchain, pctlPartitions, root } from './broker.js';

const hex = (h) => new Uint8Array(Buffer.from(h, 'hex'));
const NS = [1, 2, 3, 7, 8, 16, 31, 100, 1000, 65535, 2147483647];
// Random keys per built-in, each against the 11 counts of NS (3.3 million comparisons; the Go
// test's million keys run with PCTL_NATIVE_KEYS=1000000, 11 to 15 s per built-in on this machine),
// jump included now that its XXH64 runs on 32-bit halves instead of BigInt.
const KEYS = Number(process.env.PCTL_NATIVE_KEYS ?? 300_000);

/** count keys of 0 to 300 random bytes (mulberry32, seeded), views into one buffer. */
function randomKeys(seed, count) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
  const lens = Array.from({ length: count }, () => next() % 301);
  const arena = Buffer.alloc(lens.reduce((a, b) => a + b, 0));
  for (let i = 0; i < arena.length; i++) arena[i] = next() & 0xff;
  const keys = [];
  let off = 0;
  for (const l of lens) { keys.push(arena.subarray(off, off + l)); off += l; }
  return keys;
}

/** keys.txt expanded: [key hex, n] per case, in order. */
function keysTxt() {
  const out = [];
  for (const line of readFileSync(`${root}spec/vectors/keys.txt`, 'utf8').split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [ns, k] = line.split(' ');
    for (const n of ns.split(',')) out.push([k.slice(1), Number(n)]);
  }
  return out;
}

test('native: every built-in has a native function, and only the built-ins', () => {
  assert.deepEqual(Object.keys(NATIVE).sort(), builtinNames());
  assert.equal(builtinDigests().size, builtinNames().length);
});

test('native: every built-in against its spec/vectors file (all keys of keys.txt, every n)', () => {
  const cases = keysTxt();
  for (const name of builtinNames()) {
    const v = JSON.parse(readFileSync(`${root}spec/vectors/${name}.json`, 'utf8'));
    assert.equal(v.partitioner, name);
    assert.deepEqual(v.cases.map((c) => [c.key_hex, c.n]), cases, `${name}.json: the cases of keys.txt`);
    const f = NATIVE[name];
    const p = nativeFor({ digest: Partitioner.builtin(name).digest }, undefined, { everyShape: true });
    for (const c of v.cases) {
      const k = hex(c.key_hex);
      assert.ok(Object.is(f(k, c.n), c.partition), `${name}: key ${c.key_hex} n=${c.n}: native gives ${f(k, c.n)}, ${v.source} gives ${c.partition}`);
    }
    const byN = new Map();
    for (const c of v.cases) byN.set(c.n, [...(byN.get(c.n) ?? []), c]);
    for (const [n, cs] of byN) {
      assert.deepEqual([...p.partitionMany(cs.map((c) => hex(c.key_hex)), n)], cs.map((c) => c.partition), `${name} partitionMany n=${n}`);
    }
  }
});

// XXH64 (seed 0) known answers published with other implementations, never computed here:
// ClickHouse's tests/queries/0_stateless/00803_xxhash.sql ('', 'ABC', 'xxhash'), ifduyue/nim-xxhash's
// tests/test_xxh64_update.nim ('a', 'ab', 'abc'), the KnownAnswerTest of mbo::hash (one case per
// length class of the reference: the 4-byte and 8-byte tails, one 32-byte stripe, 31 bytes of tail)
// and the xx_hash Rust crate's tests (43 and 39 bytes: stripes then tails). jump hashes keys with it,
// so a wrong XXH64 remaps keys of every jump topic.
const XXH64_KNOWN = [
  ['', 0xef46db3751d8e999n],
  ['a', 15154266338359012955n],
  ['ab', 7347350983217793633n],
  ['abc', 4952883123889572249n],
  ['ABC', 0xe66ae7354fcfee98n],
  ['xxhash', 0x32dd38952c4bc720n],
  ['1234', 0xd8316e61d84f6ba4n],
  ['12345678', 0xd2d02f08cf7cfd4an],
  ['123456789012345', 0xc377d78ade001a3cn],
  ['1234567890123456', 0xb61c33dc6c59f270n],
  ['1234567890123456789012345678901', 0x8f367cb873a5376en],
  ['12345678901234567890123456789012', 0x40fd1aa52d98274cn],
  ['The quick brown fox jumps over the lazy dog', 0x0b242d361fda71bcn],
  ['Nobody inspects the spammish repetition', 0xfbcea83c8a378bf1n],
];

test('native XXH64 (jump\'s hash, on 32-bit halves) gives the published known answers', () => {
  for (const [s, want] of XXH64_KNOWN) {
    const got = xxh64(new TextEncoder().encode(s));
    assert.equal(got, want, `XXH64(${JSON.stringify(s)}) = ${got.toString(16)}, published ${want.toString(16)}: keys of jump topics would remap`);
  }
});

for (const name of ['kafka-murmur2', 'linear-murmur2', 'librdkafka-consistent', 'librdkafka-fnv1a', 'sarama-fnv1a', 'jump']) {
  const count = KEYS;
  test(`native ${name} agrees with its WebAssembly module: ${count} random keys of 0-300 bytes, n in {${NS.join(', ')}}`, () => {
    const keys = randomKeys(1, count);
    const wasm = Partitioner.builtin(name);
    const f = NATIVE[name];
    for (const n of NS) {
      const got = wasm.partitionMany(keys, n); // pctl_partition_batch
      for (let i = 0; i < keys.length; i++) {
        const want = f(keys[i], n);
        if (!Object.is(got[i], want)) assert.fail(`${name} n=${n} key=${Buffer.from(keys[i]).toString('hex')}: wasm ${got[i]}, native ${want}: the native implementation is not the module's`);
      }
    }
    for (let i = 0; i < 20000 && i < keys.length; i++) { // pctl_partition, the single-call export
      const n = NS[i % NS.length];
      const r = wasm.partition(keys[i], n);
      if (!Object.is(r, f(keys[i], n))) assert.fail(`${name} single call n=${n} key=${Buffer.from(keys[i]).toString('hex')}: wasm ${r}, native ${f(keys[i], n)}`);
    }
  });
}

// String keys go through one reused UTF-8 buffer (encodeInto), hashed to the encoded length: a
// short key after a long one must not see the long one's bytes, and multi-byte UTF-8 (2, 3 and
// 4 bytes, lone surrogates as U+FFFD) must be the bytes the module gets.
function randomStrings(seed, count) {
  let x = seed >>> 0;
  const next = () => { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; return x; };
  const alphabet = ['a', 'Z', '0', '-', 'é', 'ß', '€', '中', '😀', '\ud800', '\udc00', '\u0000'];
  return Array.from({ length: count }, () => {
    const len = next() % 40;
    let t = '';
    for (let i = 0; i < len; i++) t += next() % 4 === 0 ? alphabet[next() % alphabet.length] : String.fromCharCode(32 + (next() % 95));
    return t;
  });
}

for (const name of ['kafka-murmur2', 'linear-murmur2', 'librdkafka-consistent', 'librdkafka-fnv1a', 'sarama-fnv1a', 'jump']) {
  test(`native ${name}: string keys (the reused UTF-8 buffer) agree with the module, batched and per call`, () => {
    const strings = randomStrings(7, 20_000);
    strings.push('x'.repeat(300), '', 'é'.repeat(21845), 'y'); // a long key, then short ones after it
    const wasm = Partitioner.builtin(name);
    const nat = nativeFor({ digest: wasm.digest }, undefined, { everyShape: true }); // the native function even where the module is chosen
    for (const n of [1, 7, 1000, 2147483647]) {
      const want = wasm.partitionMany(strings, n);
      const got = nat.partitionMany(strings, n);
      for (let i = 0; i < strings.length; i++) {
        if (got[i] !== want[i]) assert.fail(`${name} partitionMany n=${n} key ${JSON.stringify(strings[i])}: wasm ${want[i]}, native ${got[i]}`);
      }
      for (let i = 0; i < strings.length; i += 7) {
        const r = nat.partition(strings[i], n);
        if (r !== want[i]) assert.fail(`${name} partition n=${n} key ${JSON.stringify(strings[i])}: wasm ${want[i]}, native ${r}`);
      }
    }
    const over = 'é'.repeat(32769); // 65538 bytes in 32769 units
    assert.throws(() => nat.partition(over, 3), (e) => e instanceof BadRequestError && /key too long: 65538 bytes/.test(e.message));
    assert.throws(() => nat.partitionMany(['a', over], 3), (e) => e instanceof BadRequestError && /key 1 has 65538 bytes/.test(e.message));
    assert.throws(() => nat.partitionMany(['a', 'b'.repeat(65537)], 3), (e) => e instanceof BadRequestError && /key 1 has 65537 bytes/.test(e.message));
    assert.equal(nat.partition('é'.repeat(32768), 3), wasm.partition('é'.repeat(32768), 3), 'a key of exactly 65536 bytes is a key');
  });
}

// The native batch hashes a run of string keys from one encodeInto of the keys joined, each key in
// place at its offset (stringRun); here the runs that are all ASCII (the others: the next test).
// Against the vectors (the real clients' partitions) for every vector key that is an ASCII string,
// in one batch and per call; and against the module for every length 0-33 (murmur2's and XXH64's
// word and tail boundaries, at many offsets mod 4 and 8 in a run) and around 64, empty keys, runs
// ended by a byte key, by RUN_UNITS or by runKeys (runs that are not all ASCII among them:
// keys whose first non-ASCII unit comes at any place, Latin-1 units 0x80-0xff included, one byte
// as Latin-1 and two as UTF-8; lone surrogates, one key's trailing high surrogate before the next
// key's leading low one, which joined would be a pair) and ASCII runs after those.
function asciiKey(seed, len) {
  let t = '';
  for (let i = 0; i < len; i++) t += String.fromCharCode(32 + ((seed * 31 + i * 17 + (seed >>> 3)) % 95));
  return t;
}

for (const name of ['kafka-murmur2', 'linear-murmur2', 'librdkafka-consistent', 'librdkafka-fnv1a', 'sarama-fnv1a', 'jump']) {
  test(`native ${name}: string keys (ASCII runs encoded at once, keys hashed at offsets) give the vectors and the module's partitions, batched and per call`, () => {
    const v = JSON.parse(readFileSync(`${root}spec/vectors/${name}.json`, 'utf8'));
    const nat = nativeFor({ digest: Partitioner.builtin(name).digest }, undefined, { everyShape: true });
    const byN = new Map();
    for (const c of v.cases) {
      const s = Buffer.from(c.key_hex, 'hex').toString('latin1');
      if (/[^\x00-\x7f]/.test(s)) continue; // not ASCII: the key-by-key path, below
      byN.set(c.n, [...(byN.get(c.n) ?? []), [s, c.partition]]);
    }
    assert.ok([...byN.values()].flat().length > 100);
    for (const [n, cases] of byN) {
      const got = nat.partitionMany(cases.map(([s]) => s), n);
      cases.forEach(([s, want], i) => {
        assert.ok(Object.is(got[i], want), `${name} n=${n} key ${JSON.stringify(s)}: native batch ${got[i]}, ${v.source} ${want}`);
        assert.ok(Object.is(nat.partition(s, n), want), `${name} n=${n} key ${JSON.stringify(s)}: native ${nat.partition(s, n)}, ${v.source} ${want}`);
      });
    }
    const wasm = Partitioner.builtin(name);
    const keys = [];
    for (let len = 0; len <= 33; len++) keys.push(asciiKey(len, len), '');
    for (let len = 60; len <= 70; len++) keys.push(asciiKey(len, len), 'ab');
    for (let len = 33; len >= 0; len--) keys.push(asciiKey(len, len));
    keys.push(new Uint8Array([1, 2, 3]), 'after-bytes', '\u007f\u0000');
    const odd = ['\u0080', '\u00ff', 'é', '€', '中', '😀', '\ud800', '\udc00', 'x\ud800', '\udc00y'];
    for (const c of odd) for (const at of [0, 1, 3, 4, 15, 16, 63, 64, 65]) keys.push(asciiKey(at, at) + c + asciiKey(at + 1, 5), '', asciiKey(at, at) + c, asciiKey(at, 3));
    keys.push('ascii', 'x\ud800', '\udc00y', 'é', '😀', '€中', '\udc00', '', 'abc', 'ab\ud83d', '\ude00cd');
    const big = Array.from({ length: 3000 }, (_, i) => asciiKey(i, i % 34)); // ~49,500 units: runs end at RUN_UNITS
    for (const ks of [keys, [...keys].reverse(), big.concat(big), ['z'.repeat(65536), 'a'], ['a', 'z'.repeat(65535), 'bc']]) {
      for (const n of [1, 7, 1000, 2147483647]) {
        const want = wasm.partitionMany(ks, n);
        const got = nat.partitionMany(ks, n);
        for (let i = 0; i < ks.length; i++) {
          if (!Object.is(got[i], want[i])) assert.fail(`${name} partitionMany n=${n} key ${i} ${JSON.stringify(ks[i]).slice(0, 80)}: wasm ${want[i]}, native batch ${got[i]}`);
          const one = nat.partition(ks[i], n);
          if (!Object.is(one, want[i])) assert.fail(`${name} partition n=${n} key ${i} ${JSON.stringify(ks[i]).slice(0, 80)}: wasm ${want[i]}, native ${one}`);
        }
      }
    }
    assert.throws(() => nat.partitionMany(['a', 'b'.repeat(65537), 'c'], 3), (e) => e instanceof BadRequestError && /key 1 has 65537 bytes/.test(e.message));
  });
}

// Runs that are not all ASCII (stringRun): the joined encoding is used for every key, each key that
// is not ASCII measured from its first such unit, unless it ends with a high surrogate before the
// next key's low one (joined, a pair), or the run is dense in such keys (then key by key, and
// the next keys too, then small runs again). Non-ASCII keys at the start, the middle and the end
// of runs and at the 4,096-key and 65,536-unit limits, two in a row, surrogate pairs, lone
// surrogates (U+FFFD, as key by key), pairs across keys with and without an empty key between,
// empty keys, dense keys then ASCII ones then sparse ones again; the same batches again (the
// run sizes depend on what came before).
for (const name of ['kafka-murmur2', 'linear-murmur2', 'librdkafka-consistent', 'librdkafka-fnv1a', 'sarama-fnv1a', 'jump']) {
  test(`native ${name}: string runs that are not all ASCII give the module's partitions, batched and per call`, () => {
    const nat = nativeFor({ digest: Partitioner.builtin(name).digest }, undefined, { everyShape: true });
    const wasm = Partitioner.builtin(name);
    const odd = ['é', '😀', '\ud800', '\udc00', '中', '\u0080'];
    const short = Array.from({ length: 10_000 }, (_, i) => asciiKey(i, i % 4)); // runs end at 4,096 keys
    for (const at of [0, 1, 4095, 4096, 4097, 8191, 8192, 9999]) short[at] = odd[at % odd.length] + short[at];
    short[5000] = 'é';
    short[5001] = 'é'; // two in a row, each starting with its unit that is not ASCII
    short[6000] = 'a\ud83d';
    short[6001] = '\ude00b'; // a pair across keys
    short[7000] = 'a\ud83d';
    short[7001] = '';
    short[7002] = '\ude00b'; // a pair across keys with an empty one between
    short[7500] = '\ud83d\ude00\ud83d'; // a pair, then a lone high one before an ASCII key
    const sparse = Array.from({ length: 6000 }, (_, i) => asciiKey(i, i % 41) + (i % 50 === 7 ? odd[(i / 50 | 0) % odd.length] : '') + (i % 97 === 3 ? asciiKey(i, 3) : ''));
    const long = Array.from({ length: 70 }, (_, i) => asciiKey(i, 1000).slice(0, 1000 - (i % 3)) + (i % 5 === 0 ? 'é' : '') + asciiKey(i, i % 9)); // runs end at 65,536 units
    long.push('é'.repeat(21845), 'z'.repeat(100), '😀'.repeat(16384), 'y');
    const dense = Array.from({ length: 300 }, (_, i) => `ключ-${i}` + (i % 7 === 0 ? '' : asciiKey(i, i % 5)));
    const after = dense.concat(Array.from({ length: 40_000 }, (_, i) => asciiKey(i, i % 20)), sparse, dense, ['é', 'a\ud83d', '\ude00b']);
    for (const ks of [short, sparse, long, dense, after, [...short].reverse(), short, sparse]) {
      for (const n of [7, 2147483647]) {
        const want = wasm.partitionMany(ks, n);
        const got = nat.partitionMany(ks, n);
        for (let i = 0; i < ks.length; i++) {
          if (!Object.is(got[i], want[i])) assert.fail(`${name} partitionMany n=${n} key ${i} ${JSON.stringify(ks[i]).slice(0, 80)}: wasm ${want[i]}, native batch ${got[i]}`);
        }
      }
      for (let i = 0; i < ks.length; i += 13) assert.equal(nat.partition(ks[i], 7), wasm.partition(ks[i], 7), `${name} partition key ${i}`);
    }
    const over = 'é'.repeat(32769); // 65538 bytes
    assert.throws(() => nat.partitionMany(['a', 'b', over, 'c'], 3), (e) => e instanceof BadRequestError && /key 2 has 65538 bytes/.test(e.message), 'a sparse run');
    assert.throws(() => nat.partitionMany([...dense.slice(0, 20), over], 3), (e) => e instanceof BadRequestError && /key 20 has 65538 bytes/.test(e.message), 'a dense run');
    assert.throws(() => nat.partitionMany([...dense, over], 3), (e) => e instanceof BadRequestError && /key 300 has 65538 bytes/.test(e.message), 'after a dense run');
  });
}

test('nativeFor: a built-in digest without config only; errors are the module path\'s', () => {
  for (const name of builtinNames()) {
    const d = Partitioner.builtin(name).digest;
    const p = nativeFor({ name, digest: d, config: null }, undefined, { everyShape: true });
    assert.ok(p instanceof NativePartitioner, name);
    assert.equal(p.digest, d);
    assert.equal(p.name, name, 'the metadata is the module\'s');
    assert.equal(nativeFor({ name, digest: d, config: Buffer.from('a=1\0').toString('base64') }), null, `${name} with config runs the module`);
  }
  for (const other of ['kafka-murmur2-rust', 'kafka-murmur2-as', 'kafka-murmur2-go']) {
    const bytes = readFileSync(`${root}plugins/murmur2/${other}.wasm`);
    const d = createHash('sha256').update(bytes).digest('hex');
    assert.equal(nativeFor({ name: 'kafka-murmur2', digest: d }, bytes), null, `${other}: another module computing kafka-murmur2 is still run as a module`);
  }
  const p = nativeFor({ digest: Partitioner.builtin('kafka-murmur2').digest });
  const w = Partitioner.builtin('kafka-murmur2');
  assert.equal(p.partition('user-1', 12), w.partition('user-1', 12), 'string keys are UTF-8');
  for (const bad of [0, -1, 2 ** 31, 1.5]) {
    assert.throws(() => p.partition('k', bad), BadRequestError);
    assert.throws(() => w.partition('k', bad), BadRequestError);
    assert.throws(() => p.partitionMany(['k'], bad), BadRequestError);
  }
  const long = new Uint8Array(65537);
  assert.throws(() => p.partition(long, 3), (e) => e instanceof BadRequestError && /key too long/.test(e.message));
  assert.throws(() => w.partition(long, 3), (e) => e instanceof BadRequestError && /key too long/.test(e.message));
  assert.throws(() => p.partitionMany(['a', long], 3), BadRequestError);
  assert.equal(p.partition(new Uint8Array(65536), 3), w.partition(new Uint8Array(65536), 3), 'a key of exactly 65536 bytes is a key');
});

// The choice per built-in and call shape (NATIVE_SHAPES): a native path slower than the module on
// V8 is not chosen. jump measured 0.70-0.85x of its module in every shape (the "per call" test
// below prints it), so connect({nativeBuiltins: true}) runs jump's module; the others are native
// in both shapes; a shape marked false runs the module through the same Partitioner methods.
test('nativeFor: jump runs its module in both call shapes, every other built-in is native in both', () => {
  assert.deepEqual(Object.keys(NATIVE_SHAPES), ['jump']);
  assert.equal(nativeFor({ digest: Partitioner.builtin('jump').digest }), null, 'jump: the module is faster, the module runs');
  for (const name of builtinNames().filter((b) => b !== 'jump')) {
    const p = nativeFor({ digest: Partitioner.builtin(name).digest });
    assert.ok(p instanceof NativePartitioner && p.shapes.call && p.shapes.many, `${name}: native in both shapes`);
  }
  // A shape marked false goes to the module: a native function that is wrong in every key shows
  // which shapes ran it.
  const wasm = Partitioner.builtin('kafka-murmur2');
  const wrong = () => 0;
  const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
  const want = [...wasm.partitionMany(keys, 1000)];
  assert.ok(want.some((q) => q !== 0));
  const callOnly = new NativePartitioner(wasm.module, new Uint8Array(0), wrong, { call: true, many: false });
  assert.deepEqual([...callOnly.partitionMany(keys, 1000)], want, 'many: false runs the module');
  assert.deepEqual(keys.map((k) => callOnly.partition(k, 1000)), [0, 0, 0, 0, 0, 0], 'call: true runs the native function');
  const manyOnly = new NativePartitioner(wasm.module, new Uint8Array(0), wrong, { call: false, many: true });
  assert.deepEqual(keys.map((k) => manyOnly.partition(k, 1000)), want, 'call: false runs the module');
  assert.deepEqual([...manyOnly.partitionMany(keys, 1000)], [0, 0, 0, 0, 0, 0], 'many: true runs the native function');
});

// Short rounds, interleaved, the best of each: the machine is shared (load averages of 10 to 20
// while other suites run), and a round that was preempted says nothing about either path.
const ROUNDS = 21;
const best = (a) => Math.min(...a);
for (const name of ['kafka-murmur2', 'jump']) {
  test(`native vs WebAssembly per call, ${name}, 16-byte keys (a ratio, not asserted)`, () => {
    const keys = Array.from({ length: 50_000 }, (_, i) => new TextEncoder().encode(`k${i}`.padEnd(16, '.')));
    const nat = nativeFor({ digest: Partitioner.builtin(name).digest }, undefined, { everyShape: true }); // native even where not chosen
    const wasm = Partitioner.builtin(name);
    const time = (p) => {
      const t0 = process.hrtime.bigint();
      let s = 0;
      for (const k of keys) s += p.partition(k, 1000);
      return [Number(process.hrtime.bigint() - t0), s];
    };
    const tn = [];
    const tw = [];
    for (let r = 0; r < ROUNDS; r++) {
      const [a, sa] = time(nat);
      const [b, sb] = time(wasm);
      assert.equal(sa, sb);
      tn.push(a);
      tw.push(b);
    }
    console.log(`${name} 16-byte keys, Partitioner.partition per call: wasm ${(best(tw) / keys.length).toFixed(0)} ns, native ${(best(tn) / keys.length).toFixed(0)} ns: wasm/native ${(best(tw) / best(tn)).toFixed(2)}x`);
    const bn = [];
    const bw = [];
    for (let r = 0; r < ROUNDS; r++) {
      const t0 = process.hrtime.bigint();
      const a = nat.partitionMany(keys, 1000);
      const t1 = process.hrtime.bigint();
      const b = wasm.partitionMany(keys, 1000);
      bn.push(Number(t1 - t0));
      bw.push(Number(process.hrtime.bigint() - t1));
      assert.deepEqual(a, b);
    }
    console.log(`${name} 16-byte keys, partitionMany: wasm ${(best(bw) / keys.length).toFixed(0)} ns/key, native ${(best(bn) / keys.length).toFixed(0)} ns/key: wasm/native ${(best(bw) / best(bn)).toFixed(2)}x`);
    // String keys (what producers give), 16 bytes and mixed lengths (0-40 units, one in 50 with an
    // 'é', measured in the joined encoding): the native batch against the module's and against the
    // previous native batch, which encoded every key on its own into one reused buffer
    // (encodeInto per key) before hashing it.
    const strings = keys.map((k) => new TextDecoder().decode(k));
    const mixed = Array.from({ length: keys.length }, (_, i) => `m${i}-`.padEnd(40, 'x').slice(0, (i * 7919) % 41) + (i % 50 === 0 ? 'é' : ''));
    const f = NATIVE[name];
    const enc = new TextEncoder();
    const buf = new Uint8Array(3 * 65536);
    const perKey = (ks) => { // the previous NativePartitioner.partitionMany's string path, line for line
      const out = new Int32Array(ks.length);
      for (let i = 0; i < ks.length; i++) {
        const len = enc.encodeInto(ks[i], buf).written;
        if (len > 65536) throw new Error(`key ${i} too long`);
        out[i] = f(buf, 1000, len);
      }
      return out;
    };
    for (const [label, ss] of [['16-byte', strings], ['mixed-length (0-41 bytes)', mixed]]) {
      const sn = [];
      const sw = [];
      const se = [];
      for (let r = 0; r < ROUNDS; r++) {
        const t0 = process.hrtime.bigint();
        const a = nat.partitionMany(ss, 1000);
        const t1 = process.hrtime.bigint();
        const b = wasm.partitionMany(ss, 1000);
        const t2 = process.hrtime.bigint();
        const c = perKey(ss);
        se.push(Number(process.hrtime.bigint() - t2));
        sn.push(Number(t1 - t0));
        sw.push(Number(t2 - t1));
        assert.deepEqual(a, b);
        assert.deepEqual(c, b);
      }
      console.log(`${name} ${label} string keys, partitionMany: wasm ${(best(sw) / ss.length).toFixed(0)} ns/key, native ${(best(sn) / ss.length).toFixed(0)} ns/key, previous native (encodeInto per key) ${(best(se) / ss.length).toFixed(0)} ns/key: wasm/native ${(best(sw) / best(sn)).toFixed(2)}x, previous/native ${(best(se) / best(sn)).toFixed(2)}x; load ${loadavg().map((x) => x.toFixed(1)).join(' ')}`);
    }
    const pn = [];
    const pw = [];
    for (let r = 0; r < ROUNDS; r++) {
      const t0 = process.hrtime.bigint();
      let x = 0;
      for (const k of strings) x += nat.partition(k, 1000);
      const t1 = process.hrtime.bigint();
      let y = 0;
      for (const k of strings) y += wasm.partition(k, 1000);
      pw.push(Number(process.hrtime.bigint() - t1));
      pn.push(Number(t1 - t0));
      assert.equal(x, y);
    }
    console.log(`${name} 16-byte string keys, Partitioner.partition per call: wasm ${(best(pw) / keys.length).toFixed(0)} ns, native ${(best(pn) / keys.length).toFixed(0)} ns: wasm/native ${(best(pw) / best(pn)).toFixed(2)}x`);
  });
}

const skipReason = missingToolchain();
describe('the nativeBuiltins switch against a real broker', { skip: skipReason ?? false, timeout: 300_000 }, () => {
  let broker;
  before(async () => {
    broker = await startBroker();
    await broker.admin(['topic', 'create', 'nat', '--partitions', '5', '--partitioner', 'kafka-murmur2']);
    const up = await broker.admin(['plugin', 'upload', `${root}plugins/murmur2/kafka-murmur2-rust.wasm`, '--json']);
    await broker.admin(['topic', 'create', 'usr', '--partitions', '5', '--partitioner', JSON.parse(up).digest]);
  });
  after(async () => { await broker?.stop(); });

  test('off by default; on: the built-in\'s exact digest only; the records land where pctl partition says', async () => {
    const off = await connect({ server: broker.url, creds: broker.creds.producer });
    const on = await connect({ server: broker.url, creds: broker.creds.producer, nativeBuiltins: true });
    try {
      const pOff = await off.producer('nat');
      assert.ok(pOff.part instanceof Partitioner && !(pOff.part instanceof NativePartitioner), 'default: the module runs');
      const pOn = await on.producer('nat');
      assert.ok(pOn.part instanceof NativePartitioner, 'nativeBuiltins and the built-in\'s digest: native');
      const pUsr = await on.producer('usr');
      assert.ok(!(pUsr.part instanceof NativePartitioner), 'another module of the same function: still the module');
      const keys = Array.from({ length: 200 }, (_, i) => `user-${i}`);
      const res = await Promise.all(keys.map((k) => pOn.send({ key: k, value: k })));
      const want = await pctlPartitions(broker, keys, 5);
      res.forEach((r, i) => assert.equal(r.partition, want.get(keys[i]), keys[i]));
      await Promise.all([pOff.close(), pOn.close(), pUsr.close()]);
    } finally {
      await off.close();
      await on.close();
    }
  });
});
