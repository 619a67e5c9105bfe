// Per-key storage order of the producer under faults, against a real broker (tests/broker.js).
// The producer's connection goes through a TCP proxy in this process that cuts it (both sockets
// destroyed, bytes in flight lost) many times while thousands of keyed records are pipelined.
// Afterwards every partition stream is read back in stream order with the official JetStream
// client (@nats-io/jetstream, direct batch gets), independent of the SDK, and checked: per key,
// the stored records are in send order (Pctl-Seq ascending, none twice), and every record the
// producer acknowledged is stored. The same with an epoch change in the middle: per key, every
// record of the old epoch comes before every record of the new one in send order.
//
// The old producer (plain request/reply publishes pipelined 1024 deep per partition, spec
// §5.1.3) fails the first test: a publish lost with a cut connection is retried after its
// acknowledgement timeout, behind later records of its key that were stored meanwhile.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '../src/index.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : null;

/** A TCP proxy to target: cut() destroys every connection through it (the client reconnects). */
async function startProxy(target) {
  const [host, port] = target.replace('nats://', '').split(':');
  const pairs = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), host);
    const pair = { client, upstream, dead: false };
    pairs.add(pair);
    // Forward by hand so that a cut drops whatever a side has not written yet.
    client.on('data', (d) => { if (!pair.dead) upstream.write(d); });
    upstream.on('data', (d) => { if (!pair.dead) client.write(d); });
    const end = () => {
      pair.dead = true;
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  let cuts = 0;
  return {
    url: `nats://127.0.0.1:${server.address().port}`,
    get cuts() { return cuts; },
    cut() {
      for (const p of [...pairs]) {
        p.dead = true;
        pairs.delete(p);
        p.client.resetAndDestroy?.() ?? p.client.destroy();
        p.upstream.resetAndDestroy?.() ?? p.upstream.destroy();
      }
      cuts++;
    },
    close() {
      this.cut();
      return new Promise((r) => server.close(r));
    },
  };
}

/** Every message of a stream in stream order: [{seq, headers (MsgHdrs), data}]. */
async function readStream(jsm, stream) {
  const info = await jsm.streams.info(stream);
  const last = info.state.last_seq;
  const out = [];
  let seq = 1;
  while (seq <= last) {
    const it = await jsm.direct.getBatch(stream, { seq, batch: 1000 });
    let n = 0;
    for await (const m of it) {
      out.push({ seq: m.seq, subject: m.subject, headers: m.header, data: m.data });
      seq = m.seq + 1;
      n++;
    }
    if (n === 0) break;
  }
  return out;
}

/**
 * Checks the stored records of producer `id` in every partition stream: per key, Pctl-Seq
 * strictly ascending in stream order, no record stored twice, every acknowledged pseq stored.
 * Returns {violations: [...], missing: [...], stored: Map pseq -> {partition, epoch}}.
 */
async function checkStored(jsm, topic, partitions, id, acked) {
  const stored = new Map();
  const violations = [];
  const dup = [];
  for (let q = 0; q < partitions; q++) {
    const lastByKey = new Map();
    for (const m of await readStream(jsm, `PCTL_${topic}_${q}`)) {
      if (m.headers?.get('Pctl-Producer') !== id) continue;
      const pseq = Number(m.headers.get('Pctl-Seq'));
      const key = m.headers.get('Pctl-Key');
      const epoch = Number(m.subject.split('.')[3]);
      if (stored.has(pseq)) dup.push(pseq);
      stored.set(pseq, { partition: q, epoch, key });
      const prev = lastByKey.get(key) ?? 0;
      if (pseq <= prev) violations.push(`partition ${q} seq ${m.seq}: key ${key} record ${pseq} stored after record ${prev}`);
      lastByKey.set(key, Math.max(prev, pseq));
    }
  }
  const missing = acked.filter((pseq) => !stored.has(pseq));
  return { violations, missing, dup, stored };
}

describe('per-key storage order under cut connections', { skip: skip ?? false, timeout: 300_000 }, () => {
  let broker;
  let admin;
  let jsm;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    jsm = await jetstreamManager(admin.connection);
  });

  after(async () => {
    await admin?.close();
    await broker?.stop();
  });

  // Pipelines keyed records through a proxy that cuts the connection every 300 to 700 ms, at
  // least `total` records and until `cuts` cuts happened; with `grow`, the topic grows once a
  // third of them are acknowledged. Returns the producer's id, what it acknowledged and failed.
  async function run(t, topic, { total, cuts, keys, grow }) {
    const proxy = await startProxy(broker.url);
    const c = await connect({ server: proxy.url, creds: broker.creds.producer, reconnectWait: 50, ackTimeout: 1000 });
    const id = `node-${topic}`;
    let stop = false;
    let growing = null;
    try {
      const p = await c.producer(topic, { id, maxBuffered: 4096 });
      const cutter = (async () => {
        while (!stop) {
          await new Promise((r) => setTimeout(r, 300 + Math.floor(Math.random() * 400)));
          if (!stop) proxy.cut();
        }
      })();
      const acked = [];
      const failed = [];
      const all = [];
      for (let i = 0; i < total || proxy.cuts < cuts; i++) {
        const key = `key-${(i * 7919) % keys}`;
        all.push(p.send({ key, value: `${key}:${i}` }).then((r) => { acked.push(r.pseq); return r; }, (e) => { failed.push(e); }));
        if (grow && growing === null && acked.length > total / 3) growing = broker.admin(['topic', 'expand', topic, '--partitions', String(grow)]);
        if (i % 256 === 255) await p.ready();
      }
      const sent = all.length;
      await Promise.all(all);
      stop = true;
      await cutter;
      await growing;
      t.diagnostic(`${topic}: ${sent} records, ${proxy.cuts} cuts, ${acked.length} acknowledged, ${failed.length} failed, ${p.settled ?? '-'} batches settled, ${p.resent} re-sent under a new epoch`);
      await p.close().catch(() => {});
      return { p, id, acked, failed, grew: growing !== null };
    } finally {
      stop = true;
      await c.close();
      await proxy.close();
    }
  }

  test('a cut connection never stores a key out of send order, and loses nothing acknowledged', async (t) => {
    await broker.admin(['topic', 'create', 'cut', '--partitions', '4', '--partitioner', 'kafka-murmur2']);
    const { id, acked, failed } = await run(t, 'cut', { total: 4000, cuts: 8, keys: 300 });
    const { violations, missing, dup } = await checkStored(jsm, 'cut', 4, id, acked);
    t.diagnostic(`${violations.length} records out of order, ${missing.length} acknowledged but missing, ${dup.length} stored twice`);
    assert.deepEqual(violations.slice(0, 10), [], 'per key, stored in send order');
    assert.deepEqual(missing.slice(0, 10), [], 'every acknowledged record is stored');
    assert.deepEqual(dup.slice(0, 10), [], 'no record stored twice');
    assert.deepEqual(failed.map((e) => e.message).slice(0, 5), [], 'no record failed');
  });

  test('an epoch change under cut connections: order per key within and across epochs', async (t) => {
    await broker.admin(['topic', 'create', 'cutgrow', '--partitions', '3', '--partitioner', 'kafka-murmur2']);
    const { id, acked, failed, grew } = await run(t, 'cutgrow', { total: 4000, cuts: 5, keys: 300, grow: 5 });
    assert.ok(grew, 'the topic grew while producing');
    const { violations, missing, dup, stored } = await checkStored(jsm, 'cutgrow', 5, id, acked);
    assert.deepEqual(violations.slice(0, 10), [], 'per key and partition, stored in send order');
    assert.deepEqual(missing.slice(0, 10), [], 'every acknowledged record is stored');
    assert.deepEqual(dup.slice(0, 10), [], 'no record stored twice');
    assert.deepEqual(failed.map((e) => e.message).slice(0, 5), [], 'no record failed');
    // Across epochs: per key, the epochs of its records in send order never go back.
    const lastEpoch = new Map();
    const back = [];
    const epochs = new Set();
    for (const pseq of [...stored.keys()].sort((a, b) => a - b)) {
      const { key, epoch } = stored.get(pseq);
      epochs.add(epoch);
      if ((lastEpoch.get(key) ?? 0) > epoch) back.push(`key ${key}: record ${pseq} of epoch ${epoch} after one of epoch ${lastEpoch.get(key)}`);
      lastEpoch.set(key, Math.max(lastEpoch.get(key) ?? 0, epoch));
    }
    assert.deepEqual(back.slice(0, 10), [], 'per key, no record of the old epoch after one of the new');
    assert.deepEqual([...epochs].sort(), [1, 2], 'records stored under both epochs');
  });
});
