"""The cross-language consume command prints, byte for byte, what `pctl consume --format jsonl
--timestamps` prints (the Go command is the reference, run on the same records), and misplaced
records (spec/protocol.md §6.8: published around the partitioner) are stopped at, delivered
flagged or skipped, by the SDK and by the command."""

from __future__ import annotations

import asyncio
import json
import subprocess

import nats
import pytest

import pctl
from conftest import SDK
from groups import placements, produce


def run(coro):
    return asyncio.run(coro)


def py_consume(broker, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(SDK / "consume"), "--server", broker.url, "--creds", broker.consumer, *args],
                          capture_output=True, timeout=timeout)


def strip_ts(line: bytes) -> bytes:
    d = json.loads(line)
    assert isinstance(d.pop("ts"), int)
    # Re-encoding would change the escaping; cut the field out of the original bytes instead.
    i = line.index(b',"ts":')
    j = i + len(b',"ts":') + len(str(json.loads(line)["ts"]))
    return line[:i] + line[j:]


TRICKY = [b"plain", "<&>".encode(), "a\u2028b\u2029".encode(), b"\xff\xfe", b"", "tab\there\nnl\r\x01\x7f".encode(),
          "é€😀".encode(), b"\\\"quote", b"-", b"hex:41"]


def publish_misplaced(broker, topic: str, n: int) -> bytes:
    """Publishes, around the partitioner, a record whose key belongs to partition 1 into partition
    0 of a 2-partition topic, and one whose Pctl-Key header is not base64. Returns the key."""
    keys = [f"m{i}".encode() for i in range(50)]
    want = placements(broker, keys, "kafka-murmur2", n)
    key = next(k for k in keys if want[k] == 1)

    async def go():
        nc = await nats.connect(broker.url, nkeys_seed=broker.admin)
        js = nc.jetstream()
        import base64
        await js.publish(f"pctl.data.{topic}.1.0", b"wrong-place", headers={"Pctl-Key": "b64:" + base64.b64encode(key).decode(),
                                                                              "Pctl-Producer": "rogue", "Pctl-Seq": "1"})
        await js.publish(f"pctl.data.{topic}.1.0", b"bad-key", headers={"Pctl-Key": "not base64", "Pctl-Producer": "rogue",
                                                                         "Pctl-Seq": "2"})
        await nc.close()
    run(go())
    return key


def test_consume_prints_exactly_what_pctl_consume_prints(broker):
    topic = broker.create_topic(2)
    recs = [(k, v) for k in TRICKY for v in TRICKY[:4]] + [(None, b"keyless <&>"), (None, b"\x00\x01")]
    run(produce(broker, topic, recs, producer_id="jsonl-1"))
    publish_misplaced(broker, topic, 2)
    total = len(recs) + 2
    go = broker.pctl("consume", topic, "--group", "go-jsonl", "--from-beginning", "--format", "jsonl", "--timestamps",
                     "--max", str(total), "--idle-exit", "10s", "--misplaced", "deliver", creds=broker.consumer)
    py = py_consume(broker, "--topic", topic, "--group", "py-jsonl", "--from-beginning", "--max", str(total), "--idle-exit", "10s",
                    "--misplaced", "deliver")
    assert py.returncode == 0, py.stderr.decode()
    go_lines = go.stdout.encode().splitlines()
    py_lines = py.stdout.splitlines()
    assert len(go_lines) == len(py_lines) == total

    def key(line: bytes):
        d = json.loads(line)
        return d["partition"], d["seq"]

    assert sorted(map(strip_ts, go_lines), key=key) == sorted(map(strip_ts, py_lines), key=key), "byte for byte, but for the delivery time"
    flagged = [json.loads(x) for x in py_lines if b'"misplaced":true' in x]
    assert sorted(d["value"] for d in flagged) == ["bad-key", "wrong-place"]
    assert b"misplaced record" in py.stderr


@pytest.mark.parametrize("policy", ["stop", "deliver", "skip"])
def test_misplaced_records_by_policy(broker, policy):
    topic = broker.create_topic(2)
    keys = [f"x{i}".encode() for i in range(40)]
    want = placements(broker, keys, "kafka-murmur2", 2)
    k0 = [k for k in keys if want[k] == 0]
    run(produce(broker, topic, [(k, b"before") for k in k0[:5]]))
    rogue = publish_misplaced(broker, topic, 2)
    run(produce(broker, topic, [(k, b"after") for k in k0[:5]]))
    seen: list = []

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            cn = await c.consumer(topic, f"mis-{policy}", from_beginning=True, misplaced=policy, on_misplaced=seen.append)
            got, err = [], None
            try:
                while True:
                    r = await cn.next(timeout=3)
                    if r is None:
                        break
                    got.append(r)
            except pctl.MisplacedRecord as e:
                err = e
            st = cn.stats
            await cn.close()
            return got, err, st

    got, err, st = run(go())
    values = [r.value for r in got if r.partition == 0]
    assert st.misplaced >= 1 and seen and seen[0].misplaced.expected == 1
    if policy == "stop":
        assert values == [b"before"] * 5, "everything before the misplaced record, nothing after it"
        assert err is not None and err.partition == 0 and err.misplacement.expected == 1 and err.key == rogue
        assert "deliver" in str(err) and "partition 0" in str(err)
    elif policy == "deliver":
        assert values == [b"before"] * 5 + [b"wrong-place", b"bad-key"] + [b"after"] * 5
        flagged = [r for r in got if r.misplaced is not None]
        assert [r.misplaced.expected for r in flagged] == [1, -1]
        assert "not b64" in flagged[1].misplaced.reason and flagged[1].key is None
    else:
        assert values == [b"before"] * 5 + [b"after"] * 5
        assert err is None


def test_consume_command_arguments_and_max(broker):
    topic = broker.create_topic(1)
    run(produce(broker, topic, [(b"k", f"{i}".encode()) for i in range(30)]))
    p = py_consume(broker, "--topic", topic, "--group", "g", "--idle-exit", "nope")
    assert p.returncode == 2 and b"invalid duration" in p.stderr
    p = py_consume(broker, "--topic", topic, "--group", "bad.group", "--idle-exit", "1s")
    assert p.returncode == 2 and b"consumer group" in p.stderr
    p = py_consume(broker, "--topic", "no-such-topic", "--group", "g", "--idle-exit", "1s")
    assert p.returncode == 2 and b"no-such-topic" in p.stderr
    first = py_consume(broker, "--topic", topic, "--group", "max", "--from-beginning", "--max", "12", "--idle-exit", "10s")
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 12
    rest = py_consume(broker, "--topic", topic, "--group", "max", "--idle-exit", "2s")
    values = [json.loads(x)["value"] for x in first.stdout.splitlines() + rest.stdout.splitlines()]
    assert values == [f"{i}" for i in range(30)], "the next member goes on after exactly what was printed"
