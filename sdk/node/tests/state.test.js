// The state handover API (spec/protocol.md §6.9) against a real broker: the running-total
// processor of examples/stateful.js (its durable state in a KV bucket, exactly once by the input
// record that last changed each key) in a sticky group on a linear-murmur2 topic: two members,
// a third joins, the topic grows 4 -> 8, a member crashes (its connection closed, nothing
// released). The final totals equal the totals computed here directly from the input. The same
// checker fails on a processor that does not load a key's state when the key arrives (what a
// consumer without the state API gives). Plus the option's validation.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, BadRequestError } from '../src/index.js';
import { jsRequest } from '../src/jsapi.js';
import { KV, RunningTotal } from '../examples/stateful.js';
import { startBroker, missingToolchain } from './broker.js';
import { waitFor } from './group.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

const KEYS = 30;

describe('state handover', { skip, timeout: 300_000 }, () => {
  let broker;
  let admin;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
  });

  after(async () => {
    await admin?.close();
    await broker?.stop();
  });

  // Runs the scenario on topic `name` with processors built by mk(store); returns
  // {expected, got, stats}: the totals from the input, and the bucket's at the end.
  async function scenario(name, { loads, crash, grow }) {
    await broker.admin(['topic', 'create', name, '--partitions', '4', '--partitioner', 'linear-murmur2']);
    const bucket = `${name}-totals`;
    await jsRequest(admin.connection, `$JS.API.STREAM.CREATE.KV_${bucket}`, {
      name: `KV_${bucket}`, subjects: [`$KV.${bucket}.>`], max_msgs_per_subject: 1, allow_direct: true,
      storage: 'file', num_replicas: 1, discard: 'new', allow_rollup_hdrs: true, deny_delete: true,
    });
    const expected = new Map(); // key -> {total, count}: straight from the input
    const p = await admin.producer(name, { id: `${name}-p` });
    let sent = 0;
    const send = async (n) => {
      for (let i = 0; i < n; i++, sent++) {
        const key = `k${sent % KEYS}`;
        const amount = (sent * 7) % 13 + 1;
        const e = expected.get(key) ?? { total: 0, count: 0 };
        expected.set(key, { total: e.total + amount, count: e.count + 1 });
        p.send({ key, value: String(amount) });
      }
      await p.flush();
    };
    const seen = new Set(); // "partition/seq" delivered by any member
    const members = [];
    const logs = [];
    const start = async (id) => {
      const c = await connect({ server: broker.url, creds: broker.creds.admin });
      const rt = new RunningTotal(new KV(c.connection, bucket, 5000), { loads });
      const cn = await c.consumer(name, {
        group: 'g', member: id, fromBeginning: true, heartbeat: 150, sessionTimeout: 1500, commitInterval: 100,
        assignor: 'sticky', state: rt, onLog: (l) => logs.push(l),
      });
      const m = { id, c, cn, rt, done: null };
      m.done = cn.run(async (msg) => {
        await rt.handle(msg);
        if (m.crashAfter !== undefined && --m.crashAfter <= 0) {
          // A crash after the state write and before the acknowledgement: the connection goes,
          // nothing is committed, flushed or released; the record comes again to another member.
          m.crashAfter = undefined;
          c.nc.close();
          throw new Error('crashed');
        }
        seen.add(`${msg.partition}/${msg.seq}`);
      }).catch((e) => { m.error = e; });
      members.push(m);
      return m;
    };
    const all = () => waitFor(() => seen.size === sent, 30_000, () => `${sent} records delivered, have ${seen.size}; log ${logs.slice(-15).join('\n')}`);
    await start('a');
    await start('b');
    await send(200);
    await all();
    await start('c');
    await waitFor(() => members.every((m) => m.cn.assignment.length > 0), 20_000, () => `every member owns a partition: ${members.map((m) => m.cn.assignment)}`);
    await send(200);
    await all();
    if (grow) {
      await broker.admin(['topic', 'expand', name, '--partitions', '8']);
      await send(200);
      await all();
    }
    if (crash) {
      // Member a crashes: its connection goes, nothing flushed or released; its leases expire.
      members[0].crashAfter = 20;
      await send(200);
      await all();
      // Its run() rejects once it has stopped (requests on the closed connection time out).
      await members[0].done;
    }
    const live = members.filter((m) => !(crash && m.id === 'a'));
    for (const m of live) assert.equal(m.error, undefined, `member ${m.id}: ${m.error?.message}`);
    if (crash) assert.match(members[0].error?.message ?? '', /crashed/);
    await Promise.all(live.map((m) => m.cn.close()));
    const stats = members.map((m) => ({ id: m.id, ...m.rt.stats }));
    await Promise.all(live.map((m) => m.c.close()));
    await p.close();
    const store = new KV(admin.connection, bucket, 5000);
    const got = new Map();
    for (const k of expected.keys()) {
      const e = await store.get(RunningTotal.token(Buffer.from(k)));
      const st = e ? JSON.parse(Buffer.from(e.value).toString()) : null;
      got.set(k, st ? { total: st.total, count: st.count } : null);
    }
    return { expected, got, stats, sent };
  }

  test('2 members, a third joins, 4 -> 8, a crash: the totals are the input\'s', async () => {
    const { expected, got, stats, sent } = await scenario('rt', { loads: true, crash: true, grow: true });
    assert.equal(sent, 800);
    assert.deepEqual(Object.fromEntries(got), Object.fromEntries(expected), `stats ${JSON.stringify(stats)}`);
    const loads = stats.reduce((s, x) => s + x.loads, 0);
    assert.ok(loads >= KEYS, `every key was loaded at least once: ${JSON.stringify(stats)}`);
    // The record member a applied and crashed on came again and was recognised.
    assert.ok(stats.reduce((s, x) => s + x.duplicates, 0) >= 1, JSON.stringify(stats));
    // The third member took keys that had state: it loaded them.
    assert.ok(stats.find((s) => s.id === 'c').loads > 0, JSON.stringify(stats));
  });

  test('the checker fails on a processor that does not load a key\'s state on arrival', async () => {
    const { expected, got } = await scenario('rtwrong', { loads: false, crash: false, grow: false });
    const wrong = [...expected.keys()].filter((k) => got.get(k)?.total !== expected.get(k).total);
    assert.ok(wrong.length > 0, 'a processor that starts moved keys from zero ends with the input\'s totals: the checker sees nothing');
    assert.notDeepEqual(Object.fromEntries(got), Object.fromEntries(expected));
  });

  test('one member across 4 -> 8: loads and flushes alternate per key, and the close flushes every held key', async () => {
    await broker.admin(['topic', 'create', 'rtone', '--partitions', '4', '--partitioner', 'linear-murmur2']);
    const p = await admin.producer('rtone', { id: 'rtone-p' });
    const held = new Map(); // key -> partition it is held for, by the handler's calls
    const wrong = [];
    let delivering = null;
    const state = {
      load: (ks) => {
        for (const k of ks.keys) {
          if (held.has(String(k))) wrong.push(`load of ${k}, held for ${held.get(String(k))}`);
          if (delivering === String(k)) wrong.push(`load of ${k} while a record of it is delivered`);
          held.set(String(k), ks.partition);
        }
      },
      flush: (ks) => {
        for (const k of ks.keys) {
          if (!held.has(String(k))) wrong.push(`flush (${ks.reason}) of ${k}, not held`);
          if (delivering === String(k)) wrong.push(`flush of ${k} while a record of it is delivered`);
          held.delete(String(k));
        }
      },
    };
    let n = 0;
    const cn = await admin.consumer('rtone', { group: 'g', fromBeginning: true, heartbeat: 150, state });
    const done = cn.run(async (m) => {
      if (!held.has(String(m.key))) wrong.push(`record of ${m.key} delivered without its state loaded`);
      delivering = String(m.key);
      await new Promise((r) => setImmediate(r));
      delivering = null;
      n++;
    });
    for (let i = 0; i < 40; i++) p.send({ key: `k${i % 20}`, value: '1' });
    await p.flush();
    await waitFor(() => n === 40, 20_000, () => `40 deliveries, have ${n}`);
    assert.equal(held.size, 20);
    await broker.admin(['topic', 'expand', 'rtone', '--partitions', '8']);
    for (let i = 0; i < 40; i++) p.send({ key: `k${i % 20}`, value: '1' });
    await p.close();
    await waitFor(() => n === 80, 20_000, () => `80 deliveries, have ${n}`);
    await cn.close();
    await done;
    assert.deepEqual(wrong, []);
    assert.equal(held.size, 0, `held after close: ${[...held.keys()]}`);
  });

  test('a state handler needs gating and load/flush functions', async () => {
    await broker.admin(['topic', 'create', 'rtopt', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    const state = { load: async () => {}, flush: async () => {} };
    await assert.rejects(admin.consumer('rtopt', { group: 'g', state, gating: false }), (e) => e instanceof BadRequestError && /gating/.test(e.message));
    await assert.rejects(admin.consumer('rtopt', { group: 'g', state: { load: async () => {} } }), (e) => e instanceof BadRequestError && /flush/.test(e.message));
  });

  test('an error from load stops the member', async () => {
    await broker.admin(['topic', 'create', 'rterr', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    const p = await admin.producer('rterr', { id: 'rterr-p' });
    p.send({ key: 'x', value: '1' });
    await p.close();
    let delivered = 0;
    const cn = await admin.consumer('rterr', {
      group: 'g', fromBeginning: true, heartbeat: 150,
      state: { load: async () => { throw new Error('disk full'); }, flush: async () => {} },
    });
    await assert.rejects(cn.run(async () => { delivered++; }), (e) => /state load of key "x".*disk full/.test(e.message));
    assert.equal(delivered, 0);
  });
});
