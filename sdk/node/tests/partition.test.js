// Offline partitioning: the SDK's Partitioner on the built-in kafka-murmur2 module against
// spec/vectors/kafka-murmur2.json (generated from Apache Kafka's own client, see its "source"
// field), the native JS murmur2 against the same vectors, and the errors of bad input and
// misbehaving modules. A failure of a vector test means keys would land in other partitions than
// every other pctl host (and Kafka's Java client) puts them: existing users' keys would remap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Partitioner, partition, PluginError, BadRequestError, PctlError } from '../src/index.js';
import { kafkaMurmur2, murmur2 } from '../src/murmur2.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const builtin = `${root}plugins/builtin/kafka-murmur2.wasm`;
const hostile = (name) => `${root}runtime/testdata/hostile/${name}.wasm`;
const vectors = JSON.parse(readFileSync(`${root}spec/vectors/kafka-murmur2.json`, 'utf8'));
const hex = (h) => new Uint8Array(Buffer.from(h, 'hex'));

test('kafka-murmur2.wasm: every case of spec/vectors/kafka-murmur2.json, single calls', async () => {
  const p = await Partitioner.load(builtin);
  assert.equal(p.name, 'kafka-murmur2');
  assert.equal(p.profile, 'portable');
  assert.match(p.digest, /^[0-9a-f]{64}$/);
  assert.ok(vectors.cases.length > 50);
  for (const c of vectors.cases) {
    assert.equal(p.partition(hex(c.key_hex), c.n), c.partition, `key ${c.key_hex} n=${c.n}: keys remap for existing users (source: ${vectors.source})`);
  }
});

test('kafka-murmur2.wasm: the batch path gives the single calls\' results', () => {
  const p = Partitioner.loadSync(builtin);
  const byN = new Map();
  for (const c of vectors.cases) byN.set(c.n, [...(byN.get(c.n) ?? []), c]);
  for (const [n, cases] of byN) {
    const got = p.partitionMany(cases.map((c) => hex(c.key_hex)), n);
    assert.deepEqual([...got], cases.map((c) => c.partition), `n=${n}`);
  }
  // More keys than one crossing takes (4096), strings as UTF-8.
  const keys = Array.from({ length: 10000 }, (_, i) => `user-${i}-é`);
  const many = p.partitionMany(keys, 1000);
  for (let i = 0; i < keys.length; i += 997) assert.equal(many[i], p.partition(keys[i], 1000));
});

// partitionMany encodes a batch's string keys straight into the module's buffer (the host's
// partitionKeys): every vector key that is UTF-8 as a string must land on the vector's
// partition (Kafka's client, not this SDK), and strings mixed with bytes, multi-byte UTF-8 (lone
// surrogates are U+FFFD), a short key after a long one and more bytes than the 1 MiB buffer holds
// (a key that does not fit ends the crossing early, and the keys written move down to follow
// fewer lengths) must give the partitions of the same keys encoded by TextEncoder, one by one.
test('kafka-murmur2.wasm: partitionMany of string keys (written into the buffer) gives the vectors and the bytes\' partitions', () => {
  const p = Partitioner.loadSync(builtin);
  const byN = new Map();
  for (const c of vectors.cases) {
    const s = Buffer.from(c.key_hex, 'hex').toString('utf8');
    if (Buffer.from(s, 'utf8').toString('hex') !== c.key_hex) continue; // not UTF-8: no string has these bytes
    byN.set(c.n, [...(byN.get(c.n) ?? []), [s, c.partition]]);
  }
  assert.ok([...byN.values()].flat().length > 40);
  for (const [n, cases] of byN) {
    assert.deepEqual([...p.partitionMany(cases.map(([s]) => s), n)], cases.map(([, want]) => want), `string keys of the vectors, n=${n}`);
  }
  const enc = new TextEncoder();
  const parts = ['a', 'é', '€', '中', '😀', '\ud800', '\udc00', '\u0000', 'user-'];
  const keys = [];
  for (let i = 0; i < 30000; i++) {
    let k = '';
    for (let j = 0; j < (i * 7) % 23; j++) k += parts[(i + j * 3) % parts.length];
    keys.push(i % 5 === 4 ? enc.encode(k) : k);
    if (i % 1000 === 0) keys.push('€'.repeat(21845), '', 'z'); // 65535 bytes, then short keys after it
  }
  for (const n of [1, 7, 1000, 2147483647]) {
    const got = p.partitionMany(keys, n);
    const want = p.partitionMany(keys.map((k) => (typeof k === 'string' ? enc.encode(k) : k)), n);
    assert.equal(got.length, keys.length);
    for (let i = 0; i < keys.length; i++) {
      if (got[i] !== want[i]) assert.fail(`n=${n} key ${i} ${JSON.stringify(keys[i]).slice(0, 40)}: partitionMany of strings ${got[i]}, of their TextEncoder bytes ${want[i]}`);
    }
    for (let i = 0; i < keys.length; i += 101) assert.equal(got[i], p.partition(keys[i], n), `key ${i}, a single call`);
  }
  assert.throws(() => p.partitionMany(['a', 'é'.repeat(32769)], 3), (e) => e instanceof BadRequestError && /key 1 has 65538 bytes/.test(e.message));
  assert.throws(() => p.partitionMany(['a', 'b', 'c'.repeat(65537)], 3), (e) => e instanceof BadRequestError && /key 2 has 65537 bytes/.test(e.message));
  assert.throws(() => p.partitionMany(['a', new Uint8Array(65537)], 3), (e) => e instanceof BadRequestError && /key 1 has 65537 bytes/.test(e.message));
  assert.equal(p.partitionMany(['x', 'é'.repeat(32768)], 3)[1], p.partition('é'.repeat(32768), 3), 'a key of exactly 65536 bytes is a key');
});

// grow-hash (tests/testdata/grow-hash.wat) grows its memory by a page on every call, which in
// JavaScript replaces memory.buffer: a host writing the next crossing's keys through a view from
// before the call writes into a detached buffer, and the module hashes stale bytes. The expected
// partitions are the module's hash (h = h*31 + byte, mod n) computed here from TextEncoder bytes.
test('a module that grows memory on every call: string batches across crossings and calls get the right keys', () => {
  const p = Partitioner.loadSync(fileURLToPath(new URL('testdata/grow-hash.wasm', import.meta.url)));
  const enc = new TextEncoder();
  const hash = (k, n) => { let h = 0; for (const b of (typeof k === 'string' ? enc.encode(k) : k)) h = (Math.imul(h, 31) + b) | 0; return (h >>> 0) % n; };
  const keys = [];
  for (let i = 0; i < 9000; i++) keys.push(i % 7 === 3 ? enc.encode(`b-${i}`) : `k-${i}-${'é中😀'.slice(0, i % 4)}`);
  for (let round = 0; round < 3; round++) { // three calls of three crossings each: memory grows between every two
    const n = [1000, 7, 2147483647][round];
    const got = p.partitionMany(keys, n);
    for (let i = 0; i < keys.length; i++) {
      if (got[i] !== hash(keys[i], n)) assert.fail(`round ${round} n=${n} key ${i} ${JSON.stringify(keys[i])}: got ${got[i]}, want ${hash(keys[i], n)}`);
    }
    assert.equal(p.partition(`k-${round}-é`, n), hash(`k-${round}-é`, n), 'a single string call after a batch');
  }
  // Keys of 300 to 1,400 bytes fill the 1 MiB buffer before 4096 keys: a key that does not fit
  // (multi-byte strings whose UTF-8 is 3 bytes a unit, ASCII ones that fit where 3 bytes a unit
  // would not, byte keys) ends the crossing, the keys move down to follow the lengths used, and
  // nothing is written past the buffer's end (the pages after it stay zero: the module never
  // writes there).
  const big = [];
  for (let i = 0; i < 6000; i++) {
    const m = i % 3;
    big.push(m === 0 ? '€'.repeat(100 + (i % 367)) : m === 1 ? 'a'.repeat(300 + (i % 1100)) : enc.encode('b'.repeat(200 + (i % 701))));
  }
  for (const n of [1000, 2147483647]) {
    const got = p.partitionMany(big, n);
    for (let i = 0; i < big.length; i++) {
      if (got[i] !== hash(big[i], n)) assert.fail(`big keys n=${n} key ${i} (${big[i].length} units or bytes): got ${got[i]}, want ${hash(big[i], n)}`);
    }
    const { buf, bufSize } = p.instance();
    const after = new Uint8Array(p.instance().memory.buffer, buf + bufSize);
    assert.ok(after.length >= 65536, `memory has ${after.length} bytes after the buffer`);
    assert.ok(after.every((b) => b === 0), `bytes written past the buffer's end (at ${buf + bufSize + after.findIndex((b) => b !== 0)})`);
  }
});

test('native JS murmur2 matches the vectors and the module', () => {
  for (const c of vectors.cases) assert.equal(kafkaMurmur2(hex(c.key_hex), c.n), c.partition, `key ${c.key_hex} n=${c.n}`);
  // Kafka's UtilsTest.testMurmur2 values (signed int32 there).
  assert.equal(murmur2(new TextEncoder().encode('21')) | 0, -973932308);
  assert.equal(murmur2(new TextEncoder().encode('foobar')) | 0, -790332482);
  const p = Partitioner.loadSync(builtin);
  for (let i = 0; i < 3000; i++) {
    const k = new Uint8Array(i % 37).map((_, j) => (i * 31 + j * 7) & 0xff);
    assert.equal(kafkaMurmur2(k, 2147483647), p.partition(k, 2147483647));
  }
});

test('strings are UTF-8, the empty key is a key, bytes and Buffers work', async () => {
  const p = await Partitioner.load(new URL('../../../plugins/builtin/kafka-murmur2.wasm', import.meta.url));
  assert.equal(p.partition('é', 1000), p.partition(Buffer.from([0xc3, 0xa9]), 1000));
  assert.equal(p.partition('', 100), 81); // spec/vectors: empty key, n=100
  assert.equal(await partition(readFileSync(builtin), 'user-1', 12), p.partition('user-1', 12));
  assert.equal(p.partition(new ArrayBuffer(0), 1000), 681);
});

test('bad input: n, key length, keyless, config', () => {
  const p = Partitioner.loadSync(builtin);
  for (const n of [0, -1, 1.5, 2 ** 31, NaN, '3']) {
    assert.throws(() => p.partition('k', n), (e) => e instanceof BadRequestError && e.code === 'bad_request' && /invalid partition count/.test(e.message), String(n));
  }
  assert.throws(() => p.partition(new Uint8Array(65537), 3), /key too long: 65537 bytes/);
  assert.throws(() => p.partition('é'.repeat(32769), 3), (e) => e instanceof BadRequestError && /key too long: 65538 bytes/.test(e.message));
  assert.equal(p.partition('é'.repeat(32768), 3), p.partition(Buffer.from('é'.repeat(32768)), 3), 'a string key of exactly PCTL_MAX_KEY bytes');
  assert.equal(typeof p.partition(new Uint8Array(65536), 3), 'number', 'a key of exactly PCTL_MAX_KEY is fine');
  assert.throws(() => p.partition(null, 3), /keyless record never reaches a partitioner/);
  assert.throws(() => Partitioner.loadSync(builtin, { config: { seed: '1' } }), (e) => e instanceof PluginError && e.failure === 'plugin takes no configuration');
  assert.throws(() => Partitioner.loadSync(builtin, { config: ['no-equals'] }), (e) => e.code === 'bad_request' && /bad partitioner config/.test(e.message));
  assert.throws(() => Partitioner.loadSync('/nonexistent.wasm'), (e) => e.code === 'bad_request' && /read plugin/.test(e.message));
});

test('configured plugin: config-echo takes the canonical config', () => {
  const a = Partitioner.loadSync(hostile('config-echo'), { config: { b: '2', a: '1' } });
  const b = Partitioner.loadSync(hostile('config-echo'), { config: ['a=1', 'b=2'] });
  const c = Partitioner.loadSync(hostile('config-echo'), { config: new TextEncoder().encode('a=1\nb=2\n') });
  for (const k of ['', 'x', 'hello']) {
    assert.equal(a.partition(k, 1000), b.partition(k, 1000));
    assert.equal(a.partition(k, 1000), c.partition(k, 1000));
  }
  assert.throws(() => Partitioner.loadSync(hostile('config-echo'), { config: new TextEncoder().encode('!') }), (e) => e instanceof PluginError && /rejected/.test(e.failure));
});

test('refused modules: PluginError naming the module and the failure class', () => {
  const cases = [
    ['not-wasm', 'not a WebAssembly module'],
    ['truncated', 'invalid WebAssembly module'],
    ['missing-export', 'missing export'],
    ['forbidden-import', 'forbidden import'],
    ['abi-v2', 'unsupported ABI version'],
    ['memory-initial', 'memory limit exceeded'],
  ];
  for (const [name, cls] of cases) {
    assert.throws(() => Partitioner.loadSync(hostile(name)), (e) => {
      assert.ok(e instanceof PluginError && e instanceof PctlError, name);
      assert.equal(e.code, 'plugin_failed');
      assert.equal(e.failure, cls, name);
      assert.ok(e.message.includes(`${name}.wasm`), e.message);
      return true;
    });
  }
});

test('a failing call names the plugin, gives no partition, and the next call runs on a fresh instance', () => {
  const p = Partitioner.loadSync(hostile('trap-some-keys'));
  assert.equal(p.partition('abc', 10), 3);
  assert.throws(() => p.partition(new Uint8Array([0xff, 1]), 10), (e) => {
    assert.ok(e instanceof PluginError);
    assert.equal(e.plugin, 'trap-some-keys');
    assert.equal(e.failure, 'plugin trapped');
    assert.match(e.message, /^plugin trap-some-keys \(sha256:[0-9a-f]{12}\): pctl_partition: plugin trapped/);
    return true;
  });
  assert.equal(p.partition('abcd', 10), 4);
  assert.throws(() => p.partitionMany(['a', new Uint8Array([0xff]), 'b'], 10), (e) => e.failure === 'plugin trapped');
  assert.deepEqual([...p.partitionMany(['a', 'bb'], 10)], [1, 2]);

  const o = Partitioner.loadSync(hostile('out-of-range'));
  assert.throws(() => o.partition('x', 5), (e) => e.failure === 'plugin returned a partition out of range');
  assert.equal(o.partition('xy', 5), 2);
  const l = Partitioner.loadSync(hostile('loop-forever'));
  assert.throws(() => l.partition('x', 5), (e) => e.failure === 'time limit exceeded');
});
