"""A batch whose EOB is never answered (spec/protocol.md §5.1.2, settle 1): settling a batch that got
no reply, the sink closes it with an EOB, and nats-server 2.15.2 may never answer that EOB. A fast
batch whose commit waits for proposals a stream's replica or placement change dropped stays
"committing" on the server for good and every later message of it is skipped without a reply,
while the stream takes new batches. After 3 unanswered EOBs the sink must read the partition back
rather than close the batch forever. Here the stream is a real broker's partition stream holding
the batch's first 2 of 3 records, and the sink's EOB subject has a real subscriber that never
answers, standing for the server's committing batch: settle must finish, acknowledge the 2 records
and queue the third to be sent again under its old id. As the Go producer's
TestSettleReadsBackWhenTheEOBIsNeverAnswered (internal/produce/silenteob_test.go)."""

from __future__ import annotations

import asyncio
import json
import time

import nats

import pctl
import pctl.producer as producer_mod

SPEC_SILENT_EOBS = 3  # the spec's bound (§5.1.2, settle 1): the read-back comes after 3 unanswered EOBs


def test_settle_reads_back_when_the_eob_is_never_answered(broker):
    topic = broker.create_topic(1)
    stream = f"PCTL_{topic}_0"

    async def main():
        nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
        admin = await nats.connect(broker.url, nkeys_seed=broker.admin)
        try:
            async with await pctl.connect(broker.url, broker.producer) as c:
                p = await c.producer(topic, producer_id=f"{topic}-p")
                c.ack_timeout = 0.3
                epoch = p._desc.raw["epochs"][-1]["epoch"]
                subject = f"pctl.data.{topic}.{epoch}.0"

                async def publish(data: bytes, headers=None) -> int:
                    r = json.loads((await nc.request(subject, data, timeout=5, headers=headers)).data)
                    assert "error" not in r and r.get("seq", 0) > 0, f"publish to {subject}: {r}"
                    return r["seq"]

                # The EOB subject: a real subscriber takes every EOB and answers none.
                silent = f"pctl.data.{topic}.silent.0"
                eobs = []

                async def take(m):
                    eobs.append(m)

                sub = await admin.subscribe(silent, cb=take)
                await admin.flush()

                floor = await publish(b"someone else's")
                # Records with the identity send gives them, held (as while a repartition switches
                # epochs): made, not sent; close fails what is left.
                p._switching = True
                futs, recs = [], []
                for n in range(1, 4):
                    futs.append(await p.send(b"k%d" % n, b"value %d" % n))
                    pd = p._held[-1]
                    pd.floors[stream] = floor
                    pd.sends = 1
                    recs.append(pd)
                ids = [pd.msg_id for pd in recs]
                at = [await publish(pd.value, dict(pd.hdrs)) for pd in recs[:2]]  # the server stored the first two

                s = producer_mod._Sink(p, epoch, 0)
                s.task.cancel()  # not started: only its settle runs here
                s.subject = silent
                s.floor, s.floor_known = floor, True
                b = producer_mod._Batch(time.monotonic())
                b.recs.extend(recs)
                b.commit, b.anomaly = 4, "no reply within 300ms"
                s.b = b
                p._batches[b.id] = s

                start = time.monotonic()
                try:
                    fenced = await asyncio.wait_for(s._settle(None), 15)
                except asyncio.TimeoutError:
                    raise AssertionError(f"settle did not finish within 15 s after {len(eobs)} unanswered EOBs: a batch the "
                                         "server never answers must be read back, not closed forever") from None
                await sub.unsubscribe()
                assert fenced is None, f"settle says the partition was fenced ({fenced})"
                assert eobs, "settle read back without closing the batch first"
                assert len(eobs) <= SPEC_SILENT_EOBS, f"{len(eobs)} EOBs sent before reading back; the spec allows {SPEC_SILENT_EOBS}"
                states = [f.done() and f.exception() is None for f in futs]
                assert states == [True, True, False], f"acknowledged: {states}; want the 2 stored records and not the third"
                assert futs[1].result().seq == at[1], f"record 2 stored at {at[1]} acknowledged at {futs[1].result().seq}"
                assert list(s.queue) == [recs[2]], f"to re-send: {len(s.queue)} records; want only the third"
                assert s.queue[0].msg_id == ids[2], "the third record is re-sent under a new id; it must keep its old one"
                print(f"settled after {len(eobs)} unanswered EOBs in {time.monotonic() - start:.2f}s")
                s.queue.clear()
                await p.close(1)  # the third record fails as unacknowledged
        finally:
            await nc.close()
            await admin.close()

    asyncio.run(main())
