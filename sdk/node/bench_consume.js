#!/usr/bin/env node
// Consumer throughput: a pctl consumer-group member (gating on, every record's placement
// checked, positions committed) against raw JetStream consumption in Node, same broker, same
// records, same run; rounds interleaved, median reported, ratio against the baseline printed.
//
//   node bench_consume.js [--records N] [--partitions P] [--keys K] [--value-bytes B] [--rounds R]
//
// The topic has two epochs: N/2 records under P partitions, then a grow to 2P and N/2 more, so
// that a member reading from the beginning gates the second epoch's records on the first's
// partitions (the work gating adds, measured). Baseline: @nats-io/jetstream's ordered consumer
// (the official client) reading every partition stream at once, touching each message's data.
// Needs go (the broker is built from this repository, as the tests do).

import { jetstream } from '@nats-io/jetstream';
import { connect } from './src/index.js';
import { PullReader } from './src/reader.js';
import { startBroker } from './tests/broker.js';

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}
const N = arg('records', 200_000);
const P = arg('partitions', 4);
const K = arg('keys', 10_000);
const B = arg('value-bytes', 100);
const R = arg('rounds', 3);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function produce(client, topic, from, n) {
  const p = await client.producer(topic);
  const value = new Uint8Array(B).fill(120);
  const out = [];
  for (let i = from; i < from + n; i++) {
    out.push(p.send({ key: `key-${i % K}`, value }));
    if (i % 5000 === 4999) await p.ready();
  }
  await Promise.all(out);
  await p.close();
}

// Every partition stream at once with the official ordered consumer; resolves when n messages
// (records and fence markers) were read.
async function officialOrdered(nc, streams, n, callback) {
  const js = jetstream(nc);
  let count = 0;
  let bytes = 0;
  let done;
  const finished = new Promise((r) => { done = r; });
  const iters = [];
  for (const s of streams) {
    const c = await js.consumers.get(s, { opt_start_seq: 1 });
    if (callback) {
      iters.push(await c.consume({ callback: (m) => { bytes += m.data.length; if (++count === n) done(); } }));
    } else {
      const it = await c.consume();
      iters.push(it);
      (async () => {
        for await (const m of it) {
          bytes += m.data.length;
          if (++count === n) done();
        }
      })();
    }
  }
  await finished;
  await Promise.all(iters.map((it) => it.close()));
  return bytes;
}

// This SDK's stream reader alone (no group, no gating).
async function ownReader(client, streams, n) {
  let count = 0;
  let bytes = 0;
  const readers = streams.map((s) => new PullReader(client, { stream: s }).start());
  await Promise.all(readers.map(async (r) => {
    for (;;) {
      const batch = await r.take(); // [] once stopped
      if (batch.length === 0) return;
      for (const e of batch) { bytes += e.data.length; count++; }
      if (count >= n) for (const x of readers) x.stop();
    }
  }));
  return bytes;
}

async function member(client, topic, group, records, opts, mode) {
  const c = await client.consumer(topic, { group, fromBeginning: true, ...opts });
  let count = 0;
  let bytes = 0;
  if (mode === 'run') {
    await new Promise((resolve, reject) => {
      c.run(async (m) => { bytes += m.value.length; if (++count === records) resolve(); }).catch(reject);
    });
    await c.close();
  } else {
    for await (const m of c) {
      bytes += m.value.length;
      if (++count === records) break;
    }
  }
  return { bytes, stats: c.stats };
}

async function main() {
  const broker = await startBroker();
  try {
    await broker.admin(['topic', 'create', 'bench', '--partitions', String(P), '--partitioner', 'kafka-murmur2']);
    const pc = await connect({ server: broker.url, creds: broker.creds.producer });
    let t = Date.now();
    await produce(pc, 'bench', 0, N / 2);
    await broker.admin(['topic', 'repartition', 'bench', '--partitions', String(2 * P)]);
    await produce(pc, 'bench', N / 2, N / 2);
    await pc.close();
    console.error(`produced ${N} records (${B}-byte values, ${K} keys) in ${Date.now() - t} ms: epoch 1 on ${P} partitions, epoch 2 on ${2 * P}`);
    const streams = Array.from({ length: 2 * P }, (_, q) => `PCTL_bench_${q}`);
    const messages = N + P; // records plus one fence marker per epoch-1 partition

    const cc = await connect({ server: broker.url, creds: broker.creds.consumer });
    let g = 0;
    const variants = [
      ['jetstream.js ordered consumer, async iterator (baseline)', () => officialOrdered(cc.nc, streams, messages, false)],
      ['jetstream.js ordered consumer, callback', () => officialOrdered(cc.nc, streams, messages, true)],
      ['pctl reader alone (src/reader.js, no group)', () => ownReader(cc, streams, messages)],
      ['pctl consumer, for await, gating (default)', () => member(cc, 'bench', `b${++g}`, N, {}, 'iterate')],
      ['pctl consumer, run(handler), gating', () => member(cc, 'bench', `b${++g}`, N, {}, 'run')],
      ['pctl consumer, for await, gating off (unsafe)', () => member(cc, 'bench', `b${++g}`, N, { gating: false }, 'iterate')],
    ];
    const times = variants.map(() => []);
    const gated = [];
    for (let round = 0; round < R; round++) {
      for (const [i, [name, run]] of variants.entries()) {
        t = performance.now();
        const r = await run();
        const ms = performance.now() - t;
        times[i].push(ms);
        if (r?.stats && name.includes('default')) gated.push(r.stats.gated);
        console.error(`round ${round + 1}: ${name}: ${ms.toFixed(0)} ms`);
      }
    }
    await cc.close();
    const base = median(times[0]);
    console.log(`\n${N} records, ${P} -> ${2 * P} partitions, ${B}-byte values, ${K} keys; median of ${R} rounds; Node ${process.version}`);
    console.log('| reader | records/s | time | vs baseline |');
    console.log('|---|---:|---:|---:|');
    for (const [i, [name]] of variants.entries()) {
      const ms = median(times[i]);
      console.log(`| ${name} | ${Math.round((N / ms) * 1000).toLocaleString('en-US')} | ${ms.toFixed(0)} ms | ${(base / ms).toFixed(2)}x |`);
    }
    console.log(`records that waited at a gate (default member, per round): ${gated.join(', ')}`);
    const ratio = base / median(times[3]);
    console.log(`\nratio (pctl consumer with gating / raw JetStream): ${ratio.toFixed(2)}x (target >= 0.80x)`);
  } finally {
    await broker.stop();
  }
}

main().catch((e) => { console.error(e); process.exitCode = 1; });
