// wasmbin: reads what the host must know about a module before compiling it (types, imports,
// functions, memories, exports) and rewrites it so that the limits of spec/abi-v1.md §7 hold on
// V8 exactly as on the Go host. This is a port of runtime/internal/wasmbin (Parse, Instrument):
// same fuel costs, same depth counting, same memory.grow flag, so a module is stopped at the same
// point on every host. Only the WebAssembly 2.0 features that §7.1 allows are understood; any
// other opcode is refused.

export const FUEL_EXPORT = 'pctl.fuel';
export const DEPTH_EXPORT = 'pctl.depth';
export const MEMFAIL_EXPORT = 'pctl.memfail';
export const START_EXPORT = 'pctl.start';

const SEC = { custom: 0, type: 1, import: 2, function: 3, table: 4, memory: 5, global: 6, export: 7, start: 8, element: 9, code: 10, data: 11, datacount: 12, tag: 13 };
const SECTION_NAMES = ['custom section', 'type section', 'import section', 'function section', 'table section',
  'memory section', 'global section', 'export section', 'start section', 'element section', 'code section',
  'data section', 'data count section', 'tag section'];

export const KIND = { func: 0, table: 1, memory: 2, global: 3, tag: 4 };
const KIND_NAMES = ['function', 'table', 'memory', 'global', 'tag'];
export function kindName(k) { return KIND_NAMES[k] ?? `kind(${k})`; }

const VALTYPE_NAMES = { 0x7f: 'i32', 0x7e: 'i64', 0x7d: 'f32', 0x7c: 'f64', 0x7b: 'v128', 0x70: 'funcref', 0x6f: 'externref' };
export const I32 = 0x7f;
export const I64 = 0x7e;

/** Formats a function type like the Go host: "(i32, i32) -> (i32)". */
export function typeString(t) {
  const n = (v) => VALTYPE_NAMES[v] ?? `valtype(0x${v.toString(16).padStart(2, '0')})`;
  return `(${t.params.map(n).join(', ')}) -> (${t.results.map(n).join(', ')})`;
}

export function typeEqual(a, b) {
  return a.params.length === b.params.length && a.results.length === b.results.length &&
    a.params.every((v, i) => v === b.params[i]) && a.results.every((v, i) => v === b.results[i]);
}

/** Error about a module's bytes; kind is 'malformed' or 'unsupported'. */
export class WasmbinError extends Error {
  constructor(kind, where, msg, offset) {
    super(where ? `${where}: ${msg} at byte ${offset}` : `${msg} at byte ${offset}`);
    this.kind = kind;
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

class Reader {
  constructor(b, pos, end, where) { this.b = b; this.pos = pos; this.end = end; this.where = where; }
  fail(msg) { return new WasmbinError('malformed', this.where, msg, this.pos); }
  byte() {
    if (this.pos >= this.end) throw this.fail('unexpected end of data');
    return this.b[this.pos++];
  }
  bytes(n) {
    if (n < 0 || this.pos + n > this.end) throw this.fail(`need ${n} bytes, ${this.end - this.pos} remain`);
    const s = this.b.subarray(this.pos, this.pos + n);
    this.pos += n;
    return s;
  }
  // Unsigned LEB128 of at most 32 bits, as a non-negative number.
  u32() {
    let v = 0;
    let mul = 1;
    for (let i = 0; ; i++) {
      const c = this.byte();
      v += (c & 0x7f) * mul;
      mul *= 128;
      if ((c & 0x80) === 0) break;
      if (i >= 4) throw this.fail('LEB128 integer too long');
    }
    if (v > 0xffffffff) throw this.fail('LEB128 integer out of range');
    return v;
  }
  // Unsigned LEB128 of at most 64 bits (memory64 limits): skipped precisely, value as a Number.
  u64() {
    let v = 0;
    let mul = 1;
    for (let i = 0; ; i++) {
      const c = this.byte();
      v += (c & 0x7f) * mul;
      mul *= 128;
      if ((c & 0x80) === 0) break;
      if (i >= 9) throw this.fail('LEB128 integer too long');
    }
    return v;
  }
  // Signed LEB128 of at most 32 bits, as a Number.
  s32() {
    let v = 0;
    let mul = 1;
    let c;
    for (let i = 0; ; i++) {
      c = this.byte();
      v += (c & 0x7f) * mul;
      mul *= 128;
      if ((c & 0x80) === 0) break;
      if (i >= 4) throw this.fail('LEB128 integer too long');
    }
    if (c & 0x40) v -= mul;
    return v | 0;
  }
  // Signed LEB128 of at most `bits` bits; only skipped (value not needed), but length checked.
  sleb(bits) {
    const maxBytes = Math.ceil(bits / 7);
    for (let i = 0; ; i++) {
      const c = this.byte();
      if ((c & 0x80) === 0) return;
      if (i + 1 >= maxBytes) throw this.fail('LEB128 integer too long');
    }
  }
  name() {
    const n = this.u32();
    const b = this.bytes(n);
    try {
      return utf8.decode(b);
    } catch {
      throw this.fail('name is not valid UTF-8');
    }
  }
  valTypes() {
    const n = this.u32();
    if (n > this.end - this.pos) throw this.fail('vector longer than the section');
    return Array.from(this.bytes(n));
  }
  limits() {
    const flags = this.byte();
    const m = { min: 0, max: 0, hasMax: false, shared: (flags & 0x02) !== 0, is64: (flags & 0x04) !== 0 };
    if (flags & ~0x07) throw this.fail(`unknown limits flags 0x${flags.toString(16).padStart(2, '0')}`);
    const rd = m.is64 ? () => this.u64() : () => this.u32();
    m.min = rd();
    if (flags & 0x01) {
      m.hasMax = true;
      m.max = rd();
    }
    return m;
  }
}

function order(id) {
  // Canonical order of non-custom sections; the tag section sits between memory and global.
  return [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 11, 6][id] ?? 0;
}

/**
 * Parses a module: header, types, imports, functions, memories, exports. Structure is checked;
 * full validation is left to the engine. Throws WasmbinError.
 */
export function parse(b) {
  if (b.length < 8 || b[0] !== 0 || b[1] !== 0x61 || b[2] !== 0x73 || b[3] !== 0x6d) {
    throw new WasmbinError('malformed', '', 'not a WebAssembly binary (it does not start with \\0asm)', 0);
  }
  if (b[4] !== 1 || b[5] !== 0 || b[6] !== 0 || b[7] !== 0) {
    throw new WasmbinError('unsupported', '', `unsupported binary version ${Buffer.from(b.subarray(4, 8)).toString('hex')} (a component or a newer format?); pctl takes core WebAssembly version 1 binaries`, 4);
  }
  const m = { types: [], imports: [], funcs: [], tables: [], memories: [], impMems: [], exports: [], elements: [], data: [], hasStart: false, numGlobal: 0, impFuncs: 0, impGlob: 0, sections: [] };
  const r = new Reader(b, 8, b.length, '');
  let lastID = 0;
  while (r.pos < b.length) {
    const idPos = r.pos;
    r.where = 'section header';
    const id = r.byte();
    const size = r.u32();
    const start = r.pos;
    const end = start + size;
    if (end > b.length) throw new WasmbinError('malformed', '', `section ${id} claims ${size} bytes but only ${b.length - start} remain`, idPos);
    if (id !== SEC.custom) {
      if (id > SEC.tag) throw new WasmbinError('malformed', '', `unknown section id ${id}`, idPos);
      if (lastID !== 0 && order(id) <= order(lastID)) throw new WasmbinError('malformed', '', `section ${id} out of order`, idPos);
      lastID = id;
    }
    m.sections.push({ id, start, end });
    const sr = new Reader(b, start, end, SECTION_NAMES[id]);
    switch (id) {
      case SEC.type: {
        const n = sr.u32();
        for (let i = 0; i < n; i++) {
          const pos = sr.pos;
          const form = sr.byte();
          if (form !== 0x60) throw new WasmbinError('unsupported', 'type section', `type ${i} has form 0x${form.toString(16)}; only function types (0x60) are allowed (GC types are not)`, pos);
          const params = sr.valTypes();
          const results = sr.valTypes();
          m.types.push({ params, results });
        }
        break;
      }
      case SEC.import: {
        const n = sr.u32();
        for (let i = 0; i < n; i++) {
          const im = { module: sr.name(), name: sr.name(), kind: 0, type: null, typeIdx: 0 };
          const pos = sr.pos;
          im.kind = sr.byte();
          switch (im.kind) {
            case KIND.func: {
              const ti = sr.u32();
              if (ti >= m.types.length) throw new WasmbinError('malformed', 'import section', `import ${im.module}.${im.name} uses type ${ti} of ${m.types.length}`, pos);
              im.type = m.types[ti];
              im.typeIdx = ti;
              m.impFuncs++;
              break;
            }
            case KIND.table: sr.byte(); sr.limits(); break;
            case KIND.memory: m.impMems.push(sr.limits()); break;
            case KIND.global: sr.byte(); sr.byte(); m.impGlob++; break;
            case KIND.tag: throw new WasmbinError('unsupported', 'import section', 'tag imports (exception handling) are not allowed', pos);
            default: throw new WasmbinError('malformed', 'import section', `unknown import kind 0x${im.kind.toString(16)}`, pos);
          }
          m.imports.push(im);
        }
        break;
      }
      case SEC.function: {
        const n = sr.u32();
        for (let i = 0; i < n; i++) m.funcs.push(sr.u32());
        break;
      }
      case SEC.table: {
        const n = sr.u32();
        for (let i = 0; i < n; i++) {
          const rt = sr.byte();
          if (rt !== 0x70 && rt !== 0x6f) throw new WasmbinError('unsupported', 'table section', `table ${i} has element type 0x${rt.toString(16).padStart(2, '0')}; only funcref and externref are allowed (typed function references are not)`, sr.pos - 1);
          const lim = sr.limits();
          if (lim.shared || lim.is64) throw new WasmbinError('unsupported', 'table section', `table ${i} has limits flags of a shared or 64-bit table`, sr.pos);
          m.tables.push({ refType: rt, min: lim.min, max: lim.max, hasMax: lim.hasMax });
        }
        break;
      }
      case SEC.memory: {
        const n = sr.u32();
        for (let i = 0; i < n; i++) m.memories.push(sr.limits());
        break;
      }
      case SEC.element: parseElements(m, sr); break;
      case SEC.data: parseData(m, sr); break;
      case SEC.global:
        m.numGlobal = sr.u32();
        sr.pos = end;
        break;
      case SEC.export: {
        const n = sr.u32();
        for (let i = 0; i < n; i++) m.exports.push({ name: sr.name(), kind: sr.byte(), index: sr.u32() });
        break;
      }
      case SEC.start:
        m.hasStart = true;
        m.startFunc = sr.u32();
        break;
      case SEC.tag:
        throw new WasmbinError('unsupported', 'tag section', 'exception handling is not allowed (spec/abi-v1.md §7.1)', idPos);
      default:
        sr.pos = end;
    }
    if (sr.pos !== end) throw new WasmbinError('malformed', SECTION_NAMES[id], `section has ${end - sr.pos} unread bytes`, sr.pos);
    r.pos = end;
  }
  const mems = [...m.impMems, ...m.memories];
  mems.forEach((mem, i) => {
    if (mem.shared) throw new WasmbinError('unsupported', 'memory section', `memory ${i} is shared: threads are not allowed (spec/abi-v1.md §7.1)`, 0);
    if (mem.is64) throw new WasmbinError('unsupported', 'memory section', `memory ${i} is a memory64: not allowed (spec/abi-v1.md §7.1)`, 0);
  });
  return m;
}

// Reads a constant expression through its `end`; returns { isConst, c }: whether it is exactly
// `i32.const c; end`, and c as unsigned.
function constExpr(r) {
  let first = true;
  let isConst = false;
  let c = 0;
  for (;;) {
    const op = r.byte();
    if (op === 0x0b) return { isConst, c };
    if (first && op === 0x41) {
      c = r.s32() >>> 0;
      isConst = true;
      first = false;
      continue;
    }
    isConst = false;
    first = false;
    if (op === 0x02 || op === 0x03 || op === 0x04) { r.sleb(33); continue; }
    skipImmediates(r, op);
  }
}

// The element section: its active segments (spec/abi-v1.md §7.3).
function parseElements(m, r) {
  const n = r.u32();
  for (let i = 0; i < n; i++) {
    const pos = r.pos;
    const flags = r.u32();
    if (flags > 7) throw new WasmbinError('malformed', 'element section', `segment ${i} has unknown flags ${flags}`, pos);
    const active = (flags & 1) === 0;
    const seg = { index: 0, offsetOK: false, offset: 0, count: 0 };
    if ((flags & 2) && active) seg.index = r.u32();
    if (active) {
      const e = constExpr(r);
      seg.offsetOK = e.isConst;
      seg.offset = e.c;
    }
    if (flags & 3) r.byte(); // elemkind or reftype
    const count = r.u32();
    seg.count = count;
    if ((flags & 4) === 0) for (let j = 0; j < count; j++) r.u32();
    else for (let j = 0; j < count; j++) constExpr(r);
    if (active) m.elements.push(seg);
  }
}

// The data section: its active segments (spec/abi-v1.md §7.3).
function parseData(m, r) {
  const n = r.u32();
  for (let i = 0; i < n; i++) {
    const pos = r.pos;
    const flags = r.u32();
    if (flags > 2) throw new WasmbinError('malformed', 'data section', `segment ${i} has unknown flags ${flags}`, pos);
    const seg = { index: 0, offsetOK: false, offset: 0, count: 0 };
    if (flags === 2) seg.index = r.u32();
    if (flags !== 1) {
      const e = constExpr(r);
      seg.offsetOK = e.isConst;
      seg.offset = e.c;
    }
    const size = r.u32();
    r.bytes(size);
    seg.count = size;
    if (flags !== 1) m.data.push(seg);
  }
}

/** Signature of function index idx (imports first), or null. */
export function funcType(m, idx) {
  if (idx < m.impFuncs) {
    let n = 0;
    for (const im of m.imports) {
      if (im.kind === KIND.func) {
        if (n === idx) return im.type;
        n++;
      }
    }
    return null;
  }
  const d = idx - m.impFuncs;
  if (d >= m.funcs.length || m.funcs[d] >= m.types.length) return null;
  return m.types[m.funcs[d]];
}

/** Limits of memory index idx (imports first), or null. */
export function memoryAt(m, idx) {
  if (idx < m.impMems.length) return m.impMems[idx];
  return m.memories[idx - m.impMems.length] ?? null;
}

export function exportNamed(m, name) {
  return m.exports.find((e) => e.name === name) ?? null;
}

// Growable byte buffer.
class Out {
  constructor(cap) { this.b = new Uint8Array(Math.max(cap, 64)); this.n = 0; }
  grow(k) {
    if (this.n + k <= this.b.length) return;
    let c = this.b.length * 2;
    while (c < this.n + k) c *= 2;
    const nb = new Uint8Array(c);
    nb.set(this.b.subarray(0, this.n));
    this.b = nb;
  }
  byte(v) { this.grow(1); this.b[this.n++] = v; }
  bytes(a) { this.grow(a.length); this.b.set(a, this.n); this.n += a.length; }
  u32(v) {
    do {
      let c = v & 0x7f;
      v = Math.floor(v / 128);
      if (v !== 0) c |= 0x80;
      this.byte(c);
    } while (v !== 0);
  }
  s64(v) { // v: BigInt or Number
    let x = BigInt(v);
    for (;;) {
      const c = Number(x & 0x7fn);
      x >>= 7n;
      if ((x === 0n && (c & 0x40) === 0) || (x === -1n && (c & 0x40) !== 0)) {
        this.byte(c);
        return;
      }
      this.byte(c | 0x80);
    }
  }
  name(s) {
    const e = new TextEncoder().encode(s);
    this.u32(e.length);
    this.bytes(e);
  }
  section(id, body) {
    this.byte(id);
    this.u32(body.n);
    this.bytes(body.b.subarray(0, body.n));
  }
  result() { return this.b.slice(0, this.n); }
}

function unsupported(r, msg) {
  return new WasmbinError('unsupported', r.where, `${msg} (spec/abi-v1.md §7.1)`, r.pos - 1);
}

function memarg(r) {
  const align = r.u32();
  if (align & 0x40) r.u32(); // memory index (multi-memory)
  r.u32();
}

// Advances r past the immediates of the instruction whose opcode was just read.
function skipImmediates(r, op) {
  if (op === 0x00 || op === 0x01 || op === 0x05 || op === 0x0f || op === 0x1a || op === 0x1b) return;
  if ((op >= 0x06 && op <= 0x0a) || op === 0x18 || op === 0x19 || op === 0x1f) throw unsupported(r, `exception handling instruction 0x${op.toString(16).padStart(2, '0')} is not allowed`);
  if (op === 0x0c || op === 0x0d || op === 0x10) { r.u32(); return; }
  if (op === 0x0e) {
    const n = r.u32();
    for (let i = 0; i <= n; i++) r.u32();
    return;
  }
  if (op === 0x11) { r.u32(); r.u32(); return; }
  if (op === 0x12 || op === 0x13 || op === 0x15) throw unsupported(r, 'tail calls are not allowed');
  if (op === 0x14) throw unsupported(r, 'typed function references (call_ref) are not allowed');
  if (op === 0x1c) { r.bytes(r.u32()); return; }
  if (op >= 0x20 && op <= 0x26) { r.u32(); return; }
  if (op >= 0x28 && op <= 0x3e) { memarg(r); return; }
  if (op === 0x3f || op === 0x40) { r.u32(); return; }
  if (op === 0x41) { r.sleb(32); return; }
  if (op === 0x42) { r.sleb(64); return; }
  if (op === 0x43) { r.bytes(4); return; }
  if (op === 0x44) { r.bytes(8); return; }
  if (op >= 0x45 && op <= 0xc4) return;
  if (op === 0xd0) { r.sleb(33); return; }
  if (op === 0xd1) return;
  if (op === 0xd2) { r.u32(); return; }
  if ((op >= 0xd3 && op <= 0xd6) || op === 0xfb) throw unsupported(r, `GC / typed reference instruction 0x${op.toString(16)} is not allowed`);
  if (op === 0xfc) {
    const sub = r.u32();
    if (sub <= 7) return;
    if (sub === 8) { r.u32(); r.u32(); return; }
    if (sub === 9 || sub === 13 || sub === 11 || sub === 15 || sub === 16 || sub === 17) { r.u32(); return; }
    if (sub === 10 || sub === 12 || sub === 14) { r.u32(); r.u32(); return; }
    throw unsupported(r, `instruction 0xfc ${sub} is not allowed`);
  }
  if (op === 0xfd) {
    const sub = r.u32();
    if (sub <= 11 || sub === 92 || sub === 93) { memarg(r); return; }
    if (sub === 12 || sub === 13) { r.bytes(16); return; }
    if (sub >= 21 && sub <= 34) { r.byte(); return; }
    if (sub >= 84 && sub <= 91) { memarg(r); r.byte(); return; }
    if (sub <= 255) return;
    throw unsupported(r, `relaxed SIMD instruction 0xfd ${sub} is not allowed (its results differ between engines)`);
  }
  if (op === 0xfe) throw unsupported(r, 'atomic (threads) instructions are not allowed');
  throw new WasmbinError('malformed', r.where, `unknown opcode 0x${op.toString(16).padStart(2, '0')}`, r.pos - 1);
}

/**
 * Returns the instrumented copy of module bytes b, and the parsed module.
 *
 * limits: { initialFuel, maxDepth, exportFuel: Map name -> fuel, maxMemoryPages, maxTableElements, moveStart }.
 *  - fuel / depth / memory.grow flag as in the Go host (see runtime/internal/wasmbin/instrument.go),
 *    bulk instructions charged by their length before they run (spec/abi-v1.md §7.2, rule 3);
 *  - every memory's maximum becomes min(declared max, maxMemoryPages), every table's
 *    min(declared max, maxTableElements);
 *  - moveStart: the start section is dropped and the start function exported (through a fuel
 *    wrapper with initialFuel) as START_EXPORT, for the host to call right after instantiation.
 */
export function instrument(b, limits) {
  const m = parse(b);
  for (const name of [FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT, ...(limits.moveStart ? [START_EXPORT] : [])]) {
    if (exportNamed(m, name)) throw new WasmbinError('malformed', 'export section', `export name "${name}" is reserved by the pctl host`, 0);
  }
  const fuelIdx = m.impGlob + m.numGlobal;
  const depthIdx = fuelIdx + 1;
  const memFailIdx = fuelIdx + 2;

  // Block types for wrapping bodies of multi-value functions.
  const newTypes = [];
  const wrapType = new Map();
  for (const ti of m.funcs) {
    if (ti >= m.types.length) throw new WasmbinError('malformed', 'function section', `function uses type ${ti} of ${m.types.length}`, 0);
    const t = m.types[ti];
    if (t.results.length <= 1 || wrapType.has(ti)) continue;
    const want = { params: [], results: t.results };
    let found = m.types.findIndex((et) => typeEqual(et, want));
    if (found < 0) {
      const j = newTypes.findIndex((nt) => typeEqual(nt, want));
      if (j >= 0) found = m.types.length + j;
    }
    if (found < 0) {
      found = m.types.length + newTypes.length;
      newTypes.push(want);
    }
    wrapType.set(ti, found);
  }

  // Wrappers for the exports that start a crossing (defined functions only).
  const wrappers = [];
  const exports = m.exports.map((e) => ({ ...e }));
  m.exports.forEach((e, i) => {
    if (!limits.exportFuel.has(e.name) || e.kind !== KIND.func || e.index < m.impFuncs || e.index - m.impFuncs >= m.funcs.length) return;
    wrappers.push({ export: i, target: e.index, typ: m.funcs[e.index - m.impFuncs], fuel: limits.exportFuel.get(e.name) });
  });
  let startWrapper = null;
  if (limits.moveStart && m.hasStart) {
    const ft = funcType(m, m.startFunc);
    if (!ft || ft.params.length || ft.results.length) throw new WasmbinError('malformed', 'start section', `start function ${m.startFunc} must exist and have type () -> ()`, 0);
    // The start function may be an import; a wrapper works for both.
    let typ = m.types.findIndex((t) => t.params.length === 0 && t.results.length === 0);
    if (typ < 0) {
      const j = newTypes.findIndex((t) => t.params.length === 0 && t.results.length === 0);
      typ = j >= 0 ? m.types.length + j : m.types.length + newTypes.length;
      if (j < 0) newTypes.push({ params: [], results: [] });
    }
    startWrapper = { export: -1, target: m.startFunc, typ, fuel: limits.initialFuel };
    wrappers.push(startWrapper);
  }
  wrappers.forEach((w, j) => {
    const idx = m.impFuncs + m.funcs.length + j;
    if (w.export >= 0) exports[w.export].index = idx;
    else exports.push({ name: START_EXPORT, kind: KIND.func, index: idx });
  });
  const typeOf = (ti) => (ti < m.types.length ? m.types[ti] : newTypes[ti - m.types.length]);

  const ins = { m, fuel: fuelIdx, depth: depthIdx, memFail: memFailIdx, maxDepth: limits.maxDepth, wrapType };
  const out = new Out(b.length + (b.length >> 2) + 64);
  out.bytes(b.subarray(0, 8));
  let wroteGlobals = false;
  let wroteExports = false;
  let wroteTypes = false;

  const emitGlobals = (existing) => {
    const body = new Out(64);
    let n = 0;
    let rest = new Uint8Array(0);
    if (existing) {
      const r = new Reader(b, existing.start, existing.end, 'global section');
      n = r.u32();
      rest = b.subarray(r.pos, existing.end);
    }
    body.u32(n + 3);
    body.bytes(rest);
    body.byte(I64); body.byte(1); body.byte(0x42); body.s64(limits.initialFuel); body.byte(0x0b);
    body.bytes([I32, 1, 0x41, 0, 0x0b]);
    body.bytes([I32, 1, 0x41, 0, 0x0b]);
    out.section(SEC.global, body);
    wroteGlobals = true;
  };
  const emitExports = () => {
    const body = new Out(256);
    body.u32(exports.length + 3);
    for (const e of exports) {
      body.name(e.name);
      body.byte(e.kind);
      body.u32(e.index);
    }
    for (const [name, idx] of [[FUEL_EXPORT, fuelIdx], [DEPTH_EXPORT, depthIdx], [MEMFAIL_EXPORT, memFailIdx]]) {
      body.name(name);
      body.byte(KIND.global);
      body.u32(idx);
    }
    out.section(SEC.export, body);
    wroteExports = true;
  };
  const emitTypes = (existing) => {
    const body = new Out(64);
    let n = 0;
    let rest = new Uint8Array(0);
    if (existing) {
      const r = new Reader(b, existing.start, existing.end, 'type section');
      n = r.u32();
      rest = b.subarray(r.pos, existing.end);
    }
    body.u32(n + newTypes.length);
    body.bytes(rest);
    for (const t of newTypes) {
      body.byte(0x60);
      body.u32(t.params.length);
      body.bytes(t.params);
      body.u32(t.results.length);
      body.bytes(t.results);
    }
    out.section(SEC.type, body);
    wroteTypes = true;
  };
  const emitTables = () => {
    const body = new Out(16);
    body.u32(m.tables.length);
    for (const t of m.tables) {
      const max = t.hasMax ? Math.min(t.max, limits.maxTableElements) : limits.maxTableElements;
      body.byte(t.refType);
      body.byte(0x01);
      body.u32(t.min);
      body.u32(max);
    }
    out.section(SEC.table, body);
  };
  const emitMemories = (s) => {
    const r = new Reader(b, s.start, s.end, 'memory section');
    const n = r.u32();
    const body = new Out(16);
    body.u32(n);
    for (let i = 0; i < n; i++) {
      const lim = r.limits();
      const max = lim.hasMax ? Math.min(lim.max, limits.maxMemoryPages) : limits.maxMemoryPages;
      body.byte(0x01);
      body.u32(lim.min);
      body.u32(max);
    }
    out.section(SEC.memory, body);
  };

  for (const s of m.sections) {
    if (s.id !== SEC.custom) {
      if (!wroteTypes && newTypes.length > 0 && order(s.id) > order(SEC.type)) emitTypes(null);
      if (!wroteGlobals && order(s.id) > order(SEC.global)) emitGlobals(null);
      if (!wroteExports && order(s.id) > order(SEC.export)) emitExports();
    }
    switch (s.id) {
      case SEC.type:
        if (newTypes.length > 0) emitTypes(s);
        else {
          out.byte(s.id); out.u32(s.end - s.start); out.bytes(b.subarray(s.start, s.end));
          wroteTypes = true;
        }
        break;
      case SEC.global: emitGlobals(s); break;
      case SEC.export: emitExports(); break;
      case SEC.memory: emitMemories(s); break;
      case SEC.table:
        if (limits.maxTableElements) emitTables();
        else { out.byte(s.id); out.u32(s.end - s.start); out.bytes(b.subarray(s.start, s.end)); }
        break;
      case SEC.start:
        if (startWrapper) break; // moved to an export
        out.byte(s.id); out.u32(s.end - s.start); out.bytes(b.subarray(s.start, s.end));
        break;
      case SEC.function: {
        const body = new Out(m.funcs.length * 2 + 8);
        body.u32(m.funcs.length + wrappers.length);
        for (const t of m.funcs) body.u32(t);
        for (const w of wrappers) body.u32(w.typ);
        out.section(SEC.function, body);
        break;
      }
      case SEC.code: {
        const body = code(ins, b, s.start, s.end, wrappers.length);
        for (const w of wrappers) {
          const fb = new Out(32);
          fb.byte(0); // no locals
          fb.byte(0x42); fb.s64(w.fuel);
          fb.byte(0x24); fb.u32(fuelIdx);
          const nparams = typeOf(w.typ).params.length;
          for (let p = 0; p < nparams; p++) { fb.byte(0x20); fb.u32(p); }
          fb.byte(0x10); fb.u32(w.target);
          fb.byte(0x0b);
          body.u32(fb.n);
          body.bytes(fb.b.subarray(0, fb.n));
        }
        out.section(SEC.code, body);
        break;
      }
      case SEC.custom: {
        const r = new Reader(b, s.start, s.end, 'custom section');
        let name = '';
        try { name = r.name(); } catch { /* keep it */ }
        if (name.startsWith('.debug')) break;
        out.byte(s.id); out.u32(s.end - s.start); out.bytes(b.subarray(s.start, s.end));
        break;
      }
      default:
        out.byte(s.id); out.u32(s.end - s.start); out.bytes(b.subarray(s.start, s.end));
    }
  }
  if (!wroteTypes && newTypes.length > 0) emitTypes(null);
  if (!wroteGlobals) emitGlobals(null);
  if (!wroteExports) emitExports();
  if (wrappers.length > 0 && !m.sections.some((s) => s.id === SEC.code)) {
    throw new WasmbinError('malformed', 'code section', 'module exports functions but has no code section', 0);
  }
  return { bytes: out.result(), module: m };
}

// Rewrites the code section b[start:end].
function code(ins, b, start, end, extra) {
  const r = new Reader(b, start, end, 'code section');
  const n = r.u32();
  if (n !== ins.m.funcs.length) throw new WasmbinError('malformed', 'code section', `${n} bodies for ${ins.m.funcs.length} functions`, start);
  const out = new Out((end - start) + (end - start) / 2 + 64);
  out.u32(n + extra);
  const fb = new Out(1024);
  for (let i = 0; i < n; i++) {
    const size = r.u32();
    const bodyStart = r.pos;
    r.bytes(size);
    fb.n = 0;
    fn(ins, fb, b, bodyStart, bodyStart + size, i);
    out.u32(fb.n);
    out.bytes(fb.b.subarray(0, fb.n));
  }
  return out;
}

const KIND_RETURN = 1;
const KIND_LOOP = 2;
const KIND_GROW = 3;
const KIND_BULK_MEMORY = 4; // memory.fill/copy/init: charged n (bytes)
const KIND_BULK_TABLE = 5; // table.fill/copy/init: charged 128 n (elements)

/** Bulk-instruction charges of spec/abi-v1.md §7.2, rule 3 (a table element: 1 << 7 = 128). */
export const TABLE_ELEMENT_COST_SHIFT = 7;

// Rewrites one body (locals and expression) b[start:end] into out.
function fn(ins, out, b, start, end, index) {
  const where = `code section, function ${ins.m.impFuncs + index}`;
  const r = new Reader(b, start, end, where);
  const groups = r.u32();
  let numLocals = 0;
  for (let g = 0; g < groups; g++) {
    numLocals += r.u32();
    r.byte();
  }
  const localsEnd = r.pos;
  const t = ins.m.types[ins.m.funcs[index]];
  const scratch = t.params.length + numLocals; // the i32 local added for memory.grow and bulk charges
  let needScratch = false;

  // Pass 1: instruction boundaries of the instructions that get extra code, and the cost of each
  // straight part (the function's top level: counter 0; each loop body: its own counter).
  const costs = [0];
  const stack = [0]; // counter of each open frame
  const specials = []; // [kind, start, end, loopCounter]
  let bodyEnd = -1;
  while (r.pos < end) {
    const at = r.pos;
    const op = r.byte();
    costs[stack[stack.length - 1]]++;
    if (op === 0x02 || op === 0x04) {
      r.sleb(33);
      stack.push(stack[stack.length - 1]);
    } else if (op === 0x03) {
      r.sleb(33);
      costs.push(0);
      stack.push(costs.length - 1);
      specials.push([KIND_LOOP, at, r.pos, costs.length - 1]);
    } else if (op === 0x0b) {
      stack.pop();
      if (stack.length === 0) {
        bodyEnd = at;
        break;
      }
    } else {
      let bulk = 0;
      if (op === 0xfc) {
        const pr = new Reader(b, r.pos, end, where);
        const sub = pr.u32();
        if (sub === 8 || sub === 10 || sub === 11) bulk = KIND_BULK_MEMORY;
        else if (sub === 12 || sub === 14 || sub === 17) bulk = KIND_BULK_TABLE;
      }
      skipImmediates(r, op);
      if (op === 0x0f) specials.push([KIND_RETURN, at, r.pos, 0]);
      else if (op === 0x40) {
        needScratch = true;
        specials.push([KIND_GROW, at, r.pos, 0]);
      } else if (bulk) {
        needScratch = true;
        specials.push([bulk, at, r.pos, 0]);
      }
    }
  }
  if (bodyEnd < 0 || r.pos !== end) throw new WasmbinError('malformed', where, 'function body does not end with its final `end`', r.pos);

  // Pass 2: emit.
  if (needScratch) {
    if (numLocals + t.params.length >= 50000) throw new WasmbinError('malformed', where, 'too many locals', start);
    out.u32(groups + 1);
    const rr = new Reader(b, start, end, where);
    rr.u32();
    out.bytes(b.subarray(rr.pos, localsEnd));
    out.byte(1);
    out.byte(I32);
  } else {
    out.bytes(b.subarray(start, localsEnd));
  }
  depthEnter(ins, out);
  charge(ins, out, costs[0]);
  out.byte(0x02); // block with the function's results
  if (t.results.length === 0) out.byte(0x40);
  else if (t.results.length === 1) out.byte(t.results[0]);
  else out.s64(ins.wrapType.get(ins.m.funcs[index]));
  let pos = localsEnd;
  for (const [kind, s, e, counter] of specials) {
    out.bytes(b.subarray(pos, s));
    if (kind === KIND_RETURN) {
      depthLeave(ins, out);
      out.bytes(b.subarray(s, e));
    } else if (kind === KIND_LOOP) {
      out.bytes(b.subarray(s, e));
      charge(ins, out, costs[counter]);
    } else if (kind === KIND_BULK_MEMORY || kind === KIND_BULK_TABLE) {
      chargeBulk(ins, out, scratch, kind === KIND_BULK_TABLE);
      out.bytes(b.subarray(s, e));
    } else {
      out.bytes(b.subarray(s, e));
      out.byte(0x22); out.u32(scratch); // local.tee scratch
      out.bytes([0x41, 0x7f, 0x46, 0x04, 0x40, 0x41, 0x01, 0x24]); // i32.const -1, i32.eq, if, i32.const 1, global.set
      out.u32(ins.memFail);
      out.byte(0x0b); out.byte(0x20); out.u32(scratch); // end, local.get scratch
    }
    pos = e;
  }
  out.bytes(b.subarray(pos, bodyEnd)); // all but the final end
  out.byte(0x0b); // end of the wrapper block
  depthLeave(ins, out);
  out.byte(0x0b); // end of function
}

function charge(ins, out, cost) {
  if (cost < 1) cost = 1;
  out.byte(0x23); out.u32(ins.fuel);
  out.byte(0x42); out.s64(cost);
  out.byte(0x7d); out.byte(0x24); out.u32(ins.fuel); // i64.sub, global.set
  out.byte(0x23); out.u32(ins.fuel);
  out.bytes([0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b]); // i64.const 0, i64.lt_s, if, unreachable, end
}

// Charges the length operand on top of the stack, which stays there for the bulk instruction:
// local.tee scratch; fuel -= extend_u(scratch) (tables: << 7); trap if fuel < 0.
function chargeBulk(ins, out, scratch, table) {
  out.byte(0x22); out.u32(scratch);
  out.byte(0x23); out.u32(ins.fuel);
  out.byte(0x20); out.u32(scratch);
  out.byte(0xad); // i64.extend_i32_u
  if (table) out.bytes([0x42, TABLE_ELEMENT_COST_SHIFT, 0x86]); // i64.const 7, i64.shl
  out.byte(0x7d); out.byte(0x24); out.u32(ins.fuel); // i64.sub, global.set
  out.byte(0x23); out.u32(ins.fuel);
  out.bytes([0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b]); // i64.const 0, i64.lt_s, if, unreachable, end
}

function depthEnter(ins, out) {
  out.byte(0x23); out.u32(ins.depth);
  out.bytes([0x41, 0x01, 0x6a, 0x24]); out.u32(ins.depth); // i32.const 1, i32.add, global.set
  out.byte(0x23); out.u32(ins.depth);
  out.byte(0x41); out.s64(ins.maxDepth);
  out.bytes([0x4b, 0x04, 0x40, 0x00, 0x0b]); // i32.gt_u, if, unreachable, end
}

function depthLeave(ins, out) {
  out.byte(0x23); out.u32(ins.depth);
  out.bytes([0x41, 0x01, 0x6b, 0x24]); out.u32(ins.depth); // i32.const 1, i32.sub, global.set
}
