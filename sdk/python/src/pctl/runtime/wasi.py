"""The deterministic WASI of spec/abi-v1.md §6.2: exactly ten wasi_snapshot_preview1 functions, no
files, no environment, no arguments, a fixed clock and a SplitMix64 random stream per instance.

The functions are plain Python over a `Mem` (read/write/size of the instance's memory), so they
are tested without an engine; host.py binds them to wasmtime."""

from __future__ import annotations

import struct

WASI_MODULE = "wasi_snapshot_preview1"
WASI_TIME = 1704067200000000000  # PCTL_WASI_TIME: 2024-01-01T00:00:00Z in ns

ERRNO_SUCCESS, ERRNO_BADF, ERRNO_FAULT, ERRNO_INVAL = 0, 8, 21, 28

I32, I64 = 0x7F, 0x7E
# The profile: name -> (params, results) as value type bytes.
WASI_FUNCS = {
    "args_sizes_get": ((I32, I32), (I32,)),
    "args_get": ((I32, I32), (I32,)),
    "environ_sizes_get": ((I32, I32), (I32,)),
    "environ_get": ((I32, I32), (I32,)),
    "clock_time_get": ((I32, I64, I32), (I32,)),
    "random_get": ((I32, I32), (I32,)),
    "fd_write": ((I32, I32, I32, I32), (I32,)),
    "poll_oneoff": ((I32, I32, I32, I32), (I32,)),
    "sched_yield": ((), (I32,)),
    "proc_exit": ((I32,), ()),
}

_M64 = (1 << 64) - 1


class RandomStream:
    """SplitMix64 byte stream: state starts at seed (0 in the spec); output j is mix(state +=
    golden); the stream is the outputs' bytes, little-endian, back to back."""

    def __init__(self, seed: int = 0):
        self.state = seed & _M64
        self.buf = b""  # unread bytes of the current output

    def next_output(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def read(self, n: int) -> bytes:
        """The next n bytes of the stream."""
        out = bytearray(self.buf[:n])
        self.buf = self.buf[n:]
        need = n - len(out)
        if need > 0:
            # Whole outputs at once (a random_get may ask for megabytes): one pack, no slicing.
            k = (need + 7) // 8
            state, outs = self.state, [0] * k
            for i in range(k):
                state = (state + 0x9E3779B97F4A7C15) & _M64
                z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _M64
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
                outs[i] = z ^ (z >> 31)
            self.state = state
            chunk = struct.pack(f"<{k}Q", *outs)
            out += chunk[:need]
            self.buf = chunk[need:]
        return bytes(out)


# spec/abi-v1.md §7.2, rule 4: every WASI call costs PCTL_WASI_CALL_FUEL plus 64 units per byte
# of memory its arguments let it read or write, charged first.
WASI_CALL_FUEL = 16384
WASI_BYTE_FUEL = 64
_BYTES = {
    "args_sizes_get": lambda a: 8,
    "environ_sizes_get": lambda a: 8,
    "clock_time_get": lambda a: 8,
    "random_get": lambda a: a[1] & 0xFFFFFFFF,
    "fd_write": lambda a: 8 * (a[2] & 0xFFFFFFFF) + 4,
    "poll_oneoff": lambda a: 80 * (a[2] & 0xFFFFFFFF) + 4,
}


def call_cost(name: str, args) -> int:
    """What one call of a WASI function costs, from its arguments (spec/abi-v1.md §7.2, rule 4)."""
    f = _BYTES.get(name)
    return WASI_CALL_FUEL + WASI_BYTE_FUEL * (f(args) if f else 0)


class FuelExhausted(Exception):
    """Raised by a WASI call that the crossing's budget cannot pay for; the instance's fuel is then
    negative and the host reports a time limit."""


class ProcExit(Exception):
    """Raised by proc_exit to end the current call: "plugin exited with code C"."""

    def __init__(self, code: int):
        super().__init__(f"proc_exit({code})")
        self.code = code


class Mem:
    """What the shims need of an instance's memory."""

    def size(self) -> int: ...
    def read(self, ptr: int, n: int) -> bytes: ...
    def write(self, ptr: int, data: bytes) -> None: ...


def _inside(mem: Mem, ptr: int, n: int) -> bool:
    return ptr + n <= mem.size()


class WASI:
    """The shims of one instance. Every method takes the caller's memory first, then the WASI
    arguments as the engine passes them (i32 possibly negative: they are read as u32)."""

    def __init__(self, time: int = WASI_TIME, seed: int = 0):
        self.time = time
        self.random = RandomStream(seed)

    @staticmethod
    def _zero_sizes(mem: Mem, a: int, b: int) -> int:
        a &= 0xFFFFFFFF
        b &= 0xFFFFFFFF
        if not _inside(mem, a, 4) or not _inside(mem, b, 4):
            return ERRNO_FAULT
        mem.write(a, b"\0\0\0\0")
        mem.write(b, b"\0\0\0\0")
        return ERRNO_SUCCESS

    def args_sizes_get(self, mem: Mem, a: int, b: int) -> int:
        return self._zero_sizes(mem, a, b)

    def environ_sizes_get(self, mem: Mem, a: int, b: int) -> int:
        return self._zero_sizes(mem, a, b)

    def args_get(self, mem: Mem, a: int, b: int) -> int:
        return ERRNO_SUCCESS

    def environ_get(self, mem: Mem, a: int, b: int) -> int:
        return ERRNO_SUCCESS

    def clock_time_get(self, mem: Mem, clock_id: int, precision: int, ptr: int) -> int:
        if clock_id & 0xFFFFFFFF > 3:
            return ERRNO_INVAL
        ptr &= 0xFFFFFFFF
        if not _inside(mem, ptr, 8):
            return ERRNO_FAULT
        mem.write(ptr, struct.pack("<Q", self.time & _M64))
        return ERRNO_SUCCESS

    def random_get(self, mem: Mem, buf: int, n: int) -> int:
        buf &= 0xFFFFFFFF
        n &= 0xFFFFFFFF
        if not _inside(mem, buf, n):
            return ERRNO_FAULT
        mem.write(buf, self.random.read(n))
        return ERRNO_SUCCESS

    def fd_write(self, mem: Mem, fd: int, iovs: int, n: int, nwritten: int) -> int:
        fd, iovs, n, nwritten = fd & 0xFFFFFFFF, iovs & 0xFFFFFFFF, n & 0xFFFFFFFF, nwritten & 0xFFFFFFFF
        if fd not in (1, 2):
            return ERRNO_BADF
        if not _inside(mem, iovs, 8 * n) or not _inside(mem, nwritten, 4):
            return ERRNO_FAULT
        vec = mem.read(iovs, 8 * n)
        # The data is discarded, so its buffers are not checked (as in the Go host).
        total = sum(struct.unpack(f"<{2 * n}I", vec)[1::2]) & 0xFFFFFFFF
        mem.write(nwritten, struct.pack("<I", total))
        return ERRNO_SUCCESS

    def poll_oneoff(self, mem: Mem, inp: int, out: int, nsubs: int, nevents: int) -> int:
        inp, out, nsubs, nevents = inp & 0xFFFFFFFF, out & 0xFFFFFFFF, nsubs & 0xFFFFFFFF, nevents & 0xFFFFFFFF
        if nsubs == 0:
            return ERRNO_INVAL
        if not _inside(mem, inp, 48 * nsubs) or not _inside(mem, out, 32 * nsubs) or not _inside(mem, nevents, 4):
            return ERRNO_FAULT
        # Subscription i is read just before event i is written, as the Go host does (it matters
        # only if a module lets the two arrays overlap, so the common case is one read and one write).
        lo_in, hi_in, lo_out, hi_out = inp, inp + 48 * nsubs, out, out + 32 * nsubs
        if hi_in <= lo_out or hi_out <= lo_in:
            subs = mem.read(inp, 48 * nsubs)
            events = bytearray(32 * nsubs)
            for i in range(nsubs):
                tag = subs[48 * i + 8]
                events[32 * i:32 * i + 8] = subs[48 * i:48 * i + 8]
                events[32 * i + 8:32 * i + 11] = struct.pack("<HB", 0 if tag == 0 else ERRNO_BADF, tag)
            mem.write(out, bytes(events))
        else:
            for i in range(nsubs):
                sub = mem.read(inp + 48 * i, 9)
                userdata, tag = sub[:8], sub[8]
                event = userdata + struct.pack("<HB", 0 if tag == 0 else ERRNO_BADF, tag) + bytes(21)
                mem.write(out + 32 * i, event)
        mem.write(nevents, struct.pack("<I", nsubs))
        return ERRNO_SUCCESS

    def sched_yield(self, mem: Mem) -> int:
        return ERRNO_SUCCESS

    def proc_exit(self, mem: Mem, code: int) -> None:
        raise ProcExit(code & 0xFFFFFFFF)
