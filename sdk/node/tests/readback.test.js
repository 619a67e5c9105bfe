// The read-back's end (spec/protocol.md §5.1.2, "the read-back's end"): a batch read back after a
// leader change (confirm) gives every record it does not find a new deduplication id, so a stored
// record the read misses is stored a second time. The read must not end at the stream info's last
// sequence: while a stream has no leader, nats-server answers STREAM.INFO from every member with
// its own state, and a member that lags names a last sequence below records already stored. Here
// the read (Sink.readBack) is given such a last sequence against a real broker, whose
// STREAM.MSG.GET answers stand for the leader's: the record stored above it must be found. The
// same when the stream's last message is gone (the leader names no last message: the read goes on
// with next_by_subj), and a record that is not stored must not be found. As the Go producer's
// TestReadBackReachesTheLeadersEnd (internal/produce/holepath_test.go).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../src/index.js';
import { Sink } from '../src/sink.js';
import { leaderLast } from '../src/fastbatch.js';
import { jsRequest, streamInfo } from '../src/jsapi.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

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

describe('the read-back after a leader change', { skip, timeout: 180_000 }, () => {
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

  cases.forEach((tc, n) => {
    test(`reaches the stream leader's end: ${tc.name}`, async () => {
      const topic = `rb${n}`;
      await broker.admin(['topic', 'create', topic, '--partitions', '1', '--partitioner', 'kafka-murmur2']);
      const p = await prod.producer(topic, { id: `rb${n}-p` });
      try {
        const epoch = p.desc.epochs[p.desc.epochs.length - 1].epoch;
        const stream = `PCTL_${topic}_0`;
        const subject = `pctl.data.${topic}.${epoch}.0`;
        const publish = async (data, headers) => {
          const m = await prod.nc.request(subject, Buffer.from(data), { timeout: 5000, headers });
          const r = JSON.parse(Buffer.from(m.data).toString());
          assert.ok(!r.error && r.seq > 0, `publish to ${subject}: ${JSON.stringify(r)}`);
          return r.seq;
        };
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
});
