// The read-back's end (spec/protocol.md §5.1.2, "the read-back's end"): a batch read back after a
// leader change (confirm) gives every record it does not find a new deduplication id, so a stored
// record the read misses is stored a second time. The read must not end at the stream info's last
// sequence: while a stream has no leader, nats-server answers STREAM.INFO from every member with
// its own state, and a member that lags names a last sequence below records already stored. Here
// the read (Sink.readBack) is given such a last sequence against a real broker, whose
// STREAM.MSG.GET answers stand for the leader's: the record stored above it must be found. The
// same when the stream's last message is gone (the leader names no last message: the read goes on
// with next_by_subj), and a record that is not stored must not be found. As the Go producer's
// TestReadBackReachesTheLeadersEnd (internal/produce/holepath_test.go). And settle's read-back after
// EOBs that get no answer, and settling a duplicate PubAck after a flow ack (the last two tests).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../src/index.js';
import { Sink } from '../src/sink.js';
import { KIND, leaderLast } from '../src/fastbatch.js';
import { jsRequest, streamInfo } from '../src/jsapi.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

// The spec's bound (§5.1.2, settle 1): the read-back comes after 3 unanswered EOBs.
const SPEC_SILENT_EOBS = 3;

// Publishes to subject (a partition stream's) and returns the stored sequence.
function publisher(nc, subject) {
  return async (data, headers) => {
    const m = await nc.request(subject, Buffer.from(data), { timeout: 5000, headers });
    const r = JSON.parse(Buffer.from(m.data).toString());
    assert.ok(!r.error && r.seq > 0, `publish to ${subject}: ${JSON.stringify(r)}`);
    return r.seq;
  };
}

// A record of p as send makes it (its identity, its headers), made by hand and not sent: sent
// `sends` times, stored above floor in stream; resolve and reject get its outcome.
function handRecord(p, stream, floor, value, sends, resolve, reject) {
  p.seq += 1;
  const pd = p.pending(p.seq, null, new Uint8Array(Buffer.from(value)), null, null);
  pd.floors = new Map([[stream, floor]]);
  pd.sends = sends;
  p.headersOf(pd);
  pd.resolve = resolve;
  pd.reject = reject;
  p.unsettled++;
  return pd;
}

// A sink of p's partition 0 in epoch, not started (only its settle runs here), whose batch id
// holds recs (stored above floor).
function handSink(p, epoch, floor, id, recs) {
  const s = new Sink(p, epoch, 0);
  s.floor = floor;
  s.floorKnown = true;
  s.b = {
    id, recs, keys: null, acked: 0, flowed: 0, commit: 0, anomaly: '', ended: false,
    unknown: false, never: false, noResp: false, pubAck: null, progress: Date.now(), checked: Date.now(), transient: false, confirming: false,
  };
  p.batches.set(id, s);
  return s;
}

// What s.settle(null) returns, or 'timeout' if it does not finish within ms.
async function settleWithin(s, ms) {
  let timer;
  const bound = new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), ms); });
  try {
    return await Promise.race([s.settle(null), bound]);
  } finally {
    clearTimeout(timer);
  }
}

const cases = [
  // before: other messages stored before the record; stored: whether the record is stored (after
  // them); after: messages stored after it, deleted when gone; infoLast: the last sequence the
  // stream info named (a lagging member's).
  { name: 'info lags behind the record', before: 3, stored: true, after: 0, gone: false, infoLast: 3 },
  { name: 'info lags, the last message gone', before: 3, stored: true, after: 2, gone: true, infoLast: 3 },
  { name: 'empty stream, info lags', before: 0, stored: true, after: 0, gone: false, infoLast: 0 },
  { name: 'not stored', before: 3, stored: false, after: 1, gone: true, infoLast: 3 },
  { name: 'info current', before: 3, stored: true, after: 1, gone: false, infoLast: 5 },
];

describe('the read-back (after a leader change, after unanswered EOBs)', { skip, timeout: 180_000 }, () => {
  let broker;
  let prod;
  let admin;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    prod = await connect({ server: broker.url, creds: broker.creds.producer });
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
  });

  after(async () => {
    await prod?.close();
    await admin?.close();
    await broker?.stop();
  });

  // The settle tests' bench: a new topic of one partition and a producer of it (id) with a 300 ms
  // ack timeout; its current epoch, the partition's stream and the epoch's subject.
  async function settling(topic, id) {
    await broker.admin(['topic', 'create', topic, '--partitions', '1', '--partitioner', 'kafka-murmur2']);
    const p = await prod.producer(topic, { id });
    p.ackTimeout = 300;
    const epoch = p.desc.epochs[p.desc.epochs.length - 1].epoch;
    return { p, epoch, stream: `PCTL_${topic}_0`, subject: `pctl.data.${topic}.${epoch}.0` };
  }

  cases.forEach((tc, n) => {
    test(`reaches the stream leader's end: ${tc.name}`, async () => {
      const topic = `rb${n}`;
      await broker.admin(['topic', 'create', topic, '--partitions', '1', '--partitioner', 'kafka-murmur2']);
      const p = await prod.producer(topic, { id: `rb${n}-p` });
      try {
        const epoch = p.desc.epochs[p.desc.epochs.length - 1].epoch;
        const stream = `PCTL_${topic}_0`;
        const subject = `pctl.data.${topic}.${epoch}.0`;
        const publish = publisher(prod.nc, subject);
        const start = (await streamInfo(prod.nc, stream)).state.last_seq;
        for (let i = 0; i < tc.before; i++) await publish(`other ${i}`);
        const floor = start + tc.before;
        p.seq += 1;
        const pd = p.pending(p.seq, new Uint8Array(Buffer.from('k7')), new Uint8Array(Buffer.from('value 7')), null, null);
        pd.floors = new Map([[stream, floor]]);
        let at = 0;
        if (tc.stored) at = await publish('value 7', p.headersOf(pd));
        const afters = [];
        for (let i = 0; i < tc.after; i++) afters.push(await publish(`after ${i}`));
        if (tc.gone) {
          for (const seq of afters) await jsRequest(admin.nc, `$JS.API.STREAM.MSG.DELETE.${stream}`, { seq, no_erase: true });
          // The case this stands for: the leader names no last message, so the read goes on.
          assert.equal(await leaderLast(prod.nc, stream, 5000), null, 'the stream leader still names a last message');
        }

        const s = new Sink(p, epoch, 0);
        s.floor = floor;
        s.floorKnown = true;
        s.verify = true;
        s.b = { id: 'b1', recs: [pd], acked: 0 };
        const { found } = await s.readBack(start + tc.infoLast);
        const got = found.get(0);
        if (tc.stored) {
          assert.ok(got !== undefined, `the record stored at ${at} was not found by a read whose stream info named last sequence ${start + tc.infoLast}: confirm would give it a new id and it would be stored twice`);
          assert.equal(got, at, `the record stored at ${at} was found at ${got}`);
        } else {
          assert.equal(got, undefined, `a record that is not stored was found at ${got}`);
        }
      } finally {
        await p.close();
      }
    });
  });

  // A batch whose EOB is never answered (spec/protocol.md §5.1.2, settle 1): settling a batch that
  // got no reply, the sink closes it with an EOB, and nats-server 2.15.2 may never answer that EOB:
  // a fast batch whose commit waits for proposals a stream's replica or placement change dropped
  // stays "committing" on the server for good and every later message of it is skipped without a
  // reply, while the stream takes new batches. After 3 unanswered EOBs the sink must read the
  // partition back rather than close the batch forever. Here the partition stream holds the
  // batch's first 2 of 3 records, and the sink's EOB subject has a real subscriber that never
  // answers, standing for the server's committing batch: settle must finish, acknowledge the 2
  // records and queue the third to be sent again under its old id. As the Go producer's
  // TestSettleReadsBackWhenTheEOBIsNeverAnswered (internal/produce/silenteob_test.go).
  test('settle reads the partition back when the EOB is never answered', async () => {
    const topic = 'silenteob';
    const { p, epoch, stream, subject } = await settling(topic, 'silent-p');
    let s;
    try {
      const publish = publisher(prod.nc, subject);
      // The EOB subject: a real subscriber takes every EOB and answers none.
      const silentSubject = `pctl.data.${topic}.silent.0`;
      let eobs = 0;
      const sub = admin.nc.subscribe(silentSubject, { callback: () => { eobs++; } });
      await admin.nc.flush();

      await publish("someone else's");
      const floor = (await streamInfo(prod.nc, stream)).state.last_seq;
      const recs = [];
      const results = [];
      for (let n = 1; n <= 3; n++) {
        const r = { state: 'pending', value: undefined };
        recs.push(handRecord(p, stream, floor, `value ${n}`, 1,
          (v) => { r.state = 'resolved'; r.value = v; }, (e) => { r.state = 'rejected'; r.value = e; }));
        results.push(r);
      }
      const ids = recs.map((pd) => pd.msgId);
      const at = [];
      for (const pd of recs.slice(0, 2)) at.push(await publish(`value ${at.length + 1}`, pd.hdr)); // the server stored the first two

      s = handSink(p, epoch, floor, 'b1', recs);
      s.subject = silentSubject;
      s.b.commit = 4;
      s.b.anomaly = 'no reply within 300ms';

      const start = Date.now();
      const got = await settleWithin(s, 15_000);
      sub.unsubscribe();
      assert.notEqual(got, 'timeout', `settle did not finish within 15 s after ${eobs} unanswered EOBs: a batch the server never answers must be read back, not closed forever`);
      assert.equal(got, null, `settle says the partition was fenced (${JSON.stringify(got)})`);
      assert.ok(eobs > 0, 'settle read back without closing the batch first');
      assert.ok(eobs <= SPEC_SILENT_EOBS, `${eobs} EOBs sent before reading back; the spec allows ${SPEC_SILENT_EOBS}`);
      assert.deepEqual(results.map((r) => r.state), ['resolved', 'resolved', 'pending'], 'want the 2 stored records acknowledged and the third not');
      assert.equal(results[1].value.seq, at[1], `record 2 stored at ${at[1]} acknowledged at ${results[1].value.seq}`);
      const queue = s.queue.slice(s.qi);
      assert.equal(queue.length, 1, `to re-send: ${queue.length} records; want only the third`);
      assert.equal(queue[0], recs[2], 'the record to re-send is not the third');
      assert.equal(queue[0].msgId, ids[2], 'the third record is re-sent under a new id; it must keep its old one');
      p.log?.(`settled after ${eobs} unanswered EOBs in ${Date.now() - start} ms`);
    } finally {
      s?.abort(new Error('test over'));
      await p.close();
    }
  });

  // A record re-sent alone (its first send was stored, but its answer lost) is a one-record batch
  // the server deduplicates. Its flow ack counts the duplicate as persisted, so the sink
  // acknowledges the record then; the batch's PubAck that follows says "duplicate"
  // (spec/protocol.md §5.1.1), which is an anomaly, and settling it must not acknowledge the record
  // a second time, nor mark the record the flow ack acknowledged as not stored: the PubAck adds
  // nothing, and settle reads nothing from the stream for it. The partition stream holds the record
  // at the sequence the PubAck names. As the Go producer's
  // TestDuplicatePubAckAfterAFlowAckFinishesOnce (internal/produce/dupack_test.go).
  test('a duplicate PubAck after the flow ack finishes the record once', async () => {
    const { p, epoch, stream, subject } = await settling('dupack', 'dupack-p');
    let s;
    let sub;
    try {
      const floor = (await streamInfo(prod.nc, stream)).state.last_seq;
      const calls = [];
      const pd = handRecord(p, stream, floor, 'value 1', 2, (v) => { calls.push({ resolved: v }); }, (e) => { calls.push({ rejected: e }); });
      const at = await publisher(prod.nc, subject)('value 1', pd.hdr); // the first send, stored
      // Every read of the partition stream's messages (a real subscriber beside the server's).
      let gets = 0;
      sub = admin.nc.subscribe(`$JS.API.STREAM.MSG.GET.${stream}`, { callback: () => { gets++; } });
      await admin.nc.flush();

      s = handSink(p, epoch, floor, 'b2', [pd]);
      s.ackUpTo(1); // the re-send's flow ack: the duplicate counts as persisted
      assert.equal(calls.length, 1, `the flow ack finished ${calls.length} records; want 1`);
      s.b.pubAck = { kind: KIND.pubAck, stream, streamSeq: at, ackBatch: 'b2', count: 1, duplicate: true };
      s.b.anomaly = 'PubAck of 1 records (batch "b2", duplicate true)';

      const got = await settleWithin(s, 20_000);
      await admin.nc.flush();
      assert.notEqual(got, 'timeout', 'settle did not finish within 20 s');
      assert.equal(got, null, `settle says the partition was fenced (${JSON.stringify(got)})`);
      assert.equal(calls.length, 1, `the record's callback ran ${calls.length} times: a duplicate PubAck after the flow ack acknowledged it again`);
      assert.ok(calls[0].resolved, `the record failed: ${calls[0].rejected}`);
      assert.equal(p.unsettled, 0, `${p.unsettled} records unsettled; want 0`);
      assert.equal(pd.failed, null, `the record the flow ack acknowledged is marked failed: ${pd.failed?.message}`);
      assert.equal(gets, 0, `settle read ${gets} messages of the stream for a PubAck that adds nothing`);
      const queue = s.queue.slice(s.qi);
      assert.equal(queue.length, 0, `${queue.length} records to send again; want none`);
    } finally {
      sub?.unsubscribe();
      s?.abort(new Error('test over'));
      await p.close();
    }
  });
});
