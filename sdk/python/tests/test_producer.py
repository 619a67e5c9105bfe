"""The producer against a real broker (`pctl serve`, built from this checkout): where records
land (as `pctl partition` says), their headers (spec/protocol.md §5.1), per-key order, an epoch
change in the middle of a run, ambiguous acknowledgements, and the errors a caller sees."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess

import nats
import pytest

import pctl
from conftest import SDK


def consume(broker, topic: str, expect: int, group: str = "check", idle: str = "15s") -> list:
    """The topic's records, as `pctl consume --format jsonl` prints them, in delivery order: stops
    after `expect` records (a loaded machine can pause longer than any short idle time), or
    after 15 s without one."""
    p = broker.pctl("consume", topic, "--group", group, "--from-beginning", "--format", "jsonl", "--max", str(expect),
                    "--idle-exit", idle, creds=broker.consumer, timeout=180)
    return [json.loads(line) for line in p.stdout.splitlines() if line]


def expected(broker, keys: list, n: int) -> dict:
    """`pctl partition` of each key (hex, so any bytes)."""
    p = broker.pctl("partition", "--plugin", "kafka-murmur2", "--partitions", str(n), "--hex",
                    stdin="".join(k.hex() + "\n" for k in keys), remote=False)
    return dict(zip(keys, map(int, p.stdout.split())))


def run(coro):
    return asyncio.run(coro)


async def _produce(broker, topic, records, creds=None, **opts):
    """Sends (key, value) records in order; returns the producer's resent count and, per record,
    its RecordMetadata or exception."""
    async with await pctl.connect(broker.url, creds or broker.producer, ack_timeout=opts.pop("ack_timeout", 5.0)) as c:
        p = await c.producer(topic, **opts)
        futs = [await p.send(k, v) for k, v in records]
        res = await asyncio.gather(*futs, return_exceptions=True)
        await p.close()
        return p, res


def test_records_land_where_pctl_partition_says_in_order(broker):
    topic = broker.create_topic(4)
    keys = [f"user-{i}".encode() for i in range(150)] + [b"", "é€😀".encode(), bytes(range(256))]
    records = [(k, f"{r}".encode()) for r in range(3) for k in keys] + [(None, b"keyless-%d" % i) for i in range(8)]
    p, res = run(_produce(broker, topic, records, producer_id="order-1"))
    assert all(isinstance(r, pctl.RecordMetadata) for r in res), [r for r in res if not isinstance(r, pctl.RecordMetadata)][:3]
    want = expected(broker, keys, 4)
    for (k, _), m in zip(records, res):
        assert m.epoch == 1 and not m.duplicate
        if k is not None:
            assert m.partition == want[k], (k, m)
    assert [m.producer_seq for m in res] == list(range(1, len(records) + 1))
    assert sorted({m.partition for (k, _), m in zip(records, res) if k is None}) == [0, 1, 2, 3], "keyless records go round-robin"

    got = consume(broker, topic, len(records))
    assert len(got) == len(records), "every acknowledged record is delivered, once"
    seen: dict = {}
    keyless = 0
    for r in got:
        if "key" not in r and "key_b64" not in r:
            keyless += 1
            continue
        k = r["key"].encode() if "key" in r else base64.b64decode(r["key_b64"])
        assert r["partition"] == want[k], (k, r)
        seen.setdefault(k, []).append(int(r["value"]))
    assert keyless == 8
    assert all(v == [0, 1, 2] for v in seen.values()), "per-key order"
    assert set(seen) == set(keys)


def test_record_headers_follow_the_protocol(broker):
    topic = broker.create_topic(1)

    async def go():
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic, producer_id="hdr-1")
            a = await p.produce(b"k\x00y", b"v1")
            b = await p.produce(b"", b"v2")
            d = await p.produce(None, "v3")
            await p.close()
        nc = await nats.connect(broker.url, nkeys_seed=broker.admin)
        try:
            msgs = []
            for m in (a, b, d):
                r = await nc.request(f"$JS.API.DIRECT.GET.PCTL_{topic}_0", json.dumps({"seq": m.seq}).encode(), timeout=5)
                msgs.append(r)
            return (a, b, d), msgs
        finally:
            await nc.close()

    metas, msgs = run(go())
    assert [m.data for m in msgs] == [b"v1", b"v2", b"v3"]
    h = [m.headers for m in msgs]
    assert h[0]["Pctl-Key"] == "b64:" + base64.b64encode(b"k\x00y").decode()
    assert h[1]["Pctl-Key"] == "b64:", "the empty key is b64: (a key)"
    assert "Pctl-Key" not in h[2], "a keyless record has no Pctl-Key header"
    for i, hh in enumerate(h, 1):
        assert hh["Pctl-Producer"] == "hdr-1"
        assert hh["Pctl-Seq"] == str(i)
        # spec/protocol.md §5.1 step 3: <producer id>-<n>-<32 lowercase hex digits, random per record>
        assert re.fullmatch(rf"hdr-1-{i}-[0-9a-f]{{32}}", hh["Nats-Msg-Id"]), hh["Nats-Msg-Id"]
        assert msgs[i - 1].headers.get("Nats-Subject", f"pctl.data.{topic}.1.0") == f"pctl.data.{topic}.1.0"
    assert len({hh["Nats-Msg-Id"].rsplit("-", 1)[1] for hh in h}) == 3, "every record has its own token"


@pytest.mark.parametrize("ack_timeout,nkeys,rounds", [(5.0, 200, 40), (0.0005, 40, 20)], ids=["acks", "lost-acks"])
def test_epoch_change_mid_run_keeps_per_key_order(broker, ack_timeout, nkeys, rounds):
    # With lost-acks most publishes are ambiguous when the fence comes: the producer looks for
    # them in the fenced partitions up to their boundaries before re-sending (protocol.md §5.1).
    topic = broker.create_topic(2)
    keys = [f"k{i}".encode() for i in range(nkeys)]

    async def go():
        async with await pctl.connect(broker.url, broker.producer, ack_timeout=ack_timeout) as c:
            p = await c.producer(topic, producer_id="epoch-1", max_in_flight=64)
            futs = []
            expand = None
            for r in range(rounds):
                for k in keys:
                    futs.append(await p.send(k, str(r)))
                if r == rounds // 4:
                    expand = await asyncio.create_subprocess_exec(
                        str(broker.bin), "topic", "expand", topic, "--partitions", "5", "--server", broker.url,
                        "--creds", broker.admin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                await asyncio.sleep(0.02)  # keep writing while the epoch changes
            out, err = await expand.communicate()
            assert expand.returncode == 0, err
            res = await asyncio.gather(*futs, return_exceptions=True)
            await p.close()
            return p, res

    p, res = run(go())
    bad = [r for r in res if not isinstance(r, pctl.RecordMetadata)]
    assert not bad, bad[:3]
    epochs = {m.epoch for m in res}
    assert epochs == {1, 2}, f"the run spans the epoch change: {epochs}"
    # With lost acknowledgements every record may be settled as stored before the fence comes
    # (a clean-clone CI run: nothing left to re-send); the order checks below still hold.
    assert ack_timeout < 0.01 or p.resent > 0, "the producer learnt of the new epoch from a fenced publish and re-sent"
    want = {1: expected(broker, keys, 2), 2: expected(broker, keys, 5)}
    for i, m in enumerate(res):
        assert m.partition == want[m.epoch][keys[i % len(keys)]]
    # A key never goes back to the old epoch once one of its records is in the new one.
    by_key: dict = {}
    for i, m in enumerate(res):
        by_key.setdefault(keys[i % len(keys)], []).append(m.epoch)
    assert all(e == sorted(e) for e in by_key.values())

    got = consume(broker, topic, len(res))
    assert len(got) == len(res)
    seen: dict = {}
    for r in got:
        assert r["partition"] == want[r["epoch"]][r["key"].encode()], r
        seen.setdefault(r["key"], []).append(int(r["value"]))
    for k, vs in seen.items():
        assert vs == list(range(rounds)), f"key {k}: per-key order across the epoch change"


def test_lost_acknowledgements_are_retried_without_storing_twice(broker):
    # An ack timeout far below the broker's answer time makes most batches time out: each is
    # settled (closed, its stored prefix learnt) and the rest re-sent with the same Nats-Msg-Ids.
    topic = broker.create_topic(3)
    keys = [f"a{i}".encode() for i in range(50)]
    records = [(k, str(r).encode()) for r in range(6) for k in keys]
    p, res = run(_produce(broker, topic, records, producer_id="amb-1", ack_timeout=0.0005))
    assert all(isinstance(r, pctl.RecordMetadata) for r in res), [r for r in res if not isinstance(r, pctl.RecordMetadata)][:3]
    got = consume(broker, topic, len(records))
    assert len(got) == len(records), "a retry never stores a second copy"
    seen: dict = {}
    for r in got:
        seen.setdefault(r["key"], []).append(int(r["value"]))
    assert all(v == list(range(6)) for v in seen.values())
    assert p.settled > 0, "the timeout did fire: batches were settled (and their rest re-sent, skipped by the server as duplicates)"


def test_unknown_topic_is_not_found(broker):
    async def go():
        async with await pctl.connect(broker.url, broker.producer) as c:
            await c.producer("no-such-topic")

    with pytest.raises(pctl.NotFound) as e:
        run(go())
    assert e.value.code == "not_found"
    assert "no-such-topic" in str(e.value)


def test_consumer_credentials_cannot_produce(broker):
    topic = broker.create_topic(2)

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            p = await c.producer(topic)  # reading the descriptor and the plugin is allowed
            fut = await p.send(b"k", b"v")
            with pytest.raises(pctl.PermissionDenied) as e:
                await asyncio.wait_for(fut, 10)
            with pytest.raises(pctl.PermissionDenied):
                await p.send(b"k2", b"v")
            await p.close()
            return e.value

    e = run(go())
    assert e.code == "permission"
    assert e.subject.startswith(f"pctl.data.{topic}.1.")
    assert e.role == "producer"
    assert "producer" in str(e) and "consumer.nk" in str(e) and e.subject in str(e)


def test_producer_credentials_cannot_use_admin_api(broker):
    async def go():
        async with await pctl.connect(broker.url, broker.producer) as c:
            await c.request("pctl.admin.topic.create", {"topic": "x", "partitions": 1, "partitioner": "kafka-murmur2"})

    with pytest.raises(pctl.PermissionDenied) as e:
        run(go())
    assert e.value.role == "admin" and "admin" in str(e.value)


def test_connection_errors(broker, tmp_path):
    with pytest.raises(pctl.BadRequest, match="No such file"):
        run(pctl.connect(broker.url, str(tmp_path / "missing.nk")))
    garbage = tmp_path / "garbage.nk"
    garbage.write_text("hello\n")
    with pytest.raises(pctl.BadRequest, match="not an NKey user seed"):
        run(pctl.connect(broker.url, str(garbage)))
    bogus = tmp_path / "bogus.nk"  # a valid seed of a user the broker does not know
    bogus.write_text("SUAAVPVYLIAM5EC3IYPTGHKKZLUOIFJPKFZXQIB6LLVW4YYXQ5VNE5P5WM\n")
    with pytest.raises(pctl.PermissionDenied, match="refused the credentials"):
        run(pctl.connect(broker.url, str(bogus), connect_timeout=5))
    with pytest.raises(pctl.Unavailable, match="cannot connect"):
        run(pctl.connect("nats://127.0.0.1:1", broker.producer, connect_timeout=1.5))


def test_a_record_too_large_fails_alone(broker):
    topic = broker.create_topic(1)
    records = [(b"k", b"small-1"), (b"k", b"x" * (2 << 20)), (b"k", b"small-2")]
    p, res = run(_produce(broker, topic, records, producer_id="big-1"))
    assert isinstance(res[0], pctl.RecordMetadata) and isinstance(res[2], pctl.RecordMetadata)
    assert isinstance(res[1], pctl.BadRequest), res[1]
    assert [r["value"] for r in consume(broker, topic, 2)] == ["small-1", "small-2"]


def test_bad_arguments(broker):
    topic = broker.create_topic(1)

    async def go():
        async with await pctl.connect(broker.url, broker.producer) as c:
            with pytest.raises(pctl.BadRequest, match="producer id"):
                await c.producer(topic, producer_id="a.b")
            with pytest.raises(pctl.BadRequest, match="topic name"):
                await c.producer("a b")
            p = await c.producer(topic)
            with pytest.raises(pctl.BadRequest, match="65536"):
                await p.send(b"x" * 65537, b"")
            with pytest.raises(pctl.BadRequest, match="bytes or str"):
                await p.send(42, b"")
            await p.close()
            with pytest.raises(pctl.BadRequest, match="closed"):
                await p.send(b"k", b"")

    run(go())


def test_produce_command(broker):
    topic = broker.create_topic(3)
    lines = "".join(f"key-{i % 7}\tvalue-{i}\n" for i in range(50)) + "no tab here\n" + "\tempty key\r\n" + "last\tline"
    p = subprocess.run([str(SDK / "produce"), "--server", broker.url, "--creds", broker.producer, "--topic", topic,
                        "--producer-id", "cli-1"], input=lines.encode(), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert sorted(o["pseq"] for o in out) == list(range(1, 54))
    # seq: the stream sequence when the producer learnt it (a batch's PubAck names its last record), else 0
    assert all(o["acked"] and o["epoch"] == 1 and o["seq"] >= 0 for o in out)
    assert any(o["seq"] >= 1 for o in out)
    keys = [f"key-{i}".encode() for i in range(7)] + [b"", b"last"]
    want = expected(broker, keys, 3)
    by = {o["pseq"]: o for o in out}
    for i in range(50):
        assert by[i + 1]["partition"] == want[f"key-{i % 7}".encode()]
    assert by[52]["partition"] == want[b""] and by[53]["partition"] == want[b"last"]
    got = {r["value"]: r for r in consume(broker, topic, 53)}
    assert "key" not in got["no tab here"], "a line without a tab is keyless"
    assert got["empty key"]["key"] == "", "a line starting with a tab has the empty key (and \\r\\n is a line end)"
    assert got["line"]["key"] == "last"

    bad = subprocess.run([str(SDK / "produce"), "--server", broker.url, "--creds", broker.producer, "--topic", "nope"],
                         input=b"a\tb\n", capture_output=True, timeout=60)
    assert bad.returncode == 2 and b"nope" in bad.stderr
    denied = subprocess.run([str(SDK / "produce"), "--server", broker.url, "--creds", broker.consumer, "--topic", topic],
                            input=b"a\tb\n", capture_output=True, timeout=60)
    assert denied.returncode == 1
    o = json.loads(denied.stdout.decode().splitlines()[0])
    assert o["pseq"] == 1 and o["acked"] is False and "producer" in o["error"]


def test_a_deleted_and_recreated_topic_stops_the_producer(broker):
    # spec/protocol.md §5.1, known limits: the new topic's subjects would take the old producer's
    # records; the producer watches pctl.events.topic.<topic> and compares the topic id.
    topic = broker.create_topic(2)

    async def go():
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic)
            await p.produce(b"k", b"before")
            for args in (["delete", topic], ["create", topic, "--partitions", "2", "--partitioner", "kafka-murmur2"]):
                admin = await asyncio.create_subprocess_exec(str(broker.bin), "topic", *args, "--server", broker.url,
                                                             "--creds", broker.admin, stdout=subprocess.DEVNULL)
                assert await admin.wait() == 0
            for _ in range(100):
                try:
                    await p.produce(b"k", b"after")
                except pctl.NotFound as e:
                    return e
                await asyncio.sleep(0.05)
            return None

    e = run(go())
    assert e is not None, "the producer went on writing into the re-created topic"
    assert topic in str(e) and ("deleted" in str(e))
    assert consume(broker, topic, 0, idle="2s") == [], "nothing of the old producer reached the new topic"
