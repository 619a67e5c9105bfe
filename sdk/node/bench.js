#!/usr/bin/env node
// Offline partitioning throughput: the kafka-murmur2 WebAssembly module
// (plugins/builtin/kafka-murmur2.wasm, run by the SDK's runtime on V8 with the limits' rewriting)
// against a native JavaScript kafka-murmur2 (src/murmur2.js, written from spec/builtins.md), in
// the same run, as ratios. Every path is checked to give the same partitions first.
//
//   node bench.js [--keys N] [--rounds R] [--key-bytes B]
//   node bench.js --strings [--old FILE] [--keys N] [--rounds R]
//
// --strings: the native string batch (NativePartitioner.partitionMany, src/native.js) on string
// keys of five shapes against the module's batch, the batch that encoded key by key (encodeInto
// per key) and, with --old, another native.js (e.g. `git show main:sdk/node/src/native.js >
// src/native.main.js`, then --old src/native.main.js), rounds interleaved, best of R (21).
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
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => (v.startsWith('--') ? [...a, [v.slice(2), all[i + 1]]] : a), []));
if (process.argv.includes('--strings')) {
  await stringBatch(Number(args.keys ?? 16384), Number(args.rounds ?? 21), args.old);
  process.exit(0);
}
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

async function stringBatch(count, rounds, oldPath) {
  const n = 1000;
  const { nativeFor, NATIVE } = await import('./src/native.js');
  const digest = Partitioner.builtin('kafka-murmur2').digest;
  const nat = nativeFor({ digest }, undefined, { everyShape: true });
  const old = oldPath ? (await import(pathToFileURL(oldPath).href)).nativeFor({ digest }, undefined, { everyShape: true }) : null;
  const wasm = Partitioner.builtin('kafka-murmur2');
  const f = NATIVE['kafka-murmur2'];
  const enc = new TextEncoder();
  const buf = new Uint8Array(3 * 65536);
  const mixed = (i) => `m${i}-`.padEnd(40, 'x').slice(0, (i * 7919) % 41);
  const shapes = {
    '16-byte ASCII': (i) => `k${i}`.padEnd(16, '.'),
    'user-N': (i) => `user-${i}`,
    'mixed 0-40 bytes ASCII': mixed,
    '1 in 50 non-ASCII (mixed + é)': (i) => mixed(i) + (i % 50 === 0 ? 'é' : ''),
    'all non-ASCII (é + 15 ASCII)': (i) => `é${i}`.padEnd(16, '.'),
    'all non-ASCII (Cyrillic)': (i) => `ключ-${i}`,
  };
  const paths = {
    'key by key': (ks) => { // the batch before runs, line for line: encodeInto per key
      const out = new Int32Array(ks.length);
      for (let i = 0; i < ks.length; i++) out[i] = f(buf, n, enc.encodeInto(ks[i], buf).written, 0);
      return out;
    },
    ...(old ? { old: (ks) => old.partitionMany(ks, n) } : {}),
    new: (ks) => nat.partitionMany(ks, n),
    wasm: (ks) => wasm.partitionMany(ks, n),
  };
  console.log(`kafka-murmur2 string batch, ${count} keys, n=${n}, best of ${rounds} interleaved rounds (rotated order); Node ${process.version}; load before ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  console.log(`${'keys'.padEnd(32)} ${Object.keys(paths).map((p) => `${p} ns/key`.padStart(16)).join('')}   new vs: ${Object.keys(paths).filter((p) => p !== 'new').join(' / ')}`);
  for (const [label, mk] of Object.entries(shapes)) {
    const ks = Array.from({ length: count }, (_, i) => mk(i));
    const want = paths.wasm(ks);
    const t = Object.fromEntries(Object.keys(paths).map((p) => [p, Infinity]));
    const entries = Object.entries(paths);
    for (let r = 0; r < rounds; r++) {
      for (let e = 0; e < entries.length; e++) { // each round in another order: no path always runs after the same one
        const [name, run] = entries[(e + r) % entries.length];
        const t0 = process.hrtime.bigint();
        const got = run(ks);
        t[name] = Math.min(t[name], Number(process.hrtime.bigint() - t0));
        for (let i = 0; i < count; i++) if (got[i] !== want[i]) throw new Error(`${name} ${label}: key ${i} ${JSON.stringify(ks[i])} -> ${got[i]}, the module says ${want[i]}`);
      }
    }
    const ratios = Object.keys(paths).filter((p) => p !== 'new').map((p) => `${(t[p] / t.new).toFixed(2)}x`).join(' / ');
    console.log(`${label.padEnd(32)} ${Object.keys(paths).map((p) => (t[p] / count).toFixed(1).padStart(16)).join('')}   ${ratios}`);
  }
  console.log(`load after ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
}
