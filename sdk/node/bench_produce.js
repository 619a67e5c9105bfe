#!/usr/bin/env node
// Producer throughput: the pctl producer (fast batches, spec/protocol.md §5.1) against plain
// pipelined JetStream publishes (src/publisher.js, one request/reply publish per record with up
// to 1024 acknowledgements outstanding per partition: the wire path of the SDK's producer before
// fast batches, protocol.md §5.1.3), same broker, same records, same run; rounds interleaved,
// median reported, ratio against the baseline printed. Each round writes to a fresh topic.
//
//   node bench_produce.js [--records N] [--partitions P] [--keys K] [--value-bytes B] [--rounds R]
//
// PCTL_BENCH_OLD_PRODUCER=<path to a module exporting Producer> adds that producer as a third
// variant (for comparing against an older src/producer.js copied into src/). Needs go (the broker
// is built from this repository, as the tests do).

import { connect } from './src/index.js';
import { AckPublisher } from './src/publisher.js';
import { startBroker } from './tests/broker.js';
import { headers as natsHeaders } from '@nats-io/transport-node';

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}
const N = arg('records', 100_000);
const P = arg('partitions', 4);
const K = arg('keys', 10_000);
const B = arg('value-bytes', 100);
const R = arg('rounds', 3);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const value = new Uint8Array(B).fill(120);
const keys = Array.from({ length: K }, (_, i) => `key-${i}`);

// The SDK's producer (or another module's Producer): send everything, 5000 at a time between
// ready() waits, and wait for every acknowledgement.
async function viaProducer(make) {
  const p = await make();
  const out = [];
  for (let i = 0; i < N; i++) {
    out.push(p.send({ key: keys[i % K], value }));
    if (i % 5000 === 4999) await p.ready();
  }
  await Promise.all(out);
  await p.close();
}

// Plain publishes: partition with the topic's module, the record headers, one publish with a
// reply per record, at most 1024 unacknowledged per partition.
async function plain(client, topic) {
  const { topic: desc } = await client.topic(topic);
  const part = await client.partitioner(desc.epochs[0].partitioner);
  const pub = new AckPublisher(client.nc, client.opts.ackTimeout);
  const inflight = new Array(P).fill(0);
  const queues = Array.from({ length: P }, () => []);
  let done = 0;
  let finished;
  const all = new Promise((r) => { finished = r; });
  const enc = new TextEncoder();
  const pump = (q) => {
    while (inflight[q] < 1024 && queues[q].length > 0) {
      const [i, key] = queues[q].shift();
      const h = natsHeaders();
      h.set('Pctl-Key', `b64:${Buffer.from(enc.encode(key)).toString('base64')}`);
      h.set('Pctl-Producer', 'bench-plain');
      h.set('Pctl-Seq', String(i + 1));
      h.set('Nats-Msg-Id', `bench-plain-${topic}-${i + 1}`);
      inflight[q]++;
      pub.publish(`pctl.data.${topic}.1.${q}`, value, h, (err) => {
        if (err) throw err;
        inflight[q]--;
        if (++done === N) finished();
        pump(q);
      });
    }
  };
  for (let i = 0; i < N; i++) {
    const key = keys[i % K];
    const q = part.partition(key, P);
    queues[q].push([i, key]);
    if (i % 5000 === 4999) {
      for (let x = 0; x < P; x++) pump(x);
      await new Promise((r) => setImmediate(r));
    }
  }
  for (let x = 0; x < P; x++) pump(x);
  await all;
  pub.close();
}

async function main() {
  const broker = await startBroker();
  try {
    const client = await connect({ server: broker.url, creds: broker.creds.producer });
    const variants = {
      'plain publishes, 1024 in flight per partition (baseline)': (t) => plain(client, t),
      'pctl producer (fast batches)': (t) => viaProducer(() => client.producer(t)),
    };
    if (process.env.PCTL_BENCH_OLD_PRODUCER) {
      const { Producer } = await import(process.env.PCTL_BENCH_OLD_PRODUCER);
      variants['old producer (PCTL_BENCH_OLD_PRODUCER)'] = (t) => viaProducer(() => Producer.create(client, t, {}));
    }
    const times = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
    let n = 0;
    for (let r = 0; r < R; r++) {
      for (const [name, f] of Object.entries(variants)) {
        const topic = `bench${n++}`;
        await broker.admin(['topic', 'create', topic, '--partitions', String(P), '--partitioner', 'kafka-murmur2']);
        const t0 = process.hrtime.bigint();
        await f(topic);
        times[name].push(Number(process.hrtime.bigint() - t0) / 1e9);
      }
    }
    await client.close();
    const names = Object.keys(variants);
    const base = N / median(times[names[0]]);
    console.log(`${N} records, ${P} partitions, ${K} keys, ${B}-byte values, median of ${R} rounds (interleaved); one broker; Node ${process.version}`);
    console.log('variant'.padEnd(58), 'records/s'.padStart(10), '  vs baseline');
    for (const name of names) {
      const rate = N / median(times[name]);
      console.log(name.padEnd(58), String(Math.round(rate)).padStart(10), `  ${(rate / base).toFixed(2)}x   (rounds: ${times[name].map((s) => Math.round(N / s)).join(', ')})`);
    }
  } finally {
    await broker.stop();
  }
}

main().catch((e) => { console.error(e); process.exitCode = 1; });
