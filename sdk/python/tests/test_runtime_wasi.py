"""Unit tests of the deterministic WASI shims (spec/abi-v1.md §6.2)."""

import json
import struct
from pathlib import Path

import pytest

from pctl.runtime.wasi import WASI, WASI_TIME, ProcExit, RandomStream

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "spec" / "vectors" / "wasi-random.json").read_text())


class FakeMem:
    """A flat memory of `size` bytes with the interface the shims use."""

    def __init__(self, size=65536):
        self.b = bytearray(size)

    def size(self):
        return len(self.b)

    def read(self, ptr, n):
        return bytes(self.b[ptr:ptr + n])

    def write(self, ptr, data):
        assert ptr + len(data) <= len(self.b), "a shim wrote outside memory"
        self.b[ptr:ptr + len(data)] = data


def test_random_stream_matches_the_spec_vectors():
    s = RandomStream(VECTORS["state0"])
    assert [s.next_output() for _ in VECTORS["outputs"]] == [int(x, 16) for x in VECTORS["outputs"]]
    assert VECTORS["first_output"] == "0x%016x" % RandomStream().next_output()
    assert RandomStream().read(64).hex() == VECTORS["bytes_hex"]
    assert VECTORS["bytes_hex"].startswith("afcd1d7b39a820e2")


@pytest.mark.parametrize("sizes", [[1, 3, 7, 9, 44], [5] * 4 + [44], [0, 8, 0, 13, 43], [64], [63, 1]])
def test_random_reads_that_end_mid_output_continue_where_they_stopped(sizes):
    s = RandomStream()
    assert b"".join(s.read(n) for n in sizes).hex() == VECTORS["bytes_hex"]


def test_random_get_fills_memory_and_faults_without_consuming():
    w, m = WASI(), FakeMem()
    assert w.random_get(m, 100, 3) == 0
    assert w.random_get(m, 65535, 2) == 21  # crosses the end of memory
    assert w.random_get(m, 103, 61) == 0
    assert m.b[100:164].hex() == VECTORS["bytes_hex"]
    assert w.random_get(m, 65536, 0) == 0  # an empty range at the very end is inside
    assert w.random_get(m, -1, 1) == 21  # pointers are u32


def test_random_seed_changes_the_stream():
    assert RandomStream(1).read(8) != RandomStream().read(8)


def test_clock_time_get():
    w, m = WASI(), FakeMem()
    for cid in range(4):
        assert w.clock_time_get(m, cid, 1000, 8 * cid) == 0
        assert struct.unpack_from("<Q", m.b, 8 * cid)[0] == WASI_TIME == 1704067200000000000
    assert w.clock_time_get(m, 4, 0, 64) == 28
    assert w.clock_time_get(m, -1, 0, 64) == 28
    assert m.b[64] == 0
    assert w.clock_time_get(m, 0, 0, 65530) == 21
    w5 = WASI(time=5)
    assert w5.clock_time_get(m, 0, 0, 0) == 0 and struct.unpack_from("<Q", m.b, 0)[0] == 5


def test_args_and_environ():
    w, m = WASI(), FakeMem()
    m.b[0:8] = b"\xef\xbe\xad\xde" * 2
    assert w.args_sizes_get(m, 0, 4) == 0
    assert m.b[0:8] == bytes(8)
    m.b[8:12] = struct.pack("<I", 7)
    assert w.environ_sizes_get(m, 8, 65534) == 21
    assert struct.unpack_from("<I", m.b, 8)[0] == 7, "a faulting call writes nothing"
    assert w.args_get(m, 0, 0) == 0 and w.environ_get(m, 0, 0) == 0


def test_fd_write():
    w, m = WASI(), FakeMem()
    struct.pack_into("<IIII", m.b, 16, 100, 5, 200, 7)
    for fd in (1, 2):
        struct.pack_into("<I", m.b, 40, 0)
        assert w.fd_write(m, fd, 16, 2, 40) == 0
        assert struct.unpack_from("<I", m.b, 40)[0] == 12
    assert w.fd_write(m, 0, 16, 2, 40) == 8
    assert w.fd_write(m, 3, 16, 2, 40) == 8
    assert w.fd_write(m, 1, 65530, 2, 40) == 21
    assert w.fd_write(m, 1, 16, 2, 65534) == 21


def test_poll_oneoff_event_layout():
    w, m = WASI(), FakeMem()
    inp, out = 1000, 2000
    m.b[out:out + 96] = b"\xaa" * 96  # events are zero-filled first
    subs = [(0x1122334455667788, 0), (42, 1), (7, 2)]
    for i, (ud, tag) in enumerate(subs):
        struct.pack_into("<QB", m.b, inp + 48 * i, ud, tag)
    assert w.poll_oneoff(m, inp, out, 3, 3000) == 0
    assert struct.unpack_from("<I", m.b, 3000)[0] == 3
    for i, (ud, tag) in enumerate(subs):
        e = out + 32 * i
        assert struct.unpack_from("<QHB", m.b, e) == (ud, 0 if tag == 0 else 8, tag)
        assert m.b[e + 11:e + 32] == bytes(21)
    assert w.poll_oneoff(m, inp, out, 0, 3000) == 28
    struct.pack_into("<I", m.b, 3000, 99)
    m.b[out:out + 32] = b"\xaa" * 32
    assert w.poll_oneoff(m, inp, 65530, 1, 3000) == 21
    assert w.poll_oneoff(m, inp, out, 1, 65534) == 21
    assert m.b[out] == 0xAA and struct.unpack_from("<I", m.b, 3000)[0] == 99, "a faulting call writes nothing"


def test_sched_yield_and_proc_exit():
    w, m = WASI(), FakeMem()
    assert w.sched_yield(m) == 0
    with pytest.raises(ProcExit) as e:
        w.proc_exit(m, 3)
    assert e.value.code == 3
    with pytest.raises(ProcExit) as e:
        w.proc_exit(m, -1)
    assert e.value.code == 0xFFFFFFFF
