"""The read-back's end (spec/protocol.md §5.1.2, "the read-back's end"): a batch read back after a
leader change (_confirm) gives every record it does not find a new deduplication id, so a stored
record the read misses is stored a second time. The read must not end at the stream info's last
sequence: while a stream has no leader, nats-server answers STREAM.INFO from every member with its
own state, and a member that lags names a last sequence below records already stored. Here the read
(the sink's _read_back) is given such a last sequence against a real broker, whose STREAM.MSG.GET
answers stand for the leader's: the record stored above it must be found. The same when the
stream's last message is gone (the leader names no last message: the read goes on with
next_by_subj), and a record that is not stored must not be found. As the Go producer's
TestReadBackReachesTheLeadersEnd (internal/produce/holepath_test.go)."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

import pctl
import pctl.producer as producer_mod

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
        nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
        admin = await nats.connect(broker.url, nkeys_seed=broker.admin)
        try:
            async with await pctl.connect(broker.url, broker.producer) as c:
                p = await c.producer(topic, producer_id=f"{topic}-p")
                epoch = p._desc.raw["epochs"][-1]["epoch"]
                subject = f"pctl.data.{topic}.{epoch}.0"

                async def publish(data: bytes, headers=None) -> int:
                    r = json.loads((await nc.request(subject, data, timeout=5, headers=headers)).data)
                    assert "error" not in r and r.get("seq", 0) > 0, f"publish to {subject}: {r}"
                    return r["seq"]

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
        finally:
            await nc.close()
            await admin.close()

    asyncio.run(main())
