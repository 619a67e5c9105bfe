// The deterministic WASI of spec/abi-v1.md §6.2: exactly ten wasi_snapshot_preview1 functions,
// no files, no environment, no arguments, a fixed clock and a SplitMix64 random stream per
// instance.

export const WASI_MODULE = 'wasi_snapshot_preview1';

/** PCTL_WASI_TIME: 2024-01-01T00:00:00Z in nanoseconds. */
export const WASI_TIME = 1704067200000000000n;

const ERRNO_SUCCESS = 0;
const ERRNO_BADF = 8;
const ERRNO_FAULT = 21;
const ERRNO_INVAL = 28;

const I32 = 0x7f;
const I64 = 0x7e;

/** The profile: function name -> signature (value type bytes). */
export const WASI_FUNCS = {
  args_sizes_get: { params: [I32, I32], results: [I32] },
  args_get: { params: [I32, I32], results: [I32] },
  environ_sizes_get: { params: [I32, I32], results: [I32] },
  environ_get: { params: [I32, I32], results: [I32] },
  clock_time_get: { params: [I32, I64, I32], results: [I32] },
  random_get: { params: [I32, I32], results: [I32] },
  fd_write: { params: [I32, I32, I32, I32], results: [I32] },
  poll_oneoff: { params: [I32, I32, I32, I32], results: [I32] },
  sched_yield: { params: [], results: [I32] },
  proc_exit: { params: [I32], results: [] },
};

const MASK64 = (1n << 64n) - 1n;

/**
 * SplitMix64 byte stream (§6.2): state starts at seed (0 in the spec); output j is
 * mix(state += golden), and the stream is the outputs' bytes, little-endian, back to back.
 */
export class RandomStream {
  constructor(seed = 0n) {
    this.state = BigInt(seed) & MASK64;
    this.buf = new Uint8Array(8);
    this.view = new DataView(this.buf.buffer);
    this.left = 0; // unread bytes at the end of buf
  }

  /** Output j+1 of SplitMix64 (advances the state). */
  nextOutput() {
    this.state = (this.state + 0x9E3779B97F4A7C15n) & MASK64;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & MASK64;
    return z ^ (z >> 31n);
  }

  /** Fills p (a Uint8Array) with the next bytes of the stream. */
  read(p) {
    let i = 0;
    while (i < p.length) {
      if (this.left === 0) {
        this.view.setBigUint64(0, this.nextOutput(), true);
        this.left = 8;
      }
      const n = Math.min(this.left, p.length - i);
      p.set(this.buf.subarray(8 - this.left, 8 - this.left + n), i);
      this.left -= n;
      i += n;
    }
  }
}

/**
 * Thrown by a WASI function whose charge the crossing's budget cannot pay (spec/abi-v1.md §7.2,
 * rule 4); the instance's fuel is then negative and the host reports a time limit.
 */
export class FuelExhausted extends Error {
  constructor() {
    super('work budget exhausted in a WASI call');
  }
}

/** PCTL_WASI_CALL_FUEL and the charge per byte a WASI call may touch (§7.2, rule 4). */
export const WASI_CALL_FUEL = 16384n;
export const WASI_BYTE_FUEL = 64n;

/** Thrown by proc_exit to end the current call; the host reports "plugin exited with code C". */
export class ProcExit extends Error {
  constructor(code) {
    super(`proc_exit(${code})`);
    this.code = code;
  }
}

/**
 * Returns the import object of the profile for one instance. getMemory() must return the
 * instance's exported memory (the host sets it right after instantiation; the Node host moves a
 * start function after that point, so no WASI call can come earlier).
 */
export function wasiImports(getMemory, { time = WASI_TIME, seed = 0n } = {}, getFuel = () => null) {
  const random = new RandomStream(seed);
  // Every call is charged first, before it checks or touches anything (§7.2, rule 4).
  const charge = (bytes) => {
    const f = getFuel();
    if (!f) return;
    f.value -= WASI_CALL_FUEL + WASI_BYTE_FUEL * BigInt(bytes);
    if (f.value < 0n) throw new FuelExhausted();
  };
  const mem = () => {
    const m = getMemory();
    return { u8: new Uint8Array(m.buffer), dv: new DataView(m.buffer) };
  };
  const inside = (u8, ptr, len) => ptr >= 0 && len >= 0 && ptr + len <= u8.length;
  const u32 = (x) => x >>> 0;

  const zeroSizes = (a, b) => {
    const { u8, dv } = mem();
    a = u32(a); b = u32(b);
    if (!inside(u8, a, 4) || !inside(u8, b, 4)) return ERRNO_FAULT;
    dv.setUint32(a, 0, true);
    dv.setUint32(b, 0, true);
    return ERRNO_SUCCESS;
  };
  const fns = {
    args_sizes_get: zeroSizes,
    args_get: () => ERRNO_SUCCESS,
    environ_sizes_get: zeroSizes,
    environ_get: () => ERRNO_SUCCESS,
    clock_time_get: (id, _precision, ptr) => {
      id = u32(id);
      if (id > 3) return ERRNO_INVAL;
      const { u8, dv } = mem();
      ptr = u32(ptr);
      if (!inside(u8, ptr, 8)) return ERRNO_FAULT;
      dv.setBigUint64(ptr, time, true);
      return ERRNO_SUCCESS;
    },
    random_get: (buf, len) => {
      const { u8 } = mem();
      buf = u32(buf); len = u32(len);
      if (!inside(u8, buf, len)) return ERRNO_FAULT;
      random.read(u8.subarray(buf, buf + len));
      return ERRNO_SUCCESS;
    },
    fd_write: (fd, iovs, n, nwritten) => {
      fd = u32(fd); iovs = u32(iovs); n = u32(n); nwritten = u32(nwritten);
      if (fd !== 1 && fd !== 2) return ERRNO_BADF;
      const { u8, dv } = mem();
      if (!inside(u8, iovs, n * 8) || !inside(u8, nwritten, 4)) return ERRNO_FAULT;
      let total = 0; // the data itself is discarded, so its buffers are not checked (as in Go)
      for (let i = 0; i < n; i++) total = (total + dv.getUint32(iovs + 8 * i + 4, true)) >>> 0;
      dv.setUint32(nwritten, total, true);
      return ERRNO_SUCCESS;
    },
    poll_oneoff: (inp, out, nsubs, neventsPtr) => {
      inp = u32(inp); out = u32(out); nsubs = u32(nsubs); neventsPtr = u32(neventsPtr);
      if (nsubs === 0) return ERRNO_INVAL;
      const { u8, dv } = mem();
      if (!inside(u8, inp, nsubs * 48) || !inside(u8, out, nsubs * 32) || !inside(u8, neventsPtr, 4)) return ERRNO_FAULT;
      // Subscription i is read just before event i is written, as the Go host does (it matters
      // only if a module lets the two arrays overlap).
      for (let i = 0; i < nsubs; i++) {
        const userdata = dv.getBigUint64(inp + 48 * i, true);
        const tag = u8[inp + 48 * i + 8];
        const e = out + 32 * i;
        u8.fill(0, e, e + 32);
        dv.setBigUint64(e, userdata, true);
        dv.setUint16(e + 8, tag === 0 ? 0 : ERRNO_BADF, true);
        u8[e + 10] = tag;
      }
      dv.setUint32(neventsPtr, nsubs, true);
      return ERRNO_SUCCESS;
    },
    sched_yield: () => ERRNO_SUCCESS,
    proc_exit: (code) => {
      throw new ProcExit(u32(code));
    },
  };
  // What each call may touch, in bytes, from its arguments (read as unsigned).
  const bytes = {
    args_sizes_get: () => 8,
    environ_sizes_get: () => 8,
    clock_time_get: () => 8,
    random_get: (_buf, len) => u32(len),
    fd_write: (_fd, _iovs, n) => 8 * u32(n) + 4,
    poll_oneoff: (_in, _out, nsubs) => 80 * u32(nsubs) + 4,
  };
  const charged = {};
  for (const [name, fn] of Object.entries(fns)) {
    const size = bytes[name] ?? (() => 0);
    charged[name] = (...args) => {
      charge(size(...args));
      return fn(...args);
    };
  }
  return { [WASI_MODULE]: charged, random };
}
