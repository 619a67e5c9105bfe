// The sticky assignor (spec/protocol.md §6.2.1) in this SDK's consumer, against a real broker:
// two Node members of a sticky group on a linear-murmur2 topic of 4 partitions keep every key on
// its member when the topic grows to 8 (the leader's record says moved 0, and each member owns
// the children of its partitions); a member that asks for another assignor is refused; and an
// epoch change that reaches a member while its rebalance reads the record does not give a record
// the new epoch with the old epoch's partitions (one view per rebalance).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '../src/index.js';
import { KV, GROUPS_BUCKET } from '../src/kv.js';
import { startBroker, missingToolchain } from './broker.js';
import { waitFor } from './group.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

describe('sticky groups', { skip, timeout: 300_000 }, () => {
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

  test('an expansion 4 -> 8 under linear hashing moves no key between two members', async () => {
    await broker.admin(['topic', 'create', 'st', '--partitions', '4', '--partitioner', 'linear-murmur2']);
    const p = await prod.producer('st', { id: 'st-p' });
    for (let i = 0; i < 200; i++) p.send({ key: `k${i % 50}`, value: String(i) });
    await p.flush?.();
    await p.ready?.();
    let grown = false;
    const misses = []; // deliveries after the expansion by a member that did not own the key's parent before
    const keysAfter = new Set();
    let ownedBefore = null; // member -> its partitions at the expansion
    let delivered = 0;
    const members = [];
    const logs = [];
    for (const id of ['a', 'b']) {
      const c = await cons.consumer('st', { group: 'sg', member: id, fromBeginning: true, heartbeat: 150, assignor: 'sticky', onLog: (l) => logs.push(l) });
      members.push(c);
      c.run(async (m) => {
        if (grown) {
          // Linear hashing 4 -> 8: a key of partition q in epoch 2 was in q mod 4 in epoch 1.
          keysAfter.add(m.key.toString());
          if (!ownedBefore[id].includes(m.partition % 4)) misses.push(`${m.key} (partition ${m.partition}, epoch ${m.epoch}) by ${id}`);
        }
        delivered++;
      }).catch(() => {});
    }
    const { topic: t } = await cons.topic('st');
    const kv = new KV(cons.nc, GROUPS_BUCKET, 5000);
    let last = null;
    const record = async () => {
      const e = await kv.get(`${t.id}.sg.g.assignment`);
      last = e ? JSON.parse(new TextDecoder().decode(e.value)) : null;
      return last;
    };
    const owns = () => members.map((c) => c.assignment.join(','));
    await waitFor(async () => (await record())?.members?.length === 2 && members.every((c) => c.assignment.length === 2), 60_000, () => `record ${JSON.stringify(last)}, owned ${owns()}; log ${logs.slice(-20).join('\n')}`);
    await waitFor(() => delivered >= 200, 60_000, () => `200 deliveries, have ${delivered}`);
    // Who joined first took every partition, then kept its lowest-numbered two (§6.2.1).
    const want = members.map((c) => [...c.assignment, ...c.assignment.map((q) => q + 4)].sort((x, y) => x - y).join(','));
    ownedBefore = { a: members[0].assignment, b: members[1].assignment };
    grown = true;
    await broker.admin(['topic', 'expand', 'st', '--partitions', '8']);
    for (let i = 200; i < 400; i++) p.send({ key: `k${i % 50}`, value: String(i) });
    await p.close();
    await waitFor(async () => (await record())?.epoch === 2 && owns().join('/') === want.join('/'), 60_000, () => `record ${JSON.stringify(last)}, owned ${owns()}; log ${logs.slice(-20).join('\n')}`);
    await waitFor(() => delivered >= 400, 60_000, () => `400 deliveries, have ${delivered}`);
    const rec = await record();
    assert.equal(rec.assignor, 'sticky');
    assert.equal(rec.moved, 0, `moved ${rec.moved}`);
    assert.deepEqual(rec.partitions, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.equal(rec.history.at(-1).moved, 0);
    assert.equal(keysAfter.size, 50);
    assert.deepEqual(misses, [], 'keys delivered after the expansion by a member that did not hold them');
    assert.equal(members[0].stats.assignments + members[1].stats.assignments >= 2, true);
    // A member that asks for modulo in this sticky group is refused (§6.1).
    await assert.rejects(async () => {
      const c = await cons.consumer('st', { group: 'sg', member: 'c', assignor: 'modulo' });
      try {
        await c.start();
      } finally {
        await c.close();
      }
    }, (e) => e.code === 'conflict' && /sticky/.test(e.message));
    await Promise.all(members.map((c) => c.close()));
  });

  // §6.2.1 "One view per rebalance": an epoch change (4 -> 8) that reaches the member while its
  // rebalance reads g.assignment must not give the record it writes the new epoch with the old
  // epoch's partitions (the next record, finding that epoch, would spread partitions 4..7 by count
  // instead of giving each child to its parent's owner). The member's real KV object is wrapped:
  // its read of the record returns only after the expansion is in the member's descriptor.
  test('an epoch change during the read of the record: every record has its epoch\'s partitions', async () => {
    await broker.admin(['topic', 'create', 'sv', '--partitions', '4', '--partitioner', 'linear-murmur2']);
    const { topic: t } = await cons.topic('sv');
    const key = `${t.id}.svg.g.assignment`;
    const want = { 1: [0, 1, 2, 3], 2: [0, 1, 2, 3, 4, 5, 6, 7] };
    // Every record stored under the key, seen by an ordered consumer of the groups bucket's
    // stream (a KV watch), and every record the member's own writes stored.
    const admin = await connect({ server: broker.url, creds: broker.creds.admin });
    const js = jetstream(admin.connection);
    const watched = [];
    const wc = await js.consumers.get(`KV_${GROUPS_BUCKET}`, { filter_subjects: [`$KV.${GROUPS_BUCKET}.${key}`], deliver_policy: 'all' });
    const msgs = await wc.consume();
    (async () => {
      for await (const m of msgs) watched.push({ rev: m.seq, ...JSON.parse(new TextDecoder().decode(m.data)) });
    })().catch(() => {});
    const written = [];
    const logs = [];
    const c = await cons.consumer('sv', { group: 'svg', member: 'a', heartbeat: 150, assignor: 'sticky', onLog: (l) => logs.push(l) });
    const kv = c.kv;
    const realGet = kv.get.bind(kv);
    const realUpdate = kv.update.bind(kv);
    const realCreate = kv.create.bind(kv);
    kv.update = async (k, v, rev) => {
      const r = await realUpdate(k, v, rev);
      if (k === key) written.push({ rev: r, ...JSON.parse(new TextDecoder().decode(v)) });
      return r;
    };
    kv.create = async (k, v) => {
      const r = await realCreate(k, v);
      if (k === key) written.push({ rev: r, ...JSON.parse(new TextDecoder().decode(v)) });
      return r;
    };
    let armed = false;
    let expanded = false;
    kv.get = async (k) => {
      const r = await realGet(k);
      if (armed && k === key) {
        armed = false;
        await broker.admin(['topic', 'expand', 'sv', '--partitions', '8']);
        await waitFor(() => c.desc.epochs.at(-1).epoch === 2, 30_000, () => `the member's descriptor at epoch 2, has ${c.desc.epochs.at(-1).epoch}`);
        expanded = true;
      }
      return r;
    };
    c.run(async () => {}).catch(() => {});
    const show = () => `watched ${JSON.stringify(watched.map(({ rev, epoch, partitions, moved }) => ({ rev, epoch, partitions, moved })))}; log ${logs.slice(-20).join('\n')}`;
    await waitFor(() => watched.some((r) => r.epoch === 1) && c.assignment.length === 4, 60_000, show);
    assert.deepEqual(watched.at(-1).partitions, want[1]);
    armed = true;
    c.rebalance();
    await waitFor(() => expanded, 60_000, () => `the armed read of the record; ${show()}`);
    await waitFor(() => watched.at(-1)?.epoch === 2 && c.assignment.length === 8, 60_000, show);
    await c.close();
    await msgs.close();
    await admin.close();
    for (const [what, recs] of [['watched', watched], ['written', written]]) {
      for (const r of recs) assert.deepEqual(r.partitions, want[r.epoch], `${what} record revision ${r.rev} (round ${r.round}): epoch ${r.epoch} with partitions ${r.partitions}; ${show()}`);
    }
    assert.ok(written.length >= 1, 'the member wrote the epoch 2 record');
    const last = watched.at(-1);
    assert.equal(last.epoch, 2);
    assert.deepEqual(last.partitions, want[2]);
    assert.equal(last.moved, 0, `moved ${last.moved}`);
    assert.deepEqual(last.owners, Array(8).fill(0));
  });
});
