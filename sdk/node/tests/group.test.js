// One consumer group, members in two languages: this SDK's `consume` command (Node) and the Go
// `pctl consume`, sharing the partitions of one topic while a producer writes to it through a
// grow, a function swap and a shrink, and while a member is killed (kill -9). Checked with
// `pctl verify` (client/verify: every acknowledged record delivered, per-key order of first
// deliveries) and placements with `pctl partition` for each epoch.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '../src/index.js';
import { startBroker, missingToolchain, pctlPartitions } from './broker.js';
import { startMember, waitFor, SentLog, verify } from './group.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Sends n records (pace: a pause of that many ms after every 100, so that an epoch change can
// land in the middle).
async function produce(p, log, n, from, keys, pace = 0) {
  const out = [];
  for (let i = from; i < from + n; i++) {
    const key = `key-${i % keys}`;
    const pseq = p.seq + 1;
    out.push(p.send({ key, value: `${key}:${i}` }).then(() => log.add(p.id, pseq, key, true), () => log.add(p.id, pseq, key, false)));
    if (i % 500 === 499) await p.ready();
    if (pace && i % 100 === 99) await sleep(pace);
  }
  await Promise.all(out);
}

// Distinct (producer, pseq) delivered by all members together.
function distinct(members) {
  const s = new Set();
  for (const m of members) for (const l of m.lines) s.add(`${l.producer}/${l.pseq}`);
  return s.size;
}

describe('a group of Node and Go members', { skip, timeout: 900_000 }, () => {
  let broker;
  let prod;
  let dir;
  const running = [];

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    prod = await connect({ server: broker.url, creds: broker.creds.producer });
    dir = mkdtempSync(join(tmpdir(), 'pctl-node-group-'));
  });

  after(async () => {
    await Promise.all(running.map((m) => m.kill('SIGKILL')));
    await prod?.close();
    await broker?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('order across a grow, a function swap and a shrink, with two Node members and a Go member', async () => {
    await broker.admin(['topic', 'create', 'epochs', '--partitions', '3', '--partitioner', 'kafka-murmur2']);
    const members = [];
    const p = await prod.producer('epochs', { id: 'epochs-p' });
    const log = new SentLog();
    const keys = 120;
    const phases = [
      null,
      ['--partitions', '6'],
      ['--partitioner', 'librdkafka-consistent'],
      ['--partitions', '4'],
      'tail',
    ];
    let from = 0;
    for (const [i, change] of phases.entries()) {
      if (i === 2) {
        // The members start with a backlog that spans two epochs (only gates keep keys in
        // order then), and go on through the swap and the shrink as records arrive.
        // The Go member joins late, while the Node members are draining the backlog.
        members.push(
          startMember(broker, 'node', { topic: 'epochs', group: 'g', member: 'node-a' }),
          startMember(broker, 'node', { topic: 'epochs', group: 'g', member: 'node-c' }),
        );
        running.push(...members);
        await waitFor(async () => {
          const r = await prod.request('pctl.api.group.list', { topic: 'epochs' });
          const live = r.groups.find((g) => g.group === 'g')?.members ?? [];
          return live.includes('node-a') && live.includes('node-c');
        }, 30_000, 'the Node members to join');
        members.push(startMember(broker, 'go', { topic: 'epochs', group: 'g', member: 'go-b' }));
        running.push(members[2]);
      }
      const sending = produce(p, log, 1500, from, keys, 10);
      from += 1500;
      if (Array.isArray(change)) {
        await sleep(50);
        await broker.admin(['topic', 'repartition', 'epochs', ...change]);
      }
      await sending;
    }
    await p.close();
    await waitFor(() => distinct(members) >= from, 120_000, () => `${from} records delivered, have ${distinct(members)}; ${members.map((m) => `${m.member}: ${m.lines.length}`).join(', ')}`);
    await Promise.all(members.map((m) => m.kill('SIGTERM')));
    for (const m of members) assert.ok(m.lines.length > 0, `${m.member} took part: ${m.err()}`);

    const sent = log.write(join(dir, 'epochs-sent.jsonl'));
    const v = await verify(broker, dir, sent, members.map((m) => m.raw));
    assert.equal(v.status, 0, JSON.stringify(v.res, null, 1));
    assert.equal(v.report.lost, 0);
    assert.equal(v.report.violations, 0);
    assert.equal(v.report.acked, from);

    // Each record in the partition its epoch's function gives (pctl partition, the Go host).
    const keyList = Array.from({ length: keys }, (_, i) => `key-${i}`);
    const layouts = { 1: ['kafka-murmur2', 3], 2: ['kafka-murmur2', 6], 3: ['librdkafka-consistent', 6], 4: ['librdkafka-consistent', 4] };
    const parts = {};
    for (const [e, [plugin, n]] of Object.entries(layouts)) parts[e] = await pctlPartitions(broker, keyList, n, plugin);
    const epochs = new Set();
    for (const m of members) {
      for (const l of m.lines) {
        epochs.add(l.epoch);
        assert.equal(l.partition, parts[l.epoch].get(l.key), `${m.member}: ${l.key} in epoch ${l.epoch}`);
      }
    }
    assert.deepEqual([...epochs].sort(), [1, 2, 3, 4], 'records of every epoch were delivered');
  });

  test('a Node member killed with kill -9: its partitions are taken over, nothing is lost, keys stay in order', async () => {
    await broker.admin(['topic', 'create', 'crash', '--partitions', '4', '--partitioner', 'kafka-murmur2']);
    const members = [
      startMember(broker, 'node', { topic: 'crash', group: 'g', member: 'node-a' }),
      startMember(broker, 'node', { topic: 'crash', group: 'g', member: 'node-b' }),
      startMember(broker, 'go', { topic: 'crash', group: 'g', member: 'go-c' }),
      startMember(broker, 'node', { topic: 'crash', group: 'g', member: 'node-d' }),
    ];
    running.push(...members);
    await waitFor(async () => {
      const r = await prod.request('pctl.api.group.list', { topic: 'crash' });
      const live = r.groups.find((g) => g.group === 'g')?.members ?? [];
      return members.every((m) => live.includes(m.member));
    }, 30_000, 'every member to join');
    await sleep(500); // a rebalance round: each member owns a partition
    const victim = members[1];
    const p = await prod.producer('crash', { id: 'crash-p' });
    const log = new SentLog();
    const keys = 80;
    let from = 0;
    // Records arrive while the members settle, then the victim is killed mid-stream, then the
    // topic grows while its partitions wait for their leases to expire (gates wait for them).
    for (let round = 0; round < 10; round++) {
      await produce(p, log, 300, from, keys);
      from += 300;
      await sleep(100);
    }
    await waitFor(() => victim.lines.length > 0, 30_000, 'the victim to deliver');
    const victimParts = new Set(victim.lines.map((l) => l.partition));
    await victim.kill('SIGKILL');
    const killedAt = victim.lines.length;
    for (let round = 0; round < 5; round++) {
      await produce(p, log, 300, from, keys);
      from += 300;
    }
    await broker.admin(['topic', 'repartition', 'crash', '--partitions', '6']);
    for (let round = 0; round < 5; round++) {
      await produce(p, log, 300, from, keys);
      from += 300;
    }
    await p.close();
    const alive = members.filter((m) => m !== victim);
    await waitFor(() => distinct(members) >= from, 120_000, () => `${from} delivered, have ${distinct(members)}`);
    await Promise.all(alive.map((m) => m.kill('SIGTERM')));
    assert.equal(victim.lines.length, killedAt);
    const takenOver = alive.flatMap((m) => m.lines).filter((l) => victimParts.has(l.partition));
    assert.ok(takenOver.length > 0, 'the victim\'s partitions were delivered by the others');

    const sent = log.write(join(dir, 'crash-sent.jsonl'));
    const v = await verify(broker, dir, sent, members.map((m) => m.raw));
    assert.equal(v.status, 0, JSON.stringify(v.res, null, 1));
    assert.equal(v.report.lost, 0);
    assert.equal(v.report.violations, 0);
    writeFileSync(join(dir, 'crash-report.json'), JSON.stringify(v.res));
  });
});
