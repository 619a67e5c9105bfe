// A tombstone re-sent into a later epoch carries the Nats-TTL of the descriptor it is re-sent
// under (spec/protocol.md §10.2), not the one it was first sent with. Unit level against a real
// broker: the tombstone's headers are made under the topic's own descriptor (delete retention
// 60 s), then the record is placed again, as a repartition places a record handed back by a fenced
// partition, under a descriptor that holds tombstones (a backfill running: H = 100 years); the
// stored tombstone must carry H. The fence itself (a tombstone unacknowledged at it) is arranged
// only by the Go client's TestTombstoneResentIntoNewEpochIsHeld; the conformance suite's compacted
// row checks the TTL of every tombstone acknowledged while a backfill is held, but does not force
// a re-send. Before the fix the producer kept the first headers and stored Nats-TTL 60.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../src/index.js';
import { directGet } from '../src/jsapi.js';
import { keyToken } from '../src/compact.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

describe('a tombstone re-sent into a later epoch', { skip, timeout: 120_000 }, () => {
  let broker;
  let prod;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    prod = await connect({ server: broker.url, creds: broker.creds.producer });
  });

  after(async () => {
    await prod?.close();
    await broker?.stop();
  });

  test('gets the Nats-TTL of the descriptor it is re-sent under', async () => {
    await broker.admin(['topic', 'create', 'trs', '--partitions', '1', '--partitioner', 'kafka-murmur2', '--compact', '--delete-retention', '60s']);
    const p = await prod.producer('trs', { id: 'trs-p' });
    const key = Buffer.from('k');
    await p.send({ key, value: 'old' });

    // The tombstone's first headers, under the topic's descriptor (D = 60 s).
    p.seq += 1;
    const pd = p.pending(p.seq, new Uint8Array(key), new Uint8Array(0), null, null);
    pd.tombstone = true;
    const first = p.headersOf(pd);
    assert.equal(first.get('Nats-TTL'), '60');
    const id = first.get('Nats-Msg-Id');

    // Placed again under a descriptor that holds tombstones (spec §10.2: H = 3,153,600,000,000 ms).
    p.desc = { ...p.desc, compact: { delete_retention_ms: 3_153_600_000_000, held_retention_ms: 60_000 } };
    const done = new Promise((resolve, reject) => { pd.resolve = resolve; pd.reject = reject; });
    p.unsettled++;
    p.assignMany([pd]);
    const res = await done;
    assert.equal(res.duplicate, false);

    const subj = `pctl.data.trs.${res.epoch}.${res.partition}.${keyToken(key)}`;
    const m = await directGet(prod.nc, `PCTL_trs_${res.partition}`, null, { lastBySubject: subj, timeout: 5000 });
    assert.ok(m, 'the tombstone is stored');
    assert.equal(m.headers.get('Pctl-Tombstone'), 'true');
    assert.equal(m.headers.get('Nats-Msg-Id'), id, 'the identity stays');
    assert.equal(m.headers.get('Nats-TTL'), '3153600000', 'the TTL of the descriptor the tombstone was re-sent under (the hold), not the 60 s of its first send');
    await p.close();
  });
});
