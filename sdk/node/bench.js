#!/usr/bin/env node
// Offline partitioning throughput: the kafka-murmur2 WebAssembly module
// (plugins/builtin/kafka-murmur2.wasm, run by the SDK's runtime on V8 with the limits' rewriting)
// against a native JavaScript kafka-murmur2 (src/murmur2.js, written from spec/builtins.md), in
// the same run, as ratios. Every path is checked to give the same partitions first.
//
//   node bench.js [--keys N] [--rounds R] [--key-bytes B]
//
// Paths, all on the same keys: native JS on Uint8Array keys (the baseline); the runtime's single
// calls (pctl_partition, one crossing per key) and batch calls (pctl_partition_batch, one crossing
// per 4096 keys); the SDK's public Partitioner.partition() on Uint8Array keys and on string keys
// (UTF-8 written straight into the module's buffer), against native JS that encodes the string
// into a reused buffer first; the SDK's partitionMany() on string keys (written straight into the
// module's buffer) against the previous partitionMany(), which encoded every key into its own Uint8Array.

import { fileURLToPath } from 'node:url';
import { Plugin } from './src/runtime/host.js';
import { Partitioner } from './src/partitioner.js';
import { kafkaMurmur2 } from './src/murmur2.js';
import { readFileSync } from 'node:fs';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => (v.startsWith('--') ? [...a, [v.slice(2), all[i + 1]]] : a), []));
const N = Number(args.keys ?? 200000);
const ROUNDS = Number(args.rounds ?? 7);
const KEY_BYTES = Number(args['key-bytes'] ?? 0); // 0: "user-<i>" keys (6 to 11 bytes)
const n = 1000;

const wasmPath = fileURLToPath(new URL('../../plugins/builtin/kafka-murmur2.wasm', import.meta.url));
const bytes = new Uint8Array(readFileSync(wasmPath));
const plugin = Plugin.open(bytes, { source: wasmPath });
const part = Partitioner.fromBytes(bytes, { source: wasmPath });

const strings = Array.from({ length: N }, (_, i) => (KEY_BYTES > 0 ? `k${i}`.padEnd(KEY_BYTES, '.') : `user-${i}`));
const enc = new TextEncoder();
const keys = strings.map((s) => enc.encode(s));
const totalBytes = keys.reduce((a, k) => a + k.length, 0);

const out = new Int32Array(N);
const scratch = Buffer.alloc(4 * 65536); // native JS's UTF-8 encoding into a reused buffer, no allocation
const paths = {
  'native JS': () => { for (let i = 0; i < N; i++) out[i] = kafkaMurmur2(keys[i], n); },
  'wasm single': () => { for (let i = 0; i < N; i++) out[i] = plugin.partition(keys[i], n); },
  'wasm batch': () => { plugin.partitionAll(keys, n, out); },
  'sdk partition(bytes)': () => { for (let i = 0; i < N; i++) out[i] = part.partition(keys[i], n); },
  'native JS + UTF-8 encode': () => { for (let i = 0; i < N; i++) out[i] = kafkaMurmur2(scratch, n, scratch.utf8Write(strings[i], 0)); },
  'sdk partition(string)': () => { for (let i = 0; i < N; i++) out[i] = part.partition(strings[i], n); },
  'sdk partitionMany(string)': () => { out.set(part.partitionMany(strings, n)); },
  // the previous Partitioner.partitionMany, line for line: every string key encoded into its own array
  'partitionMany(string), a Uint8Array per key': () => { out.set(part.instance().partitionAll(strings.map((s) => enc.encode(s)), n)); },
};

// Same answers first.
const ref = new Int32Array(N);
for (let i = 0; i < N; i++) ref[i] = kafkaMurmur2(keys[i], n);
for (const [name, f] of Object.entries(paths)) {
  out.fill(-1);
  f();
  for (let i = 0; i < N; i++) if (out[i] !== ref[i]) throw new Error(`${name}: key ${strings[i]} -> ${out[i]}, native JS says ${ref[i]}`);
}

// Interleaved rounds (so drift hits every path alike); the median per path.
const times = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, f] of Object.entries(paths)) {
    const t0 = process.hrtime.bigint();
    f();
    times[name].push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
}
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const base = median(times['native JS']);
console.log(`kafka-murmur2, ${N} keys (${(totalBytes / N).toFixed(1)} bytes on average), n=${n}, median of ${ROUNDS} rounds; Node ${process.version}, V8 ${process.versions.v8}`);
console.log('path                                          keys/s        ns/key   time vs native JS');
for (const name of Object.keys(paths)) {
  const s = median(times[name]);
  console.log(`${name.padEnd(45)} ${(N / s / 1e6).toFixed(2).padStart(6)} M/s ${(s / N * 1e9).toFixed(0).padStart(8)}   ${(s / base).toFixed(2)}x`);
}
