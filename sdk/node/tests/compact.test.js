// Compacted topics (spec/protocol.md §10): the key token against spec/vectors/compact/keytoken.json
// (written from the spec's text by Python's base64 and hashlib, not by this SDK), and against a
// real broker: the producer writes one subject per key and tombstones, the consumer flags
// tombstones, reads the current epoch alone, skips backfilled copies in a live group and delivers
// them to a group that started at the current epoch. What the Node consumer delivers is compared
// with what 'pctl consume' (the Go client) delivers and with the values the test sent.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, BadRequestError } from '../src/index.js';
import { keyToken, parseOrigin, supersededInBatch } from '../src/compact.js';
import { directGet } from '../src/jsapi.js';
import { startBroker, missingToolchain, root } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('keyToken: every case of spec/vectors/compact/keytoken.json', () => {
  const v = JSON.parse(readFileSync(`${root}spec/vectors/compact/keytoken.json`, 'utf8'));
  assert.ok(v.cases.length >= 500);
  let hashed = 0;
  for (const c of v.cases) {
    assert.equal(keyToken(Buffer.from(c.key_hex, 'hex')), c.token, `key ${c.key_hex.slice(0, 40)}`);
    if (c.token.startsWith('h')) hashed++;
  }
  assert.ok(hashed > 0, 'long keys are hashed');
});

test('parseOrigin and supersededInBatch', () => {
  assert.deepEqual(parseOrigin('2/3/17'), { epoch: 2, partition: 3, seq: 17 });
  for (const bad of ['', '0/1/2', '1/2', '1/2/3/4', 'a/1/2', '1/-1/2', ' 1/2/3']) assert.equal(parseOrigin(bad), null, bad);
  const found = new Map([[3, 40], [1, 38]]);
  supersededInBatch(['a', 'b', 'a', 'a', null], 0, found);
  // 0 and 2 (key a) are superseded by 3, found; 4 is keyless; b (1) found itself.
  assert.deepEqual([...found.entries()].sort((x, y) => x[0] - y[0]), [[0, 0], [1, 38], [2, 0], [3, 40]]);
});

describe('compacted topics against a real broker', { skip, timeout: 600_000 }, () => {
  let broker;
  let prod;
  let cons;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    prod = await connect({ server: broker.url, creds: broker.creds.producer });
    cons = await connect({ server: broker.url, creds: broker.creds.consumer });
  });

  after(async () => {
    await prod?.close();
    await cons?.close();
    await broker?.stop();
  });

  const describeTopic = async (t) => JSON.parse(await broker.admin(['topic', 'describe', t, '--json']));
  const goConsume = async (t, group, from) => {
    const r = await broker.pctl(['consume', t, '--group', group, '--from', from, '--format', 'jsonl', '--idle-exit', '3s', '--server', broker.url, '--creds', broker.creds.consumer]);
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trimEnd().split('\n').filter(Boolean).map((l) => JSON.parse(l));
  };
  // Reads a consumer until `idle` ms pass without a record.
  const drain = async (c, idle = 2500) => {
    const got = [];
    const it = c[Symbol.asyncIterator]();
    for (;;) {
      const r = await Promise.race([it.next(), sleep(idle).then(() => null)]);
      if (!r || r.done) break;
      got.push(r.value);
    }
    return got;
  };
  // One record per key: value or tombstone, as {key: 'v' | null}.
  const latest = (ms, { value = (m) => m.value.toString(), tomb = (m) => m.tombstone } = {}) => {
    const out = new Map();
    for (const m of ms) out.set(m.key.toString(), tomb(m) ? null : value(m));
    return out;
  };

  test('produce, tombstones, current-epoch reads, and backfill across a grow', async () => {
    await broker.admin(['topic', 'create', 'cpt', '--partitions', '3', '--partitioner', 'kafka-murmur2', '--compact', '--delete-retention', '1h']);
    const p = await prod.producer('cpt', { id: 'cpt-p' });
    await assert.rejects(p.send({ key: null, value: 'x' }), (e) => e instanceof BadRequestError && /compacted/.test(e.message));
    await assert.rejects(p.send({ key: 'k', value: 'x', tombstone: true }), (e) => e instanceof BadRequestError && /no value/.test(e.message));
    const want = new Map();
    const sends = [];
    const keys = Array.from({ length: 40 }, (_, i) => (i === 39 ? 'L'.repeat(300) : `k${i}`)); // one long (hashed) key
    for (let u = 0; u < 6; u++) {
      for (const [i, k] of keys.entries()) {
        sends.push(p.send({ key: k, value: `${k.slice(0, 8)}:${u}` }));
        want.set(k, `${k.slice(0, 8)}:${u}`);
        if (u === 5 && i < 10) {
          sends.push(p.send({ key: k, tombstone: true }));
          want.set(k, null);
        }
        if (u === 5 && i < 4) {
          sends.push(p.send({ key: k, value: `${k}:back` })); // a value after a tombstone
          want.set(k, `${k}:back`);
        }
      }
    }
    const res = await Promise.all(sends);
    assert.equal(res.length, 40 * 6 + 10 + 4);
    const d1 = await describeTopic('cpt');

    // Stored state, read by subject (JetStream's own last-by-subject): one message per key, the
    // latest; a tombstone carries Nats-TTL 3600.
    const kp = new Map();
    const parts = (await broker.pctl(['partition', '--plugin', 'kafka-murmur2', '--partitions', '3'], { input: keys.map((k) => `${k}\n`).join('') })).stdout.trim().split('\n').map(Number);
    keys.forEach((k, i) => kp.set(k, parts[i]));
    for (const k of keys) {
      const subj = `pctl.data.cpt.1.${kp.get(k)}.${keyToken(Buffer.from(k))}`;
      const m = await directGet(prod.nc, `PCTL_cpt_${kp.get(k)}`, null, { lastBySubject: subj, timeout: 5000 });
      assert.ok(m, `no message on ${subj}`);
      if (want.get(k) === null) {
        assert.equal(m.headers.get('Pctl-Tombstone'), 'true');
        assert.equal(m.headers.get('Nats-TTL'), '3600');
        assert.equal(m.data.length, 0);
      } else {
        assert.equal(Buffer.from(m.data).toString(), want.get(k));
      }
    }

    // A new group reads the current epoch alone by default on a compacted topic; so does Go's.
    const c1 = await cons.consumer('cpt', { group: 'fresh1' });
    const got1 = await drain(c1);
    await c1.close();
    assert.equal(got1.length, keys.length, 'one record per key');
    assert.deepEqual(latest(got1), want);
    assert.ok(got1.every((m) => m.backfill === null && m.epoch === 1));
    assert.ok(got1.filter((m) => m.tombstone).every((m) => m.value.length === 0));
    const go1 = await goConsume('cpt', 'gofresh1', 'current-epoch');
    assert.deepEqual(latest(go1, { value: (m) => m.value, tomb: (m) => !!m.tombstone }), want);

    // A live group that read epoch 1 before the change must not get the copies again.
    const live = await cons.consumer('cpt', { group: 'live', from: 'beginning' });
    const liveGot = [];
    const liveRun = live.run((m) => { liveGot.push(m); });
    const until = Date.now() + 30_000;
    while (liveGot.length < keys.length && Date.now() < until) await sleep(50);
    assert.equal(liveGot.length, keys.length);

    await broker.admin(['topic', 'repartition', 'cpt', '--partitions', '5']);
    let d2;
    for (const end = Date.now() + 60_000; ; await sleep(200)) {
      d2 = await describeTopic('cpt');
      const bf = d2.epochs[d2.epochs.length - 1].backfill;
      if (bf?.state === 'done') break;
      assert.ok(Date.now() < end, `backfill not done: ${JSON.stringify(bf)}`);
    }
    assert.equal(d2.epochs.length, d1.epochs.length + 1);
    // The producer follows the epoch change: newer values for some keys, one more tombstone.
    const later = [];
    for (const k of keys.slice(10, 20)) {
      later.push(p.send({ key: k, value: `${k}:e2` }));
      want.set(k, `${k}:e2`);
    }
    later.push(p.send({ key: 'k20', tombstone: true }));
    want.set('k20', null);
    const r2 = await Promise.all(later);
    assert.ok(r2.every((r) => r.epoch === 2));
    await p.close();

    // A fresh group at the current epoch: every key's latest once (copies delivered, flagged).
    const c2 = await cons.consumer('cpt', { group: 'fresh2' });
    const got2 = await drain(c2);
    await c2.close();
    assert.ok(got2.every((m) => m.epoch === 2), 'only the current epoch');
    const byKey = new Map();
    for (const m of got2) byKey.set(m.key.toString(), (byKey.get(m.key.toString()) ?? 0) + 1);
    // Keys written after the backfill may show their copy and their new record (both in epoch 2,
    // compaction keeps the newer one only once JetStream removed the copy: at once).
    assert.deepEqual(latest(got2), want);
    for (const [k, n] of byKey) assert.equal(n, 1, `key ${k.slice(0, 10)} delivered ${n} times`);
    const copies = got2.filter((m) => m.backfill !== null);
    assert.equal(copies.length, keys.length - 11, 'every key not written since is a copy');
    for (const m of copies) assert.equal(m.backfill.epoch, 1);
    const go2 = await goConsume('cpt', 'gofresh2', 'current-epoch');
    assert.deepEqual(latest(go2, { value: (m) => m.value, tomb: (m) => !!m.tombstone }), want);

    // The live group: no copy delivered, and its last record of every key is the latest.
    for (const end = Date.now() + 30_000; liveGot.length < keys.length + 11 && Date.now() < end;) await sleep(50);
    await sleep(1500);
    await live.close();
    await liveRun;
    assert.deepEqual(liveGot.filter((m) => m.backfill !== null).map((m) => m.raw.headers.get('Pctl-Backfill')), [], 'a live group skips copies');
    assert.equal(liveGot.length, keys.length + 11);
    assert.deepEqual(latest(liveGot), want);
  });

  test('a plain topic with --backfill: key subjects, keyless refused, full history carried', async () => {
    await broker.admin(['topic', 'create', 'pbf', '--partitions', '2', '--partitioner', 'kafka-murmur2', '--backfill']);
    const p = await prod.producer('pbf', { id: 'pbf-p' });
    await assert.rejects(p.send({ key: null, value: 'x' }), (e) => e instanceof BadRequestError && /cannot be backfilled/.test(e.message));
    const keys = Array.from({ length: 12 }, (_, i) => `k${i}`);
    const hist = new Map(keys.map((k) => [k, []]));
    const sends = [];
    for (let u = 0; u < 3; u++) {
      for (const k of keys) {
        sends.push(p.send({ key: k, value: `${k}:${u}` }));
        hist.get(k).push(`${k}:${u}`);
      }
    }
    await Promise.all(sends);
    // Stored under key subjects (the stream takes nothing else), every record kept: the last of
    // each subject is the key's last value, and the stream holds all 36.
    const parts = (await broker.pctl(['partition', '--plugin', 'kafka-murmur2', '--partitions', '2'], { input: keys.map((k) => `${k}\n`).join('') })).stdout.trim().split('\n').map(Number);
    for (const [i, k] of keys.entries()) {
      const subj = `pctl.data.pbf.1.${parts[i]}.${keyToken(Buffer.from(k))}`;
      const m = await directGet(prod.nc, `PCTL_pbf_${parts[i]}`, null, { lastBySubject: subj, timeout: 5000 });
      assert.ok(m, `no message on ${subj}`);
      assert.equal(Buffer.from(m.data).toString(), `${k}:2`);
    }
    await broker.admin(['topic', 'repartition', 'pbf', '--partitions', '3']);
    for (const end = Date.now() + 60_000; ; await sleep(200)) {
      const d = await describeTopic('pbf');
      const bf = d.epochs[d.epochs.length - 1].backfill;
      if (bf?.state === 'done') break;
      assert.ok(Date.now() < end, `backfill not done: ${JSON.stringify(bf)}`);
    }
    const r2 = await Promise.all(keys.slice(0, 4).map((k) => p.send({ key: k, value: `${k}:e2` })));
    assert.ok(r2.every((r) => r.epoch === 2));
    for (const k of keys.slice(0, 4)) hist.get(k).push(`${k}:e2`);
    await p.close();
    // A group at the current epoch: every key's full history, in order (copies first, flagged),
    // then the records written in epoch 2; the same from the Go client.
    const c = await cons.consumer('pbf', { group: 'pbf-fresh', from: 'current-epoch' });
    const got = await drain(c);
    await c.close();
    assert.ok(got.every((m) => m.epoch === 2 && m.misplaced == null), 'only the current epoch, nothing misplaced');
    const by = (ms, val) => { const o = new Map(keys.map((k) => [k, []])); for (const m of ms) o.get(m.key.toString()).push(val(m)); return o; };
    assert.deepEqual(by(got, (m) => m.value.toString()), hist);
    assert.equal(got.filter((m) => m.backfill !== null).length, 36, 'every old record is a copy');
    const go = await goConsume('pbf', 'pbf-gofresh', 'current-epoch');
    assert.deepEqual(by(go, (m) => m.value), hist);
  });

  test('a record under another key\'s token is misplaced', async () => {
    await broker.admin(['topic', 'create', 'cptmis', '--partitions', '1', '--partitioner', 'kafka-murmur2', '--compact']);
    const p = await prod.producer('cptmis', { id: 'mis-p' });
    await p.send({ key: 'a', value: '1' });
    await p.close();
    // A hostile producer: key b's header under key a's subject (it would compact away a's value).
    const { headers } = await import('@nats-io/transport-node');
    const h = headers();
    h.set('Pctl-Key', `b64:${Buffer.from('b').toString('base64')}`);
    h.set('Nats-Msg-Id', 'hostile-1');
    const js = await prod.nc.request(`pctl.data.cptmis.1.0.${keyToken(Buffer.from('a'))}`, new TextEncoder().encode('2'), { headers: h, timeout: 5000 });
    assert.ok(js.data.length > 0);
    const c = await cons.consumer('cptmis', { group: 'm', from: 'beginning', misplaced: 'deliver' });
    const got = await drain(c);
    await c.close();
    // It compacted a's value away (one message per subject): only the hostile record is left.
    assert.equal(got.length, 1);
    assert.equal(got[0].key.toString(), 'b');
    assert.match(got[0].misplaced.reason, /does not end with its key's token/);
  });
});
