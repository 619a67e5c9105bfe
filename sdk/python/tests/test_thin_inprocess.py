"""A record whose Nats-Msg-Id is stuck "in process" (spec/protocol.md §5.1.5) is answered by the
produce service with code ``unavailable`` and the detail ``{"in_process": true, "partition",
"epoch", "msg_id"}`` (§3), as an error reply or as a record's ``error`` in a batched reply (§5.2). A
thin client MUST NOT re-send it under the same identity and fails it with its in-process error
(§5.2 step 5): here the SDK's request path (``Client.request``, what a thin client written on the
SDK sends produce requests with) and ``error_from_code`` (what decodes a batched result's error)
must give a ``pctl.MsgIdInProcess``. The replies come from a peer implementation of the produce
service's wire on a real broker's NATS: a responder on the produce subject of a broker id of its
own (``pctl.produce.<topic>.<B>``, which only broker B serves) sending the spec's reply bytes,
written here by hand. Mutant shown failing: ``error_from_code`` ignoring the detail (a plain
``Unavailable``, which a thin client retries)."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

import pctl

DETAIL = {"in_process": True, "partition": 2, "epoch": 1, "msg_id": "p-7-00112233445566778899aabbccddeeff"}
ERROR = {"code": "unavailable",
         "message": "record 7 (id p-7-00112233445566778899aabbccddeeff) refused 4 times by partition 2 as 'in process' (10158)",
         "detail": DETAIL}
SUBJECT = "pctl.produce.t.PEER1"


def check_stuck(e, what):
    assert isinstance(e, pctl.MsgIdInProcess), f"{what}: {type(e).__name__} {e}: want pctl.MsgIdInProcess (§5.2 step 5)"
    assert isinstance(e, pctl.Unavailable)
    assert e.code == "unavailable"
    assert (e.partition, e.msg_id) == (2, DETAIL["msg_id"])
    assert e.detail == DETAIL
    assert "read partition 2" in str(e) and "before producing it again" in str(e), str(e)


def test_stuck_record_from_the_produce_service(broker):
    async def main():
        peer = await nats.connect(broker.url, nkeys_seed=broker.admin)

        async def answer(m):
            if (m.headers or {}).get("Pctl-Batch"):
                body = {"results": [{"partition": 2, "epoch": 1, "seq": 5, "duplicate": False}, {"error": ERROR},
                                    {"partition": 2, "epoch": 1, "seq": 6, "duplicate": False}], "broker": "PEER1"}
                hdrs = {"Pctl-Broker": "PEER1"}
            else:
                body, hdrs = ERROR, {"Pctl-Broker": "PEER1", "Pctl-Error": "unavailable"}
            await peer.publish(m.reply, json.dumps(body).encode(), headers=hdrs)

        await peer.subscribe(SUBJECT, cb=answer)
        await peer.flush()
        try:
            async with await pctl.connect(broker.url, broker.producer) as c:
                # A single request's error reply.
                with pytest.raises(pctl.PctlError) as ei:
                    await c.request(SUBJECT, b"v")
                check_stuck(ei.value, "error reply")
                # A batched request: record 2 of 3 is stuck.
                m = await c.nc.request(SUBJECT, b"body", timeout=10, headers={"Pctl-Batch": "3", "Pctl-Producer": "p"})
                rep = json.loads(m.data)
                errs = [pctl.error_from_code(r["error"]["code"], r["error"]["message"], r["error"].get("detail"))
                        if "error" in r else None for r in rep["results"]]
                assert errs[0] is None and errs[2] is None
                check_stuck(errs[1], "batched result")
        finally:
            await peer.close()

    asyncio.run(main())


def test_unavailable_without_the_detail_stays_retryable():
    e = pctl.error_from_code("unavailable", "no stream", {"in_process": False})
    assert type(e) is pctl.Unavailable
