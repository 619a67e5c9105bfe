// The release of a partition after a commit whose answer was lost, against a real broker
// (tests/broker.js). spec/protocol.md §6.3: a commit's answer can be lost while the write is
// stored (a timeout, a leader change, a cut connection); the member's next compare-and-set then
// fails on its own revision. The member reads the key: exactly the bytes of its unanswered write
// mean the write was its own, and it goes on from that revision; any other content is a takeover.
// The commit path did this already; the release did not, so a member that closed (or gave a
// partition away) right after such a commit left the partition leased to itself until the lease
// expired, and the member it went to waited for that.
//
// The commits' answers are lost through the consumer's internal test hook unsafeLoseCommitAnswer
// (not in index.d.ts): the write is stored, then the member takes it as unanswered. Periodic
// commits are off (a 10-minute commit interval), so the last write before the release is that
// lost commit, for every partition. The keys are read back afterwards with the official
// JetStream client (@nats-io/jetstream direct gets), and the final positions compared with each
// partition stream's last sequence from the stream's own info: neither goes through the SDK.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { jetstreamManager, jetstream } from '@nats-io/jetstream';
import { connect } from '../src/index.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const enc = new TextEncoder();
const dec = new TextDecoder();

describe('release after an unanswered commit', { skip, timeout: 300_000 }, () => {
  let broker;
  let admin;
  let jsm;
  let js;
  let prod;
  let cons;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    jsm = await jetstreamManager(admin.connection);
    js = jetstream(admin.connection);
    prod = await connect({ server: broker.url, creds: broker.creds.producer });
    cons = await connect({ server: broker.url, creds: broker.creds.consumer });
  });

  after(async () => {
    await prod?.close();
    await cons?.close();
    await admin?.close();
    await broker?.stop();
  });

  const subject = (c, group, q) => `$KV.pctl-groups.${c.topicId}.${group}.p.${q}`;
  const readKey = async (c, group, q) => {
    const m = await jsm.direct.getMessage('KV_pctl-groups', { last_by_subj: subject(c, group, q) });
    return { raw: dec.decode(m.data), state: JSON.parse(dec.decode(m.data)), seq: m.seq };
  };

  // Produces n keyed records to a new 2-partition topic, then reads all of them with a member
  // whose every commit answer is lost, acknowledges them and commits once (that commit is
  // stored, its answer lost). Resolves with the member (still open), its log and the number of
  // commits the hook saw.
  async function consumeAllLosingAnswers(topic, group, n) {
    await broker.admin(['topic', 'create', topic, '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    const p = await prod.producer(topic, { id: `${topic}-p` });
    await Promise.all(Array.from({ length: n }, (_, i) => p.send({ key: `k${i % 7}`, value: `${i}` })));
    await p.close();
    const logs = [];
    let lost = 0;
    const c = await cons.consumer(topic, {
      group, member: `${group}-m`, fromBeginning: true, sessionTimeout: 30_000, commitInterval: 600_000,
      unsafeLoseCommitAnswer: () => { lost++; return true; },
      onLog: (l) => logs.push(l),
    });
    const it = c[Symbol.asyncIterator]();
    for (let i = 0; i < n; i++) {
      const r = await it.next();
      assert.ok(!r.done, `record ${i} of ${n}: the consumer stopped`);
      r.value.ack();
    }
    await c.commit();
    return { c, logs, lost: () => lost };
  }

  test('a release after an unanswered commit frees the partition at once (owner empty, final position)', async () => {
    const n = 100;
    const { c, logs, lost } = await consumeAllLosingAnswers('rel', 'relunsure', n);
    const seen = lost();
    await c.close();
    const got = {};
    for (let q = 0; q < 2; q++) {
      const k = await readKey(c, 'relunsure', q);
      const last = (await jsm.streams.info(`PCTL_rel_${q}`)).state.last_seq;
      got[q] = { owner: k.state.owner ?? '', position: k.state.position, streamLast: last };
    }
    assert.ok(seen >= 2, `the hook saw ${seen} commits: both partitions' commits should have lost their answers`);
    assert.equal(got[0].streamLast + got[1].streamLast, n, `the streams hold the ${n} records: ${JSON.stringify(got)}`);
    assert.deepEqual(got, {
      0: { owner: '', position: got[0].streamLast, streamLast: got[0].streamLast },
      1: { owner: '', position: got[1].streamLast, streamLast: got[1].streamLast },
    }, `after close() the partitions are still leased (owner set) or released at an older position: ${JSON.stringify(got)}; log: ${logs.join(' | ')}`);
    assert.equal(logs.filter((l) => l.includes('releasing from it')).length, 2, `both releases met their own unanswered commit: ${logs.join(' | ')}`);
  });

  test('a key that holds other bytes than the unanswered commit is a takeover: the release leaves it alone', async () => {
    const { c, logs } = await consumeAllLosingAnswers('reltake', 'reltake', 60);
    // Partition 0's key is overwritten from outside after the lost commit: same owner, same
    // position and generation, another lease_end. Not the member's bytes, so not its write.
    const k0 = await readKey(c, 'reltake', 0);
    const other = JSON.stringify({ ...k0.state, lease_end: k0.state.lease_end + 12345 });
    assert.notEqual(other, k0.raw);
    await js.publish(subject(c, 'reltake', 0), enc.encode(other), { expect: { lastSubjectSequence: k0.seq } });
    await c.close();
    const after0 = await readKey(c, 'reltake', 0);
    const after1 = await readKey(c, 'reltake', 1);
    assert.equal(after0.raw, other, `the release overwrote a key that was not its own write: ${after0.raw}; log: ${logs.join(' | ')}`);
    assert.equal(after1.state.owner ?? '', '', `partition 1 (its own unanswered commit) was not released: ${after1.raw}`);
  });
});
