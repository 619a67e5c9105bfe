// A batch whose EOB is never answered (spec/protocol.md §5.1.2, settle 1): settling a batch that
// got no reply, the sink closes it with an EOB, and nats-server 2.15.2 may never answer that EOB.
// A fast batch whose commit waits for proposals a stream's replica or placement change dropped
// stays "committing" on the server for good and every later message of it is skipped without a
// reply, while the stream takes new batches. After 3 unanswered EOBs the sink must read the
// partition back rather than close the batch forever. Here the stream is a real broker's partition
// stream holding the batch's first 2 of 3 records, and the sink's EOB subject has a real
// subscriber that never answers, standing for the server's committing batch: settle must finish,
// acknowledge the 2 records and queue the third to be sent again under its old id. As the Go
// producer's TestSettleReadsBackWhenTheEOBIsNeverAnswered (internal/produce/silenteob_test.go).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../src/index.js';
import { Sink } from '../src/sink.js';
import { streamInfo } from '../src/jsapi.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

// The spec's bound (§5.1.2, settle 1): the read-back comes after 3 unanswered EOBs.
const SPEC_SILENT_EOBS = 3;

describe('settling a batch whose EOB is never answered', { skip, timeout: 120_000 }, () => {
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

  test('reads the partition back after unanswered EOBs', async () => {
    const topic = 'silenteob';
    await broker.admin(['topic', 'create', topic, '--partitions', '1', '--partitioner', 'kafka-murmur2']);
    const p = await prod.producer(topic, { id: 'silent-p' });
    let s;
    try {
      p.ackTimeout = 300;
      const epoch = p.desc.epochs[p.desc.epochs.length - 1].epoch;
      const stream = `PCTL_${topic}_0`;
      const subject = `pctl.data.${topic}.${epoch}.0`;
      const publish = async (data, headers) => {
        const m = await prod.nc.request(subject, Buffer.from(data), { timeout: 5000, headers });
        const r = JSON.parse(Buffer.from(m.data).toString());
        assert.ok(!r.error && r.seq > 0, `publish to ${subject}: ${JSON.stringify(r)}`);
        return r.seq;
      };
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
        p.seq += 1;
        const pd = p.pending(p.seq, null, new Uint8Array(Buffer.from(`value ${n}`)), null, null);
        pd.floors = new Map([[stream, floor]]);
        pd.sends = 1;
        p.headersOf(pd);
        const r = { state: 'pending', value: undefined };
        pd.resolve = (v) => { r.state = 'resolved'; r.value = v; };
        pd.reject = (e) => { r.state = 'rejected'; r.value = e; };
        p.unsettled++;
        recs.push(pd);
        results.push(r);
      }
      const ids = recs.map((pd) => pd.msgId);
      const at = [];
      for (const pd of recs.slice(0, 2)) at.push(await publish(`value ${at.length + 1}`, pd.hdr)); // the server stored the first two

      s = new Sink(p, epoch, 0);
      s.subject = silentSubject;
      s.floor = floor;
      s.floorKnown = true;
      s.b = {
        id: 'b1', recs, keys: null, acked: 0, flowed: 0, commit: 4, anomaly: 'no reply within 300ms', ended: false,
        unknown: false, never: false, noResp: false, pubAck: null, progress: Date.now(), checked: Date.now(), transient: false, confirming: false,
      };
      p.batches.set('b1', s);

      const start = Date.now();
      let timer;
      const bound = new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), 15_000); });
      const got = await Promise.race([s.settle(null), bound]);
      clearTimeout(timer);
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
});
