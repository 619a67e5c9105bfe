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
//
// Then the cluster-side checks of the producer (spec/protocol.md §5.1.2) on the same broker, made
// deterministic with the producer's test hooks (opts._test): `verify` makes every batch go
// through the cluster confirmation (read back from the stream with $JS.API.STREAM.MSG.GET), and
// `holes` runs after a clean PubAck, before the confirmation, where the test deletes the batch's
// first stored record: what nats-server 2.15.2 does when a leader's term change drops a raft
// proposal it counted. The producer must find the hole, re-send it with a new token, and keep
// each key's order, which the per-key rule (no two records of a key in one batch) guarantees:
// with the rule switched off (`noKeyRule`) the same run stores records out of order, which the
// check must see. And a look-alike stored first under a record's predictable (content-token) id
// makes that record fail with ConflictError instead of counting as stored (§5.1.4).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { connect, ConflictError } from '../src/index.js';
import { recordToken } from '../src/fastbatch.js';
import { startBroker, missingToolchain } from './broker.js';
import { checkStored } from './streams.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : null;
const enc = new TextEncoder();

/**
 * A TCP proxy to target that delivers bytes 10 ms late: cut() destroys every connection through
 * it, losing the bytes in transit (the client reconnects).
 */
async function startProxy(target) {
  const [host, port] = target.replace('nats://', '').split(':');
  const pairs = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), host);
    const pair = { client, upstream, dead: false };
    pairs.add(pair);
    // Forward by hand, 10 ms late (bytes in transit, as on a network): a cut drops them.
    const forward = (to) => {
      let held = [];
      return (d) => {
        if (pair.dead) return;
        if (held.length === 0) {
          setTimeout(() => {
            const out = held;
            held = [];
            if (!pair.dead) for (const x of out) to.write(x);
          }, 10);
        }
        held.push(d);
      };
    };
    client.on('data', forward(upstream));
    upstream.on('data', forward(client));
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

describe('per-key storage order under cut connections, holes and look-alikes', { skip: skip ?? false, timeout: 300_000 }, () => {
  let broker;
  let admin;
  let jsm;
  let client;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    jsm = await jetstreamManager(admin.connection);
    client = await connect({ server: broker.url, creds: broker.creds.producer });
  });

  after(async () => {
    await client?.close();
    await admin?.close();
    await broker?.stop();
  });

  // Pipelines keyed records through a proxy that cuts the connection every 300 to 700 ms until
  // every record is acknowledged (at most `maxCuts`, so that a loaded machine, where a batch may
  // take longer than the time between cuts, still ends), at least `total` records and until
  // `cuts` cuts happened; with `grow`, the topic grows once a third of them are acknowledged.
  // Returns the producer's id, what it acknowledged and failed.
  async function run(t, topic, { total, cuts, maxCuts, keys, grow }) {
    const proxy = await startProxy(broker.url);
    const c = await connect({ server: proxy.url, creds: broker.creds.producer, reconnectWait: 50, ackTimeout: 1000 });
    const id = `node-${topic}`;
    let stop = false;
    let growing = null;
    try {
      const p = await c.producer(topic, { id, maxBuffered: 4096 });
      const cutter = (async () => {
        while (!stop && proxy.cuts < maxCuts) {
          await new Promise((r) => setTimeout(r, 300 + Math.floor(Math.random() * 400)));
          if (!stop) proxy.cut();
        }
      })();
      const acked = [];
      const failed = [];
      const all = [];
      for (let i = 0; i < total || proxy.cuts < cuts; i++) {
        const key = `key-${(i * 7919) % keys}`;
        all.push(p.send({ key, value: `${key}:${i}` }).then((r) => {
          acked.push(r.pseq);
          if (grow && growing === null && acked.length > total / 3) growing = broker.admin(['topic', 'expand', topic, '--partitions', String(grow)]);
          return r;
        }, (e) => { failed.push(e); }));
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
    const { id, acked, failed } = await run(t, 'cut', { total: 6000, cuts: 15, maxCuts: 40, keys: 300 });
    const { violations, missing, dup } = await checkStored(jsm, 'cut', 4, id, acked);
    t.diagnostic(`${violations.length} records out of order, ${missing.length} acknowledged but missing, ${dup.length} stored twice`);
    assert.deepEqual(violations.slice(0, 10), [], 'per key, stored in send order');
    assert.deepEqual(missing.slice(0, 10), [], 'every acknowledged record is stored');
    assert.deepEqual(dup.slice(0, 10), [], 'no record stored twice');
    assert.deepEqual(failed.map((e) => e.message).slice(0, 5), [], 'no record failed');
  });

  test('an epoch change under cut connections: order per key within and across epochs', async (t) => {
    await broker.admin(['topic', 'create', 'cutgrow', '--partitions', '3', '--partitioner', 'kafka-murmur2']);
    const { id, acked, failed, grew } = await run(t, 'cutgrow', { total: 4000, cuts: 5, maxCuts: 10, keys: 300, grow: 5 });
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

  // 1500 records of 20 keys over 2 partitions, sent at once; the first stored record of each of
  // the first 12 batches is deleted after the batch's PubAck. Returns the producer and the check.
  async function runHoles(topic, test) {
    await broker.admin(['topic', 'create', topic, '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    let deleted = 0;
    const holes = async (stream, first) => {
      if (deleted >= 12) return;
      deleted++;
      await jsm.streams.deleteMessage(stream, first, false);
    };
    const id = `node-${topic}`;
    const p = await client.producer(topic, { id, _test: { verify: true, holes, ...test } });
    const acked = [];
    const all = [];
    for (let i = 0; i < 1500; i++) {
      const key = `k${i % 20}`;
      all.push(p.send({ key, value: `${key}:${i}` }).then((r) => acked.push(r.pseq)));
    }
    await Promise.all(all);
    await p.close();
    return { p, deleted, check: await checkStored(jsm, topic, 2, id, acked) };
  }

  test('a batch the server counted but did not store all of: holes re-sent, every key in order (per-key rule)', async (t) => {
    const { p, deleted, check } = await runHoles('holes', {});
    t.diagnostic(`${deleted} records deleted behind clean PubAcks; producer: ${p.holes} holes re-sent, ${check.violations.length} out of order`);
    assert.equal(deleted, 12);
    assert.equal(p.holes, deleted, 'every deleted record found by the read-back and sent again');
    assert.deepEqual(check.missing, [], 'every acknowledged record is stored');
    assert.deepEqual(check.dup, [], 'none twice');
    assert.deepEqual(check.violations, [], 'per key, in send order');
  });

  test('the same without the per-key rule stores keys out of order (the check sees it)', async (t) => {
    const { p, check } = await runHoles('holesnorule', { noKeyRule: true });
    t.diagnostic(`without the rule: ${p.holes} holes re-sent, ${check.violations.length} records out of order`);
    assert.deepEqual(check.missing, [], 'nothing acknowledged is lost either way');
    assert.ok(check.violations.length > 0, 'a hole re-sent after later records of its key is out of order');
  });

  test('a look-alike stored first under a content-token id: the record fails with ConflictError, never counts as stored', async () => {
    await broker.admin(['topic', 'create', 'lookalike', '--partitions', '1', '--partitioner', 'kafka-murmur2']);
    const key = 'victim';
    const value = 'the real value';
    // The id the producer will give its record 1 (content tokens are predictable by design).
    const msgId = `node-la-1-${recordToken(enc.encode(key), enc.encode(value))}`;
    const h = natsHeaders();
    h.set('Pctl-Key', `b64:${Buffer.from(key).toString('base64')}`);
    h.set('Pctl-Producer', 'node-la');
    h.set('Pctl-Seq', '1');
    h.set('Nats-Msg-Id', msgId);
    const ack = JSON.parse(new TextDecoder().decode((await admin.connection.request('pctl.data.lookalike.1.0', enc.encode('forged'), { headers: h, timeout: 5000 })).data));
    assert.ok(ack.seq > 0, 'the look-alike is stored');
    const p = await client.producer('lookalike', { id: 'node-la', contentTokens: true });
    await assert.rejects(p.send({ key, value }), (e) => {
      assert.ok(e instanceof ConflictError, e);
      assert.equal(e.code, 'conflict');
      assert.match(e.message, /acknowledged as a duplicate of stream sequence \d+ of partition 0, which holds a different record: it is NOT stored/);
      return true;
    });
    // A record whose id nobody took is stored as usual.
    const r = await p.send({ key, value: 'another value' });
    assert.equal(r.pseq, 2);
    assert.ok(r.seq > ack.seq);
    await p.close();
  });
});
