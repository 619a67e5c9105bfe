"""Offline partitioning: pctl.Partitioner against the reference vectors, its errors, and the
native kafka-murmur2 of bench.py against the same vectors."""

import importlib.util
import json

import pytest

import pctl
from conftest import BUILTIN, ROOT, SDK, VECTORS

MURMUR = BUILTIN / "kafka-murmur2.wasm"
HOSTILE = ROOT / "runtime" / "testdata" / "hostile"
CASES = json.loads((VECTORS / "kafka-murmur2.json").read_text())["cases"]


def _bench():
    spec = importlib.util.spec_from_file_location("pctl_bench", SDK / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def murmur():
    return pctl.Partitioner.load(MURMUR)


def test_kafka_murmur2_vectors_one_key_at_a_time(murmur):
    # Source of the vectors: Kafka's Java client (spec/vectors/kafka-murmur2.json names it). A
    # failure here means keys land in other partitions than Kafka puts them.
    for c in CASES:
        assert murmur.partition(bytes.fromhex(c["key_hex"]), c["n"]) == c["partition"], c


def test_kafka_murmur2_vectors_batched(murmur):
    by_n = {}
    for c in CASES:
        by_n.setdefault(c["n"], []).append(c)
    for n, cases in by_n.items():
        got = murmur.partition_many([bytes.fromhex(c["key_hex"]) for c in cases], n)
        assert got == [c["partition"] for c in cases], n


def test_native_kafka_murmur2_matches_the_vectors():
    native = _bench().kafka_murmur2
    for c in CASES:
        assert native(bytes.fromhex(c["key_hex"]), c["n"]) == c["partition"], c


def test_metadata_and_identity(murmur):
    assert murmur.name == "kafka-murmur2"
    assert len(murmur.digest) == 64
    assert murmur.profile == "portable"
    assert "kafka-murmur2" in repr(murmur)


def test_str_keys_are_utf8_and_the_empty_key_is_a_key(murmur):
    assert murmur.partition("héllo", 1000) == murmur.partition("héllo".encode(), 1000)
    empty = [c for c in CASES if c["key_hex"] == "" and c["n"] == 1000][0]
    assert murmur.partition(b"", 1000) == empty["partition"]


def test_load_from_bytes_equals_load_from_path(murmur):
    p = pctl.Partitioner(MURMUR.read_bytes())
    assert p.digest == murmur.digest
    assert p.partition_many([b"a", b"b", b"c"], 7) == murmur.partition_many([b"a", b"b", b"c"], 7)


@pytest.mark.parametrize("key,n,words", [
    (b"x" * 65537, 8, "key too long"),
    (b"k", 0, "invalid partition count"),
    (b"k", 2**31, "invalid partition count"),
    (b"k", True, "invalid partition count"),
])
def test_bad_arguments_are_bad_requests(murmur, key, n, words):
    with pytest.raises(pctl.BadRequest, match=words) as e:
        murmur.partition(key, n)
    assert e.value.code == "bad_request"
    assert isinstance(e.value, ValueError)


def test_a_key_of_exactly_64_kib_is_fine(murmur):
    assert 0 <= murmur.partition(b"k" * 65536, 8) < 8


def test_refused_module_names_the_file():
    with pytest.raises(pctl.PluginFailed, match="not a WebAssembly module") as e:
        pctl.Partitioner.load(HOSTILE / "not-wasm.wasm")
    assert "not-wasm.wasm" in str(e.value)
    assert e.value.code == "plugin_failed"


def test_missing_file_is_a_bad_request():
    with pytest.raises(pctl.BadRequest, match="read plugin"):
        pctl.Partitioner.load(ROOT / "no-such.wasm")


def test_a_failing_call_names_the_plugin_and_the_next_call_gets_a_fresh_instance():
    p = pctl.Partitioner.load(HOSTILE / "loop-forever.wasm")
    for _ in range(2):  # the second call runs on a new instance (abi-v1.md §3) and fails the same way
        with pytest.raises(pctl.PluginFailed, match="time limit exceeded") as e:
            p.partition(b"k", 8)
        assert "sha256:" in str(e.value) and e.value.digest == p.digest


def test_out_of_range_is_never_a_partition():
    p = pctl.Partitioner.load(HOSTILE / "out-of-range.wasm")
    with pytest.raises(pctl.PluginFailed, match="out of range"):
        p.partition(b"k", 8)
    with pytest.raises(pctl.PluginFailed, match="out of range"):
        p.partition_many([b"a", b"b"], 8)


def test_config_reaches_the_module():
    echo = HOSTILE / "config-echo.wasm"
    p = pctl.Partitioner.load(echo, config={"a": "1"})
    assert p.config == b"a=1\n"
    assert p.partition(b"", 10) == 4  # (key_len + config_len) % n: the config's 4 bytes arrived
    assert pctl.Partitioner.load(echo, config=["b=2", "a=1"]).config == b"a=1\nb=2\n"
    with pytest.raises(pctl.PluginFailed, match="rejected its configuration"):
        pctl.Partitioner.load(echo, config=b"!")
    with pytest.raises(pctl.PluginFailed, match="takes no configuration"):
        pctl.Partitioner.load(MURMUR, config={"seed": "1"})
    with pytest.raises(pctl.BadRequest, match="bad partitioner config"):
        pctl.Partitioner.load(MURMUR, config={"a b": "1"})


def test_thread_safety(murmur):
    import threading
    keys = [f"key-{i}".encode() for i in range(2000)]
    want = murmur.partition_many(keys, 97)
    errors = []

    def work():
        for k, w in zip(keys, want):
            if murmur.partition(k, 97) != w:
                errors.append(k)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
