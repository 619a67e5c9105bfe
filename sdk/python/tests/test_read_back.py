"""The read-back's end (spec/protocol.md §5.1.2, "the read-back's end"): a batch read back after a
leader change (_confirm) gives every record it does not find a new deduplication id, so a stored
record the read misses is stored a second time. The read must not end at the stream info's last
sequence: while a stream has no leader, nats-server answers STREAM.INFO from every member with its
own state, and a member that lags names a last sequence below records already stored. Here the read
(the sink's _read_back) is given such a last sequence against a real broker, whose STREAM.MSG.GET
answers stand for the leader's: the record stored above it must be found. The same when the
stream's last message is gone (the leader names no last message: the read goes on with
next_by_subj), and a record that is not stored must not be found. As the Go producer's
TestReadBackReachesTheLeadersEnd (internal/produce/holepath_test.go). And settle's read-back after
EOBs that get no answer (test_settle_reads_back_when_the_eob_is_never_answered), and settling a
duplicate PubAck after a flow ack (test_duplicate_pub_ack_after_a_flow_ack_finishes_once)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time

import nats
import pytest

import pctl
import pctl.producer as producer_mod

SPEC_SILENT_EOBS = 3  # the spec's bound (§5.1.2, settle 1): the read-back comes after 3 unanswered EOBs

# before: other messages stored before the record; stored: whether the record is stored (after
# them); after: messages stored after it, deleted when gone; info_last: the last sequence the
# stream info named (a lagging member's), counted from the stream's start.
CASES = [
    pytest.param(3, True, 0, False, 3, id="info-lags-behind-the-record"),
    pytest.param(3, True, 2, True, 3, id="info-lags-last-message-gone"),
    pytest.param(0, True, 0, False, 0, id="empty-stream-info-lags"),
    pytest.param(3, False, 1, True, 3, id="not-stored"),
    pytest.param(3, True, 1, False, 5, id="info-current"),
]


@pytest.mark.parametrize("before,stored,after,gone,info_last", CASES)
def test_read_back_reaches_the_stream_leaders_end(broker, before, stored, after, gone, info_last):
    topic = broker.create_topic(1)
    stream = f"PCTL_{topic}_0"

    async def main():
        async with _connected(broker, topic) as (nc, admin, c, p):
            epoch = p._desc.raw["epochs"][-1]["epoch"]
            subject = f"pctl.data.{topic}.{epoch}.0"

            def publish(data: bytes, headers=None):
                return _publish(nc, subject, data, headers)

            info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
            start = int(info["state"]["last_seq"])
            for i in range(before):
                await publish(b"other %d" % i)
            floor = start + before
            # A record with the identity send gives it, held (as while a repartition
            # switches epochs): made, not sent; close fails it.
            p._switching = True
            fut = await p.send(b"k7", b"value 7")
            pd = p._held[-1]
            pd.floors[stream] = floor
            at = await publish(pd.value, dict(pd.hdrs)) if stored else 0
            afters = [await publish(b"after %d" % i) for i in range(after)]
            if gone:
                for seq in afters:
                    r = await admin.request(f"$JS.API.STREAM.MSG.DELETE.{stream}", json.dumps({"seq": seq, "no_erase": True}).encode(), timeout=5)
                    assert b'"success":true' in r.data, r.data
                # The case this stands for: the leader names no last message, so the read goes on.
                last = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", b'{"last_by_subj":">"}', timeout=5)).data)
                assert (last.get("error") or {}).get("err_code") == 10037, f"the stream leader still names a last message: {last}"

            s = producer_mod._Sink(p, epoch, 0)
            s.task.cancel()  # not started: only its read-back runs here
            s.floor, s.floor_known, s.verify = floor, True, True
            s.b = producer_mod._Batch(0.0)
            s.b.recs.append(pd)
            known = start + info_last
            found, _, _ = await s._read_back(known)
            got = found.get(0)
            if stored:
                assert got is not None, (f"the record stored at {at} was not found by a read whose stream info named last sequence "
                                         f"{known}: _confirm would give it a new id and it would be stored twice")
                assert got == at, f"the record stored at {at} was found at {got}"
            else:
                assert got is None, f"a record that is not stored was found at {got}"
            await p.close(1)  # the held record fails as unacknowledged
            assert isinstance(fut.exception(), pctl.Unavailable), fut.exception()

    asyncio.run(main())


@contextlib.asynccontextmanager
async def _connected(broker, topic: str):
    """Raw NATS connections with the producer's and the admin's credentials, a client and a
    producer of topic (id "<topic>-p"); closed after."""
    nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
    admin = await nats.connect(broker.url, nkeys_seed=broker.admin)
    try:
        async with await pctl.connect(broker.url, broker.producer) as c:
            yield nc, admin, c, await c.producer(topic, producer_id=f"{topic}-p")
    finally:
        await nc.close()
        await admin.close()


async def _publish(nc, subject: str, data: bytes, headers=None) -> int:
    """Publishes to subject (a partition stream's) and returns the stored sequence."""
    r = json.loads((await nc.request(subject, data, timeout=5, headers=headers)).data)
    assert "error" not in r and r.get("seq", 0) > 0, f"publish to {subject}: {r}"
    return r["seq"]


@dataclasses.dataclass
class _Settling:
    """The settle tests' bench (_settling): _connected's raw connections, client and producer of a
    topic of one partition, with a 300 ms ack timeout; the partition's stream and its current
    epoch's subject."""

    nc: object
    admin: object
    c: object
    p: object
    epoch: int
    stream: str
    subject: str

    def publish(self, data: bytes, headers=None):
        """Publishes to the partition's subject and returns the stored sequence."""
        return _publish(self.nc, self.subject, data, headers)

    async def listen(self, subject: str):
        """Every message on subject, taken by a real subscriber of the admin connection that answers
        none: the list of messages and the subscription."""
        got = []

        async def take(m):
            got.append(m)

        sub = await self.admin.subscribe(subject, cb=take)
        await self.admin.flush()
        return got, sub

    def sink(self, floor: int, recs):
        """A sink of the partition, not started (only its settle runs here), whose batch holds recs
        (stored above floor): the sink and the batch."""
        s = producer_mod._Sink(self.p, self.epoch, 0)
        s.task.cancel()
        s.floor, s.floor_known = floor, True
        b = producer_mod._Batch(time.monotonic())
        b.recs.extend(recs)
        s.b = b
        self.p._batches[b.id] = s
        return s, b

    @staticmethod
    async def settle(s, seconds: float, late):
        """Settles s's batch within seconds and returns what settle returns (the fence, or None);
        fails with late() if settle does not finish by then."""
        try:
            return await asyncio.wait_for(s._settle(None), seconds)
        except asyncio.TimeoutError:
            raise AssertionError(late()) from None


@contextlib.asynccontextmanager
async def _settling(broker, topic: str):
    """The settle tests' bench (_Settling) for topic, closed after."""
    async with _connected(broker, topic) as (nc, admin, c, p):
        c.ack_timeout = 0.3
        epoch = p._desc.raw["epochs"][-1]["epoch"]
        yield _Settling(nc, admin, c, p, epoch, f"PCTL_{topic}_0", f"pctl.data.{topic}.{epoch}.0")


def test_settle_reads_back_when_the_eob_is_never_answered(broker):
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
    topic = broker.create_topic(1)

    async def main():
        async with _settling(broker, topic) as t:
            p = t.p
            # The EOB subject: a real subscriber takes every EOB and answers none.
            silent = f"pctl.data.{topic}.silent.0"
            eobs, sub = await t.listen(silent)

            floor = await t.publish(b"someone else's")
            # Records with the identity send gives them, held (as while a repartition switches
            # epochs): made, not sent; close fails what is left.
            p._switching = True
            futs, recs = [], []
            for n in range(1, 4):
                futs.append(await p.send(b"k%d" % n, b"value %d" % n))
                pd = p._held[-1]
                pd.floors[t.stream] = floor
                pd.sends = 1
                recs.append(pd)
            ids = [pd.msg_id for pd in recs]
            at = [await t.publish(pd.value, dict(pd.hdrs)) for pd in recs[:2]]  # the server stored the first two

            s, b = t.sink(floor, recs)
            s.subject = silent
            b.commit, b.anomaly = 4, "no reply within 300ms"

            start = time.monotonic()
            fenced = await t.settle(s, 15, lambda: f"settle did not finish within 15 s after {len(eobs)} unanswered EOBs: a batch "
                                    "the server never answers must be read back, not closed forever")
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

    asyncio.run(main())


def test_duplicate_pub_ack_after_a_flow_ack_finishes_once(broker):
    """A record re-sent alone (its first send was stored, but its answer lost) is a one-record
    batch the server deduplicates. Its flow ack counts the duplicate as persisted, so the sink
    acknowledges the record then; the batch's PubAck that follows says "duplicate"
    (spec/protocol.md §5.1.1), which is an anomaly, and settling it must not acknowledge the record
    a second time: the PubAck adds nothing, and settle reads nothing from the stream for it. The
    partition stream holds the record at the sequence the PubAck names. As the Go producer's
    TestDuplicatePubAckAfterAFlowAckFinishesOnce (internal/produce/dupack_test.go)."""
    topic = broker.create_topic(1)

    async def main():
        async with _settling(broker, topic) as t:
            p, stream = t.p, t.stream
            info = json.loads((await t.nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
            floor = int(info["state"]["last_seq"])
            # A record with the identity send gives it, held (as while a repartition switches
            # epochs): made, not sent.
            p._switching = True
            fut = await p.send(None, b"value 1")
            pd = p._held.pop()
            pd.floors[stream] = floor
            pd.sends = 2
            at = await t.publish(pd.value, dict(pd.hdrs))  # the first send, stored
            # Every read of the partition stream's messages (a real subscriber beside the server's).
            gets, sub = await t.listen(f"$JS.API.STREAM.MSG.GET.{stream}")

            s, b = t.sink(floor, [pd])
            s._ack_up_to(1)  # the re-send's flow ack: the duplicate counts as persisted
            assert fut.done() and fut.exception() is None, "the flow ack did not acknowledge the record"
            acked = fut.result()
            r = producer_mod.fb.Reply(b.id, 1, producer_mod.fb.OP_COMMIT)
            r.kind, r.stream, r.stream_seq, r.ack_batch, r.count, r.duplicate = producer_mod.fb.PUBACK, stream, at, b.id, 1, True
            b.pub_ack, b.anomaly = r, f'PubAck of 1 records (batch "{b.id}", duplicate true)'

            fenced = await t.settle(s, 20, lambda: "settle did not finish within 20 s")
            await t.admin.flush()
            await sub.unsubscribe()
            assert fenced is None, f"settle says the partition was fenced ({fenced})"
            assert fut.result() is acked, f"the record was acknowledged again: {fut.result()} after {acked}"
            assert p._buffered == 0, f"{p._buffered} records buffered; want 0"
            assert pd.failed is None, f"the record the flow ack acknowledged is marked failed: {pd.failed}"
            assert not gets, f"settle read {len(gets)} messages of the stream for a PubAck that adds nothing"
            assert not s.queue, f"{len(s.queue)} records to send again; want none"
            await p.close(1)

    asyncio.run(main())
