// Integration tests of the producer against a real broker (tests/broker.js: the Go binary built
// from this repository, `pctl serve` on a temporary directory and a random port). What the SDK
// produced is checked with the Go tools: `pctl consume` (every record, in order per key, in the
// partition `pctl partition` computes) and JetStream direct gets (the headers of
// spec/protocol.md §5.1).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { connect, NotFoundError, PermissionError, BadRequestError, UnavailableError, PctlError, PluginError, Partitioner } from '../src/index.js';
import { startBroker, missingToolchain, pctlPartitions, consumeAll, root } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : null;
const encoder = new TextEncoder();

async function directGet(client, stream, seq) {
  const m = await client.nc.request(`$JS.API.DIRECT.GET.${stream}`, encoder.encode(JSON.stringify({ seq })), { timeout: 5000 });
  const h = {};
  for (const [k, v] of m.headers) h[k] = v[0];
  return { headers: h, data: new TextDecoder().decode(m.data) };
}

// The stream sequence of producer id's record pseq in a partition stream, by reading the stream
// from the start (0: not there). A result's seq is 0 for most records of a fast batch.
async function findSeq(client, stream, id, pseq) {
  for (let seq = 1; ; seq++) {
    const m = await client.nc.request(`$JS.API.DIRECT.GET.${stream}`, encoder.encode(JSON.stringify({ seq })), { timeout: 5000 });
    if (m.headers?.code === 404) return 0;
    if (m.headers?.get('Pctl-Producer') === id && m.headers?.get('Pctl-Seq') === String(pseq)) return seq;
  }
}

// Per key, the consumed values must be the sent ones in send order; each record in the partition
// that pctl partition gives for its epoch's partition count.
function checkConsumed(records, sent, partsByEpoch) {
  const byKey = new Map();
  for (const r of records) {
    if (r.key === undefined) continue;
    assert.equal(r.partition, partsByEpoch.get(r.epoch).get(r.key), `key ${JSON.stringify(r.key)} epoch ${r.epoch}: partition`);
    byKey.set(r.key, [...(byKey.get(r.key) ?? []), r.value]);
  }
  for (const [k, values] of sent) assert.deepEqual(byKey.get(k), values, `key ${JSON.stringify(k)}: every record, in send order`);
}

describe('producer against a real broker', { skip: skip ?? false, timeout: 600_000 }, () => {
  let broker;
  let client;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    client = await connect({ server: broker.url, creds: broker.creds.producer });
    // Shared by several tests (each checks only what it wrote itself).
    await broker.admin(['topic', 'create', 'orders', '--partitions', '5', '--partitioner', 'kafka-murmur2']);
  });

  after(async () => {
    await client?.close();
    await broker?.stop();
  });

  test('keyed and keyless records: partitions of pctl partition, order per key, headers of §5.1', async () => {
    const p = await client.producer('orders', { id: 'node-orders' });
    const keys = ['', 'é', ...Array.from({ length: 48 }, (_, i) => `user-${i}`)];
    const sent = new Map();
    const promises = [];
    for (let i = 0; i < 3000; i++) {
      if (i % 10 === 9) {
        promises.push(p.send({ value: `keyless-${i}` }));
        continue;
      }
      const k = keys[i % keys.length];
      sent.set(k, [...(sent.get(k) ?? []), `${k}:${i}`]);
      promises.push(p.send({ key: k, value: `${k}:${i}` }));
    }
    const results = await Promise.all(promises);
    await p.close();
    const parts = await pctlPartitions(broker, keys, 5);
    results.forEach((r, i) => {
      assert.equal(r.pseq, i + 1);
      assert.equal(r.epoch, 1);
      if (i % 10 !== 9) assert.equal(r.partition, parts.get(keys[i % keys.length]), `record ${i + 1}`);
    });
    const keyless = results.filter((_, i) => i % 10 === 9);
    assert.equal(new Set(keyless.map((r) => r.partition)).size, 5, 'keyless records are spread over every partition');

    const records = await consumeAll(broker, 'orders', 'g1');
    assert.equal(records.length, 3000);
    assert.equal(records.filter((r) => r.key === undefined).length, 300);
    checkConsumed(records, sent, new Map([[1, parts]]));

    // Headers, read back with the admin role.
    const admin = await connect({ server: broker.url, creds: broker.creds.admin });
    try {
      const e = results[1]; // key 'é'
      const m = await directGet(admin, `PCTL_orders_${e.partition}`, await findSeq(admin, `PCTL_orders_${e.partition}`, 'node-orders', 2));
      assert.equal(m.headers['Pctl-Key'], `b64:${Buffer.from('é').toString('base64')}`);
      assert.equal(m.headers['Pctl-Producer'], 'node-orders');
      assert.equal(m.headers['Pctl-Seq'], '2');
      assert.match(m.headers['Nats-Msg-Id'], /^node-orders-2-[0-9a-f]{32}$/, 'id, sequence and a random token (spec/protocol.md §5.1.4)');
      assert.equal(m.headers['Nats-Subject'], `pctl.data.orders.1.${e.partition}`);
      assert.equal(m.data, 'é:1');
      const empty = await directGet(admin, `PCTL_orders_${results[0].partition}`, await findSeq(admin, `PCTL_orders_${results[0].partition}`, 'node-orders', 1));
      assert.notEqual(empty.headers['Nats-Msg-Id'].slice(-32), m.headers['Nats-Msg-Id'].slice(-32), 'a token per record');
      assert.equal(empty.headers['Pctl-Key'], 'b64:', 'the empty key is b64:');
      const kl = await directGet(admin, `PCTL_orders_${results[9].partition}`, await findSeq(admin, `PCTL_orders_${results[9].partition}`, 'node-orders', 10));
      assert.equal(kl.headers['Pctl-Key'], undefined, 'no Pctl-Key header for a keyless record');
      assert.equal(kl.headers['Pctl-Seq'], '10');
      assert.equal(kl.data, 'keyless-9');
    } finally {
      await admin.close();
    }
  });

  test('an epoch change mid-run: nothing lost, order per key kept, unacknowledged records re-sent', async (t) => {
    await broker.admin(['topic', 'create', 'grow', '--partitions', '3', '--partitioner', 'kafka-murmur2']);
    const p = await client.producer('grow', { id: 'node-grow', maxBuffered: 4096 });
    const keys = Array.from({ length: 500 }, (_, i) => `k${i}`);
    const sent = new Map();
    const promises = [];
    let acked = 0;
    let expand = null;
    const total = 60000;
    for (let i = 0; i < total; i++) {
      const k = keys[(i * 7) % keys.length];
      sent.set(k, [...(sent.get(k) ?? []), String(i)]);
      promises.push(p.send({ key: k, value: String(i) }).then((r) => { acked++; return r; }));
      if (expand === null && acked > 5000) expand = broker.admin(['topic', 'expand', 'grow', '--partitions', '7']);
      await p.ready();
    }
    const results = await Promise.all(promises);
    await expand;
    await p.close();
    assert.equal(results.length, total);
    const epochs = results.map((r) => r.epoch);
    assert.ok(epochs.includes(1) && epochs.includes(2), 'records under both epochs');
    assert.equal(p.epoch, 2);
    // Per key, a record's epoch never goes back.
    const lastEpoch = new Map();
    for (let i = 0; i < total; i++) {
      const k = keys[(i * 7) % keys.length];
      assert.ok((lastEpoch.get(k) ?? 1) <= results[i].epoch, `key ${k}: epoch went back at record ${i + 1}`);
      lastEpoch.set(k, results[i].epoch);
    }
    const records = await consumeAll(broker, 'grow', 'g1');
    assert.equal(records.length, total, 'every record stored exactly once');
    const parts = new Map([[1, await pctlPartitions(broker, keys, 3)], [2, await pctlPartitions(broker, keys, 7)]]);
    checkConsumed(records, sent, parts);
    // The records answered under epoch 1 are exactly those consumed from epoch 1.
    assert.equal(records.filter((r) => r.epoch === 1).length, epochs.filter((e) => e === 1).length);
    t.diagnostic(`epoch change: ${p.resent} records re-sent under epoch 2`);
  });

  test('findStored finds a record in a fenced partition by its producer and sequence', async () => {
    await broker.admin(['topic', 'create', 'amb', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    const p = await client.producer('amb', { id: 'node-amb' });
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => p.send({ key: `a${i}`, value: 'v' })));
    await broker.admin(['topic', 'expand', 'amb', '--partitions', '3']);
    const { topic } = await client.topic('amb');
    assert.deepEqual(topic.epochs[0].boundaries.reduce((a, b) => a + b, 0), 20);
    for (const r of [results[0], results[7], results[19]]) {
      const want = await findSeq(client, `PCTL_amb_${r.partition}`, 'node-amb', r.pseq);
      assert.ok(want > 0);
      if (r.seq > 0) assert.equal(r.seq, want, 'a reported sequence is the stored one');
      assert.equal(await p.findStored(topic, { pseq: r.pseq, epoch: 1, partition: r.partition }, undefined), want);
    }
    assert.equal(await p.findStored(topic, { pseq: 999, epoch: 1, partition: 0 }, undefined), 0, 'never sent: not found');
    // Sending again after the change goes to epoch 2.
    const r = await p.send({ key: 'a0', value: 'again' });
    assert.equal(r.epoch, 2);
    assert.equal(r.pseq, 21);
    await p.close();
  });

  test('lost acknowledgements (ackTimeout 2 ms): batches settled, every record stored once, in order, across an epoch change', async (t) => {
    await broker.admin(['topic', 'create', 'lossy', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    const c = await connect({ server: broker.url, creds: broker.creds.producer, ackTimeout: 2 });
    try {
      const p = await c.producer('lossy', { id: 'node-lossy', maxInFlight: 256 });
      const keys = Array.from({ length: 40 }, (_, i) => `L${i}`);
      const sent = new Map();
      const promises = [];
      let acked = 0;
      let expand = null;
      const total = 6000;
      for (let i = 0; i < total; i++) {
        const k = keys[i % keys.length];
        sent.set(k, [...(sent.get(k) ?? []), String(i)]);
        promises.push(p.send({ key: k, value: String(i) }).then((r) => { acked++; return r; }));
        if (i % 500 === 499) {
          while (acked < i - 1000) await new Promise((r) => setTimeout(r, 5));
          if (expand === null && acked > 2000) expand = broker.admin(['topic', 'expand', 'lossy', '--partitions', '5']);
        }
      }
      const results = await Promise.all(promises);
      await expand;
      await p.close();
      const dups = results.filter((r) => r.duplicate).length;
      t.diagnostic(`lost acknowledgements: ${p.settled} batches settled, ${dups} records acknowledged as verified duplicates, ${p.resent} re-sent under epoch 2, ${p.recovered} found stored after a settle`);
      assert.ok(p.settled > 0, 'some replies came late: batches were settled');
      assert.ok(results.some((r) => r.epoch === 2));
      const records = await consumeAll(broker, 'lossy', 'g1');
      assert.equal(records.length, total, 'every record stored exactly once');
      const parts = new Map([[1, await pctlPartitions(broker, keys, 2)], [2, await pctlPartitions(broker, keys, 5)]]);
      checkConsumed(records, sent, parts);
    } finally {
      await c.close();
    }
  });

  test('plugins are fetched by digest, verified and cached', async () => {
    const { topic } = await client.topic('orders');
    const { digest } = topic.epochs[0].partitioner;
    const bytes = await client.module(digest);
    assert.equal(createHash('sha256').update(bytes).digest('hex'), digest);
    assert.equal(await client.module(digest), bytes, 'cached');
    const part = await client.partitioner(topic.epochs[0].partitioner);
    assert.equal(part.digest, digest);
    assert.equal(part.name, 'kafka-murmur2');
    await assert.rejects(client.module('0'.repeat(64)), (e) => e.code === 'not_found');
  });

  test('a partitioner that fails a key: that record fails with a PluginError naming the plugin, the others are produced', async () => {
    await broker.admin(['topic', 'create', 'trappy', '--partitions', '4', '--partitioner', 'kafka-murmur2']);
    const c = await connect({ server: broker.url, creds: broker.creds.producer });
    try {
      // The broker's conformance refuses a module that traps, so none can be a topic's partitioner:
      // stand one in for the topic's module in the client's cache (digest/config -> Partitioner).
      const { topic } = await c.topic('trappy');
      const { digest, config } = topic.epochs[0].partitioner;
      c.partitioners.set(`${digest}/${config ?? ''}`, Partitioner.loadSync(`${root}runtime/testdata/hostile/trap-some-keys.wasm`));
      const p = await c.producer('trappy', { id: 'node-trappy' });
      const rs = await Promise.allSettled([
        p.send({ key: 'ab', value: '1' }),
        p.send({ key: new Uint8Array([0xff, 0x01]), value: '2' }),
        p.send({ key: 'abc', value: '3' }),
      ]);
      assert.equal(rs[0].status, 'fulfilled');
      assert.equal(rs[0].value.partition, 2, 'key_len % n');
      assert.equal(rs[2].value.partition, 3);
      assert.equal(rs[1].status, 'rejected');
      const e = rs[1].reason;
      assert.ok(e instanceof PluginError);
      assert.equal(e.code, 'plugin_failed');
      assert.equal(e.plugin, 'trap-some-keys');
      assert.equal(e.failure, 'plugin trapped');
      assert.match(e.message, /^plugin trap-some-keys \(sha256:[0-9a-f]{12}\): pctl_partition: plugin trapped/);
      await p.close();
    } finally {
      await c.close();
    }
  });

  test('unknown topic: NotFoundError', async () => {
    await assert.rejects(client.producer('no-such-topic'), (e) => {
      assert.ok(e instanceof NotFoundError);
      assert.equal(e.code, 'not_found');
      assert.equal(e.remote, true);
      assert.match(e.message, /no-such-topic/);
      return true;
    });
    await assert.rejects(client.producer('bad.name'), (e) => e instanceof BadRequestError && /topic name/.test(e.message));
    await assert.rejects(client.producer('orders', { id: 'a b' }), (e) => e instanceof BadRequestError && /producer id/.test(e.message));
  });

  test('consumer credentials producing: PermissionError naming the subject and the role', async () => {
    const c = await connect({ server: broker.url, creds: broker.creds.consumer });
    try {
      const p = await c.producer('orders', { id: 'node-perm' });
      const rs = await Promise.allSettled([p.send({ key: 'x', value: '1' }), p.send({ value: '2' })]);
      for (const r of rs) {
        assert.equal(r.status, 'rejected');
        assert.ok(r.reason instanceof PermissionError, r.reason);
        assert.equal(r.reason.code, 'permission');
        assert.equal(r.reason.role, 'producer');
        assert.match(r.reason.subject, /^pctl\.data\.orders\.1\.\d$/);
        assert.match(r.reason.message, /may not publish to pctl\.data\.orders\.1\.\d: producing needs the producer or admin role/);
      }
      await assert.rejects(p.flush(), PermissionError);
      await assert.rejects(p.send({ key: 'y', value: '3' }), PermissionError, 'the producer stays failed');
    } finally {
      await c.close();
    }
  });

  test('closing the client under a busy producer settles every record instead of hanging', async () => {
    const c = await connect({ server: broker.url, creds: broker.creds.producer, ackTimeout: 200 });
    const p = await c.producer('orders', { id: 'node-close' });
    const all = Array.from({ length: 2000 }, (_, i) => p.send({ key: `c${i % 10}`, value: 'v' }));
    const closing = c.close();
    const rs = await Promise.allSettled(all);
    await closing;
    const failed = rs.filter((r) => r.status === 'rejected');
    for (const r of failed) assert.ok(['unavailable', 'bad_request'].includes(r.reason.code), r.reason.message);
    await assert.rejects(p.send({ key: 'x', value: 'late' }), (e) => e instanceof PctlError);
  });

  test('connection errors: bad credentials file, nobody listening', async () => {
    await assert.rejects(connect({ server: broker.url, creds: `${broker.dir}/nope.nk` }), (e) => e instanceof BadRequestError && /credentials .*nope\.nk/.test(e.message));
    await assert.rejects(connect({ server: broker.url, creds: fileURLToPath(import.meta.url) }), (e) => e instanceof BadRequestError && /no NKey seed/.test(e.message));
    await assert.rejects(connect({ server: 'nats://127.0.0.1:1', creds: broker.creds.producer }), (e) => e instanceof UnavailableError && /pctl serve/.test(e.message));
  });

  test('examples/produce.js runs against the broker', async () => {
    await broker.admin(['topic', 'create', 'example', '--partitions', '5', '--partitioner', 'kafka-murmur2']);
    const ex = fileURLToPath(new URL('../examples/produce.js', import.meta.url));
    const r = await new Promise((resolve) => {
      const c = spawn(process.execPath, [ex, 'example'], { env: { ...process.env, PCTL_SERVER: broker.url, PCTL_CREDS: broker.creds.producer } });
      let out = '';
      let err = '';
      c.stdout.setEncoding('utf8').on('data', (d) => { out += d; });
      c.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
      c.on('close', (status) => resolve({ status, out, err }));
    });
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /record 4: partition \d, epoch 1/);
    const parts = await pctlPartitions(broker, ['customer-42'], 5);
    assert.match(r.out, new RegExp(`customer-42 -> partition ${parts.get('customer-42')} of 5 \\(kafka-murmur2`));
  });

  test('the produce CLI: JSON line per record, exit 0 when all acknowledged', async () => {
    const cli = fileURLToPath(new URL('../produce', import.meta.url));
    const runCli = (creds, topic, input) => new Promise((resolve) => {
      const c = spawn(cli, ['--server', broker.url, '--creds', creds, '--topic', topic, '--producer-id', 'node-cli'], { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      c.stdout.setEncoding('utf8').on('data', (d) => { out += d; });
      c.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
      c.on('close', (status) => resolve({ status, lines: out.trimEnd().split('\n').filter(Boolean).map((l) => JSON.parse(l)), err }));
      c.stdin.end(input);
    });
    const input = 'a\t1\nb\t2\tx\nkeyless line\n\tempty key\na\t3\n';
    const ok = await runCli(broker.creds.producer, 'orders', input);
    assert.equal(ok.status, 0, ok.err);
    assert.deepEqual(ok.lines.map((l) => l.pseq).sort(), [1, 2, 3, 4, 5]);
    const parts = await pctlPartitions(broker, ['a', 'b', ''], 5);
    const by = new Map(ok.lines.map((l) => [l.pseq, l]));
    for (const [pseq, key] of [[1, 'a'], [2, 'b'], [4, ''], [5, 'a']]) {
      assert.deepEqual(Object.keys(by.get(pseq)).sort(), ['acked', 'epoch', 'partition', 'pseq', 'seq']);
      assert.equal(by.get(pseq).acked, true);
      assert.equal(by.get(pseq).partition, parts.get(key));
      assert.equal(by.get(pseq).epoch, 1);
    }
    // seq is 0 when the producer did not learn it (a fast batch's PubAck names its last record).
    if (by.get(1).seq > 0 && by.get(5).seq > 0) assert.ok(by.get(5).seq > by.get(1).seq, 'same key, later seq');
    assert.ok(by.get(5).seq > 0, 'the last record of its batch has its sequence');

    const denied = await runCli(broker.creds.consumer, 'orders', 'a\t1\n');
    assert.equal(denied.status, 1);
    assert.equal(denied.lines.length, 1);
    assert.equal(denied.lines[0].acked, false);
    assert.match(denied.lines[0].error, /^permission: .*producer or admin role/);

    const unknown = await runCli(broker.creds.producer, 'nope', 'a\t1\n');
    assert.equal(unknown.status, 2);
    assert.match(unknown.err, /nope/);
  });
});
