// A member takes the create path only when a write that JetStream stores only while g.created has
// no message proves its group absent (spec/protocol.md §6.1, "Proving that the group does not
// exist"), not on a get that finds nothing (a lagging follower answers direct gets). Against a
// real broker (tests/broker.js), with the member's first get of g.created answering "not found"
// (what a follower that lags answers; every other request goes to the real server). The same cases
// as the Go client's TestJoinCreatesOnlyAProvenAbsentGroup:
//   - later-epoch: a group created (from now) before a grow reads the new partition streams from
//     their first record; the member must not create their keys (the old rule created them at the
//     streams' last sequence: the group would skip the records already in them);
//   - from-beginning: a group created from the beginning has no g.start; a member that asks for
//     the current epoch must not create one (the old rule did: the group's start changed);
//   - new group: a group that does not exist is created, with a key for every existing stream.
// The keys are read back with the official JetStream client (@nats-io/jetstream), not the SDK.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '../src/index.js';
import { KV, GROUPS_BUCKET } from '../src/kv.js';
import { ensureGroup, readGroupKeys } from '../src/consumer.js';
import { streamInfo } from '../src/jsapi.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const dec = new TextDecoder();

// The group bucket as a lagging follower answers it: the first get of `marker` finds nothing.
function missingMarker(kv, marker) {
  let missed = false;
  const get = kv.get.bind(kv);
  kv.get = async (key) => {
    if (key === marker && !missed) {
      missed = true;
      return null;
    }
    return get(key);
  };
  return kv;
}

describe('a member creates only a group proven absent', { skip, timeout: 180_000 }, () => {
  let broker;
  let admin;
  let official;

  // A member's join (the decision and the read of the group's keys), its first get of g.created
  // missing; returns the group's keys as it read them.
  async function join(topic, group, o) {
    const { topic: desc } = await admin.topic(topic);
    const kv = missingMarker(new KV(admin.nc, GROUPS_BUCKET, 10_000), `${desc.id}.${group}.g.created`);
    await ensureGroup(admin, kv, desc, group, o);
    return readGroupKeys(kv, desc.id, group, 30_000);
  }

  // The key's last message (the stream's own message get), or null: none, or a delete marker.
  async function key(k) {
    let m;
    try {
      m = await official.streams.getMessage(`KV_${GROUPS_BUCKET}`, { last_by_subj: `$KV.${GROUPS_BUCKET}.${k}` });
    } catch (e) {
      if (/no message found/i.test(e?.message ?? '')) return null;
      throw e;
    }
    if (!m || m.header?.get('KV-Operation')) return null;
    return { value: m.data };
  }

  async function produce(topic, n) {
    const p = await admin.producer(topic);
    await Promise.all(Array.from({ length: n }, (_, i) => p.send({ key: `k${i}`, value: 'v' })));
    await p.close();
  }

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    official = await jetstreamManager(admin.nc);
    await broker.admin(['topic', 'create', 'grown', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    await broker.admin(['topic', 'create', 'fresh', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    await produce('grown', 40);
    // Two groups exist before the grow: "now" (from now) and "begin" (from the beginning).
    for (const [group, o] of [['now', {}], ['begin', { from: 'beginning' }]]) {
      const { topic: desc } = await admin.topic('grown');
      const kv = new KV(admin.nc, GROUPS_BUCKET, 10_000);
      await ensureGroup(admin, kv, desc, group, o);
    }
    await broker.admin(['topic', 'repartition', 'grown', '--partitions', '4']);
    await produce('grown', 60);
  });

  after(async () => {
    await admin?.close();
    await broker?.stop();
  });

  test('later-epoch: no keys for the partition streams the grow made', async () => {
    await join('grown', 'now', {});
    const { topic: desc } = await admin.topic('grown');
    for (const q of [2, 3]) {
      const e = await key(`${desc.id}.now.p.${q}`);
      assert.equal(e, null, `partition ${q} (created by the grow, after the group) has a key ${e && dec.decode(e.value)}: the group would skip the records before it`);
    }
  });

  test('from-beginning: no g.start for a group created from the beginning', async () => {
    const gk = await join('grown', 'begin', { from: 'current-epoch' });
    const { topic: desc } = await admin.topic('grown');
    const e = await key(`${desc.id}.begin.g.start`);
    assert.equal(e, null, `a group created from the beginning has a g.start ${e && dec.decode(e.value)}: its start changed`);
    assert.equal(gk.start, null, 'the member read a g.start');
  });

  test('new group: created, with a key for every existing stream', async () => {
    await produce('fresh', 30);
    const gk = await join('fresh', 'new', { assignor: 'sticky' });
    const { topic: desc } = await admin.topic('fresh');
    for (const q of [0, 1]) {
      const e = await key(`${desc.id}.new.p.${q}`);
      assert.ok(e, `partition ${q} has no key`);
      const last = (await streamInfo(admin.nc, `PCTL_fresh_${q}`)).state.last_seq;
      assert.ok(last > 0);
      assert.equal(JSON.parse(dec.decode(e.value)).position, last, `partition ${q}: want its last sequence (from now)`);
    }
    assert.ok(await key(`${desc.id}.new.g.created`), 'no g.created');
    assert.equal(gk.assignor && dec.decode(gk.assignor.value), '{"assignor":"sticky"}');
  });
});
