// Tests of the module rewriting that enforces spec/abi-v1.md §7 on V8 (a port of the Go host's
// runtime/internal/wasmbin), and of the host's refusals, on small modules assembled here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { instrument, parse, WasmbinError, FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT } from '../../src/runtime/wasmbin.js';
import { Plugin, LoadError, CallError, CLASS } from '../../src/runtime/host.js';

// --- a tiny assembler: enough for test modules -------------------------------------------------
const u32 = (v) => { const o = []; do { let c = v & 0x7f; v >>>= 7; if (v) c |= 0x80; o.push(c); } while (v); return o; };
const s32 = (v) => { const o = []; for (;;) { const c = v & 0x7f; v >>= 7; if ((v === 0 && !(c & 0x40)) || (v === -1 && (c & 0x40))) { o.push(c); return o; } o.push(c | 0x80); } };
const str = (s) => [...u32(Buffer.byteLength(s)), ...Buffer.from(s)];
const vec = (items) => [...u32(items.length), ...items.flat()];
const section = (id, body) => [id, ...u32(body.length), ...body];
const I32 = 0x7f;

/**
 * mod({ types: [[params, results]], imports: [[module, name, typeIdx]], funcs: [[typeIdx, locals[], code[]]],
 *       memory: [min, max?], exports: [[name, kind, index]], start })
 */
function mod({ types = [], imports = [], funcs = [], memory = null, exports = [], start = null }) {
  const b = [0x00, 0x61, 0x73, 0x6d, 1, 0, 0, 0];
  b.push(...section(1, vec(types.map(([p, r]) => [0x60, ...vec(p.map((x) => [x])), ...vec(r.map((x) => [x]))]))));
  if (imports.length) b.push(...section(2, vec(imports.map(([m, n, t]) => [...str(m), ...str(n), 0, ...u32(t)]))));
  b.push(...section(3, vec(funcs.map(([t]) => u32(t)))));
  if (memory) b.push(...section(5, vec([memory.length > 1 ? [1, ...u32(memory[0]), ...u32(memory[1])] : [0, ...u32(memory[0])]])));
  b.push(...section(7, vec(exports.map(([n, k, i]) => [...str(n), k, ...u32(i)]))));
  if (start !== null) b.push(...section(8, u32(start)));
  b.push(...section(10, vec(funcs.map(([, locals, code]) => {
    const body = [...vec(locals.map(([n, t]) => [...u32(n), t])), ...code, 0x0b];
    return [...u32(body.length), ...body];
  }))));
  return new Uint8Array(b);
}

// A minimal correct partitioner: buffer at 65536, partition = key_len % n (i32.rem_u), plus
// whatever extra functions and exports a test adds (extra function indices start at 3 + imports).
function partitioner({ extraFuncs = [], extraExports = [], memory = [17], imports = [], types = [], partitionCode = null, start = null } = {}) {
  const T = [[[], [I32]], [[I32], [I32]], [[I32, I32], [I32]], ...types];
  const ni = imports.length;
  return mod({
    types: T,
    imports,
    memory,
    funcs: [
      [0, [], [0x41, 1]], // pctl_abi_version
      [1, [], [0x41, ...s32(65536)]], // pctl_key_buffer
      [2, [], partitionCode ?? [0x20, 0, 0x20, 1, 0x70]], // pctl_partition: key_len % n
      ...extraFuncs,
    ],
    exports: [['memory', 2, 0], ['pctl_abi_version', 0, ni], ['pctl_key_buffer', 0, ni + 1], ['pctl_partition', 0, ni + 2], ...extraExports],
    start,
  });
}

const limits = (over = {}) => ({ initialFuel: 1n << 33n, maxDepth: 1000, exportFuel: new Map([['pctl_partition', 1n << 31n]]), maxMemoryPages: 512, moveStart: true, ...over });

test('the assembler makes valid modules and the host runs them', () => {
  const p = Plugin.open(partitioner());
  assert.deepEqual([...p.partitionAll([Buffer.alloc(0), Buffer.alloc(5), Buffer.alloc(12)], 7)], [0, 5, 5]);
});

test('memory maximum becomes min(declared, 512); no maximum becomes 512', () => {
  for (const [decl, want] of [[[1], 512], [[1, 100], 100], [[1, 512], 512], [[1, 1000], 512], [[1, 65536], 512]]) {
    const { bytes } = instrument(partitioner({ memory: decl }), limits());
    const m = parse(bytes);
    assert.equal(m.memories[0].hasMax, true);
    assert.equal(m.memories[0].max, want, `declared ${decl}`);
    assert.equal(m.memories[0].min, decl[0]);
  }
});

test('memory.grow past the limit fails with -1 and a trap after it is a memory limit', () => {
  // pctl_partition: grow by its n argument; unreachable if that failed, else return 0.
  const code = [0x20, 1, 0x40, 0, 0x41, 0x7f, 0x46, 0x04, 0x40, 0x00, 0x0b, 0x41, 0];
  const p = Plugin.open(partitioner({ partitionCode: code, memory: [17] }));
  assert.equal(p.partitionAll([Buffer.alloc(0)], 495)[0], 0); // 17 + 495 = 512 pages: allowed
  assert.throws(() => p.partitionAll([Buffer.alloc(0)], 1), (e) => e instanceof CallError && e.cls === CLASS.memoryLimit);
  const q = Plugin.open(partitioner({ partitionCode: code, memory: [17, 20] }));
  assert.throws(() => q.partitionAll([Buffer.alloc(0)], 4), (e) => e instanceof CallError && e.cls === CLASS.memoryLimit, 'the declared max is a limit too');
});

test('the rewritten module exports fuel, depth and memfail; reserved names are refused', () => {
  const { bytes } = instrument(partitioner(), limits());
  const names = parse(bytes).exports.map((e) => e.name);
  for (const n of [FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT]) assert.ok(names.includes(n), n);
  for (const reserved of [FUEL_EXPORT, 'pctl.start']) {
    const b = partitioner({ extraExports: [[reserved, 0, 0]] });
    assert.throws(() => instrument(b, limits()), (e) => e instanceof WasmbinError && e.kind === 'malformed' && e.message.includes(reserved));
  }
});

test('instructions outside WebAssembly 2.0 are refused as unsupported features', () => {
  const cases = [
    ['tail call', [0x12, 0]],
    ['atomics', [0xfe, 0x00, 0x02, 0x00]],
    ['exceptions', [0x06, 0x40, 0x0b]],
    ['relaxed SIMD', [0xfd, ...u32(0x100)]],
    ['GC', [0xfb, 0x00]],
  ];
  for (const [name, code] of cases) {
    const b = partitioner({ partitionCode: [...code, 0x41, 0] });
    assert.throws(() => instrument(b, limits()), (e) => e instanceof WasmbinError && e.kind === 'unsupported', name);
    assert.throws(() => Plugin.open(b), (e) => e instanceof LoadError && e.cls === CLASS.feature, name);
  }
  assert.throws(() => instrument(partitioner({ partitionCode: [0xc5] }), limits()), (e) => e.kind === 'malformed' && /unknown opcode 0xc5/.test(e.message));
});

test('call depth: 1000 nested frames run, 1001 trap with call stack exhausted', () => {
  // f(d) = d == 0 ? 0 : f(d - 1); pctl_partition calls f(n - 1): n frames of f plus pctl_partition.
  const f = [1, [], [0x20, 0, 0x45, 0x04, I32, 0x41, 0, 0x05, 0x20, 0, 0x41, 1, 0x6b, 0x10, 3, 0x0b]];
  const call = [0x20, 1, 0x41, 1, 0x6b, 0x10, 3, 0x1a, 0x41, 0];
  const p = Plugin.open(partitioner({ extraFuncs: [f], partitionCode: call }));
  assert.equal(p.partitionAll([Buffer.alloc(0)], 999)[0], 0); // 1 + 999 frames
  assert.throws(() => p.partitionAll([Buffer.alloc(0)], 1000), (e) => e instanceof CallError && e.cls === CLASS.callDepth);
  // Returns through `return` and branches to the function label still unwind the counter.
  const g = [1, [], [0x20, 0, 0x45, 0x04, 0x40, 0x41, 0, 0x0f, 0x0b, 0x20, 0, 0x41, 1, 0x6b, 0x10, 3, 0x0c, 0]];
  const loop = [0x03, 0x40, 0x41, 5, 0x10, 3, 0x1a, 0x20, 1, 0x41, 1, 0x6b, 0x22, 1, 0x0d, 0, 0x0b, 0x41, 0];
  const q = Plugin.open(partitioner({ extraFuncs: [g], partitionCode: loop }));
  assert.equal(q.partitionAll([Buffer.alloc(0)], 5000)[0], 0, '5000 sequential calls of depth 6 stay within the limit');
});

test('a start function runs once, before _initialize, and can use WASI', () => {
  // start: random_get(0x10000 + 100, 8); pctl_partition returns the first random byte % n.
  const types = [[[I32, I32], [I32]], [[], []]]; // type 3 = random_get's, type 4 = () -> ()
  const imports = [['wasi_snapshot_preview1', 'random_get', 3]];
  const startFn = [4, [], [0x41, ...s32(65636), 0x41, 8, 0x10, 0, 0x1a]];
  const part = [0x41, ...s32(65636), 0x2d, 0, 0, 0x20, 1, 0x70]; // i32.load8_u, rem_u
  const p = Plugin.open(partitioner({ types, imports, extraFuncs: [startFn], partitionCode: part, start: 4 }));
  assert.equal(p.profile, 'wasi-deterministic');
  assert.equal(p.partitionAll([Buffer.alloc(0)], 256)[0], 0xaf, 'the first byte of the stream');
});

test('a loop without end is stopped by the work budget (time limit)', () => {
  const p = Plugin.open(partitioner({ partitionCode: [0x03, 0x40, 0x0c, 0, 0x0b, 0x41, 0] }));
  assert.throws(() => p.partitionAll([Buffer.alloc(0)], 3), (e) => e instanceof CallError && e.cls === CLASS.timeLimit);
});

test('a positive batch status is an unknown error code, not a partition out of range (abi-v1 §2.4)', () => {
  for (const status of [1, 5, 1000]) {
    // pctl_partition_batch (type 2: (i32, i32) -> i32) returns the constant status.
    const p = Plugin.open(partitioner({ extraFuncs: [[2, [], [0x41, ...s32(status)]]], extraExports: [['pctl_partition_batch', 0, 3]] }));
    assert.throws(() => p.partitionAll([Buffer.alloc(1), Buffer.alloc(2)], 7), (e) => {
      assert.ok(e instanceof CallError);
      assert.equal(e.cls, CLASS.code);
      assert.match(e.message, new RegExp(`pctl_partition_batch: plugin returned an error code unknown error code ${status}`));
      return true;
    });
  }
});
