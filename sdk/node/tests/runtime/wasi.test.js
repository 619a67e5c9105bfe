// Unit tests of the deterministic WASI shims (spec/abi-v1.md §6.2).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { RandomStream, wasiImports, WASI_TIME, ProcExit, WASI_MODULE } from '../../src/runtime/wasi.js';

const vectors = JSON.parse(readFileSync(new URL('../../../../spec/vectors/wasi-random.json', import.meta.url)));

test('random stream: outputs and first 64 bytes match spec/vectors/wasi-random.json', () => {
  const s = new RandomStream();
  for (const [i, hex] of vectors.outputs.entries()) assert.equal(s.nextOutput(), BigInt(hex), `output ${i + 1}`);
  assert.equal(vectors.first_output, vectors.outputs[0]);
  const b = new Uint8Array(64);
  new RandomStream(BigInt(vectors.state0)).read(b);
  assert.equal(Buffer.from(b).toString('hex'), vectors.bytes_hex);
});

test('random stream: reads that end mid-output continue where they stopped', () => {
  const want = Buffer.from(vectors.bytes_hex, 'hex');
  for (const sizes of [[1, 3, 7, 9, 44], [5, 5, 5, 5, 44], [0, 8, 0, 13, 43], [64]]) {
    const s = new RandomStream();
    const got = [];
    for (const n of sizes) {
      const b = new Uint8Array(n);
      s.read(b);
      got.push(...b);
    }
    assert.equal(Buffer.from(got).toString('hex'), want.toString('hex'), `sizes ${sizes}`);
  }
});

// A fake instance memory of one page, and the shims bound to it.
function setup(opts) {
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 2 });
  const w = wasiImports(() => memory, opts)[WASI_MODULE];
  const u8 = () => new Uint8Array(memory.buffer);
  const dv = () => new DataView(memory.buffer);
  return { memory, w, u8, dv };
}

test('random_get: fills guest memory from the stream, faults outside memory without consuming', () => {
  const { w, u8 } = setup();
  assert.equal(w.random_get(100, 3), 0);
  assert.equal(w.random_get(65535, 2), 21); // crosses the end of memory
  assert.equal(w.random_get(103, 61), 0);
  assert.equal(Buffer.from(u8().subarray(100, 164)).toString('hex'), vectors.bytes_hex);
  assert.equal(w.random_get(65536, 0), 0); // empty range at the very end is inside
});

test('random_get: the stream follows memory growth and a seed changes it', () => {
  const { memory, w, u8 } = setup({ seed: 1n });
  memory.grow(1);
  assert.equal(w.random_get(70000, 8), 0);
  assert.notEqual(Buffer.from(u8().subarray(70000, 70008)).toString('hex'), vectors.bytes_hex.slice(0, 16));
});

test('clock_time_get: fixed time for clocks 0..3, EINVAL otherwise, EFAULT outside memory', () => {
  const { w, dv, u8 } = setup();
  for (const id of [0, 1, 2, 3]) {
    assert.equal(w.clock_time_get(id, 1000n, 8 * id), 0);
    assert.equal(dv().getBigUint64(8 * id, true), WASI_TIME);
  }
  assert.equal(WASI_TIME, 1704067200000000000n);
  assert.equal(w.clock_time_get(4, 0n, 64), 28);
  assert.equal(w.clock_time_get(-1, 0n, 64), 28); // u32 0xffffffff
  assert.equal(u8()[64], 0);
  assert.equal(w.clock_time_get(0, 0n, 65530), 21);
  const t = setup({ time: 5n });
  assert.equal(t.w.clock_time_get(0, 0n, 0), 0);
  assert.equal(t.dv().getBigUint64(0, true), 5n);
});

test('args and environ: zero sizes, nothing written, EFAULT without writing', () => {
  const { w, dv, u8 } = setup();
  dv().setUint32(0, 0xdeadbeef, true);
  dv().setUint32(4, 0xdeadbeef, true);
  assert.equal(w.args_sizes_get(0, 4), 0);
  assert.equal(dv().getUint32(0, true), 0);
  assert.equal(dv().getUint32(4, true), 0);
  dv().setUint32(8, 7, true);
  assert.equal(w.environ_sizes_get(8, 65534), 21);
  assert.equal(dv().getUint32(8, true), 7, 'a faulting call writes nothing');
  assert.equal(w.args_get(0, 0), 0);
  assert.equal(w.environ_get(0, 0), 0);
  assert.equal(u8()[100], 0);
});

test('fd_write: stdout and stderr are discarded and counted; other fds are EBADF', () => {
  const { w, dv } = setup();
  // two iovecs at 16: (buf 100, len 5), (buf 200, len 7)
  dv().setUint32(16, 100, true); dv().setUint32(20, 5, true);
  dv().setUint32(24, 200, true); dv().setUint32(28, 7, true);
  for (const fd of [1, 2]) {
    dv().setUint32(40, 0, true);
    assert.equal(w.fd_write(fd, 16, 2, 40), 0);
    assert.equal(dv().getUint32(40, true), 12);
  }
  assert.equal(w.fd_write(0, 16, 2, 40), 8);
  assert.equal(w.fd_write(3, 16, 2, 40), 8);
  assert.equal(w.fd_write(1, 65530, 2, 40), 21);
  assert.equal(w.fd_write(1, 16, 2, 65534), 21);
});

test('poll_oneoff: every subscription completes at once with the §6.2 event layout', () => {
  const { w, u8, dv } = setup();
  const inp = 1000;
  const out = 2000;
  u8().fill(0xaa, out, out + 3 * 32); // events are zero-filled first
  const subs = [[0x1122334455667788n, 0], [42n, 1], [7n, 2]];
  subs.forEach(([ud, tag], i) => {
    dv().setBigUint64(inp + 48 * i, ud, true);
    u8()[inp + 48 * i + 8] = tag;
  });
  assert.equal(w.poll_oneoff(inp, out, 3, 3000), 0);
  assert.equal(dv().getUint32(3000, true), 3);
  subs.forEach(([ud, tag], i) => {
    const e = out + 32 * i;
    assert.equal(dv().getBigUint64(e, true), ud, `userdata ${i}`);
    assert.equal(dv().getUint16(e + 8, true), tag === 0 ? 0 : 8, `error ${i}`);
    assert.equal(u8()[e + 10], tag, `type ${i}`);
    for (let k = 11; k < 32; k++) assert.equal(u8()[e + k], 0, `event ${i} byte ${k}`);
  });
  assert.equal(w.poll_oneoff(inp, out, 0, 3000), 28);
  dv().setUint32(3000, 99, true);
  u8().fill(0xaa, out, out + 32);
  assert.equal(w.poll_oneoff(inp, 65530, 1, 3000), 21);
  assert.equal(w.poll_oneoff(inp, out, 1, 65534), 21);
  assert.equal(u8()[out], 0xaa, 'a faulting call writes nothing');
  assert.equal(dv().getUint32(3000, true), 99);
});

test('sched_yield returns 0; proc_exit ends the call with its code', () => {
  const { w } = setup();
  assert.equal(w.sched_yield(), 0);
  assert.throws(() => w.proc_exit(3), (e) => e instanceof ProcExit && e.code === 3);
  assert.throws(() => w.proc_exit(-1), (e) => e instanceof ProcExit && e.code === 0xffffffff);
});
