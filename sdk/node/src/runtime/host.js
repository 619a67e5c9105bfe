// A host of spec/abi-v1.md on V8 (Node's built-in WebAssembly): load checks (size, magic,
// features, import profile, exports, memory), the limits of §7 through the same rewriting as the
// Go host (wasmbin.js), the lifecycle of §3, single and batch partition calls, and errors that
// name the plugin and the failure class with the Go runtime's words (runtime/errors.go).

import { createHash } from 'node:crypto';
import { instrument, WasmbinError, KIND, kindName, typeString, typeEqual, funcType, memoryAt, exportNamed, FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT, START_EXPORT } from './wasmbin.js';
import { wasiImports, WASI_MODULE, WASI_FUNCS, ProcExit, FuelExhausted } from './wasi.js';

/** Limits and ABI constants (spec/abi-v1.md §1.3, §7), the Go runtime's defaults. */
export const LIMITS = Object.freeze({
  maxModuleBytes: 8 << 20,
  maxMemoryPages: 512,
  maxTableElements: 131072,
  maxCallDepth: 1000,
  fuel: 1n << 31n,
  initFuel: 1n << 33n,
  bufferBytes: 1 << 20,
  maxBatchKeys: 4096,
  maxKey: 65536,
  maxConfig: 65536,
  maxMetadata: 65536,
  maxPartitions: 2147483647,
});

export const ABI_VERSION = 1;

/** Failure classes: the phrases of the Go runtime's sentinel errors. */
export const CLASS = Object.freeze({
  notWasm: 'not a WebAssembly module',
  tooLarge: 'module too large',
  invalid: 'invalid WebAssembly module',
  feature: 'unsupported WebAssembly feature',
  missingExport: 'missing export',
  badSignature: 'export has the wrong signature',
  forbiddenImport: 'forbidden import',
  abi: 'unsupported ABI version',
  metadata: 'invalid plugin metadata',
  buffer: 'plugin did not provide a usable key buffer',
  configRejected: 'plugin rejected its configuration',
  configUnsupported: 'plugin takes no configuration',
  configTooLarge: 'configuration too large',
  keyTooLong: 'key too long',
  badN: 'invalid partition count',
  timeLimit: 'time limit exceeded',
  memoryLimit: 'memory limit exceeded',
  tableLimit: 'table limit exceeded',
  callDepth: 'call stack exhausted',
  trap: 'plugin trapped',
  exit: 'plugin exited',
  outOfRange: 'plugin returned a partition out of range',
  code: 'plugin returned an error code',
});

const CODE_NAMES = { [-1]: 'PCTL_E_INVALID', [-2]: 'PCTL_E_CONFIG', [-3]: 'PCTL_E_UNSUPPORTED', [-4]: 'PCTL_E_BUFFER', [-5]: 'PCTL_E_INTERNAL' };
export function codeName(c) { return CODE_NAMES[c] ?? `unknown error code ${c}`; }

const short = (d) => d.slice(0, 12);

/** A module refused at load (exit status 2). */
export class LoadError extends Error {
  constructor(source, digest, cls, detail) {
    let who = source || 'module';
    if (digest) who += ` (sha256:${short(digest)})`;
    super(detail ? `${who}: ${cls}: ${detail}` : `${who}: ${cls}`);
    this.cls = cls;
  }
}

/** A failed call into a plugin (exit status 1). */
export class CallError extends Error {
  constructor(digest, name, op, cls, detail, code) {
    let s = `plugin ${name} (sha256:${short(digest)}): ${op}: ${cls}`;
    if (cls === CLASS.code) s += ` ${codeName(code)}`;
    if (cls === CLASS.exit) s += ` with code ${code}`;
    if (detail) s += `: ${detail}`;
    super(s);
    this.cls = cls;
    this.op = op;
    this.detail = detail;
    this.code = code;
  }
}

/** An error of the caller's input (exit status 2): bad n, key too long. */
export class UsageError extends Error {}

const ABI_EXPORTS = [
  ['pctl_abi_version', true, [], [0x7f]],
  ['pctl_key_buffer', true, [0x7f], [0x7f]],
  ['pctl_partition', true, [0x7f, 0x7f], [0x7f]],
  ['_initialize', false, [], []],
  ['pctl_configure', false, [0x7f], [0x7f]],
  ['pctl_metadata', false, [], [0x7e]],
  ['pctl_partition_batch', false, [0x7f, 0x7f], [0x7f]],
  ['pctl_ancestry', false, [0x7f, 0x7f, 0x7f], [0x7f]],
].map(([name, required, params, results]) => ({ name, required, sig: { params, results } }));

const NAME_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;

function checkExports(m) {
  const has = {};
  const mem = exportNamed(m, 'memory');
  if (!mem) return [CLASS.missingExport, 'no export "memory": a pctl module exports its linear memory as "memory" (spec/abi-v1.md §2)'];
  if (mem.kind !== KIND.memory) return [CLASS.badSignature, `export "memory" is a ${kindName(mem.kind)}, not a memory`];
  for (const s of ABI_EXPORTS) {
    const e = exportNamed(m, s.name);
    if (!e) {
      if (s.required) {
        const hint = s.name === 'pctl_abi_version' ? '; is this a pctl partitioner?' : '';
        return [CLASS.missingExport, `no export "${s.name}" ${typeString(s.sig)} (spec/abi-v1.md §2)${hint}`];
      }
      continue;
    }
    if (e.kind !== KIND.func) return [CLASS.badSignature, `export "${s.name}" is a ${kindName(e.kind)}; want a function ${typeString(s.sig)}`];
    const t = funcType(m, e.index);
    if (!t) return [CLASS.invalid, `export "${s.name}" names function ${e.index}, which does not exist`];
    if (!typeEqual(t, s.sig)) return [CLASS.badSignature, `export "${s.name}" has signature ${typeString(t)}; spec/abi-v1.md §2 requires ${typeString(s.sig)}`];
    has[s.name] = true;
  }
  return [null, has];
}

// The structural checks of spec/abi-v1.md §7.3, in their order, with the Go host's words: the
// table limit, then the bounds of active element and data segments. Returns [class, detail] or [null].
function checkLoad(m, mem, maxTable) {
  let sum = 0;
  for (const [i, t] of m.tables.entries()) {
    if (t.min > maxTable) return [CLASS.tableLimit, `table ${i} declares ${t.min} initial elements; the limit is ${maxTable} (spec/abi-v1.md §7.3)`];
    sum += t.hasMax ? Math.min(t.max, maxTable) : maxTable;
  }
  if (sum > maxTable) return [CLASS.tableLimit, `${m.tables.length} tables could grow to ${sum} elements together; the limit is ${maxTable}: declare maxima that sum to at most the limit (spec/abi-v1.md §7.3)`];
  for (const [i, seg] of m.elements.entries()) {
    const t = m.tables[seg.index];
    if (!t) return [CLASS.invalid, `element segment ${i} initialises table ${seg.index}, which the module does not define`];
    if (!seg.offsetOK) return [CLASS.invalid, `element segment ${i}: the offset must be a constant i32.const (spec/abi-v1.md §7.3)`];
    if (seg.offset + seg.count > t.min) return [CLASS.invalid, `element segment ${i} writes elements [${seg.offset}, ${seg.offset + seg.count}) of table ${seg.index}, which has ${t.min}: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)`];
  }
  for (const [i, seg] of m.data.entries()) {
    const dm = memoryAt(m, seg.index);
    if (!dm) return [CLASS.invalid, `data segment ${i} initialises memory ${seg.index}, which the module does not define`];
    if (!seg.offsetOK) return [CLASS.invalid, `data segment ${i}: the offset must be a constant i32.const (spec/abi-v1.md §7.3)`];
    if (seg.offset + seg.count > dm.min * 65536) return [CLASS.invalid, `data segment ${i} writes bytes [${seg.offset}, ${seg.offset + seg.count}) of memory ${seg.index}, which has ${dm.min * 65536}: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)`];
  }
  return [null];
}

function firstLine(err) {
  const s = String(err?.message ?? err);
  const i = s.indexOf('\n');
  return i >= 0 ? s.slice(0, i) : s;
}

/**
 * A module checked and compiled once (size, magic, features, import profile, exports, initial
 * memory; rewritten for the limits of §7), from which any number of instances can be made: a
 * host discards an instance after a failed call (§3) and makes a fresh one from here.
 *
 * PluginModule.compile(bytes, { source }) throws LoadError. Immutable; safe to share.
 */
export class PluginModule {
  static compile(bytes, { source = '' } = {}) {
    const m = new PluginModule();
    m.source = source;
    m.compile(bytes);
    return Object.freeze(m);
  }

  compile(bytes) {
    const source = this.source;
    const fail = (cls, detail, digest = this.digest) => new LoadError(source, digest, cls, detail);
    if (bytes.length > LIMITS.maxModuleBytes) {
      throw fail(CLASS.tooLarge, `${bytes.length} bytes, the limit is ${LIMITS.maxModuleBytes} (spec/abi-v1.md §7); strip debug info (e.g. -ldflags=-s, -C strip=symbols) or shrink the module`, '');
    }
    if (bytes.length < 4 || bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) {
      throw fail(CLASS.notWasm, `the file starts with ${JSON.stringify(Buffer.from(bytes.subarray(0, 8)).toString('latin1'))}, not \\0asm; give the compiled .wasm binary (a .wat text file must be assembled first, e.g. wat2wasm)`, '');
    }
    this.digest = createHash('sha256').update(bytes).digest('hex');

    let inst;
    try {
      const exportFuel = new Map(ABI_EXPORTS.map((s) => [s.name, s.name === '_initialize' ? LIMITS.initFuel : LIMITS.fuel]));
      inst = instrument(bytes, { initialFuel: LIMITS.initFuel, maxDepth: LIMITS.maxCallDepth, exportFuel, maxMemoryPages: LIMITS.maxMemoryPages, maxTableElements: LIMITS.maxTableElements, moveStart: true });
    } catch (e) {
      if (e instanceof WasmbinError) throw fail(e.kind === 'unsupported' ? CLASS.feature : CLASS.invalid, e.message);
      throw e;
    }
    const m = inst.module;

    // Imports decide the profile (§6).
    this.profile = 'portable';
    for (const im of m.imports) {
      if (im.module !== WASI_MODULE) {
        throw fail(CLASS.forbiddenImport, `imports ${im.module}.${im.name} (a ${kindName(im.kind)}); portable modules import nothing and wasi-deterministic modules import only listed ${WASI_MODULE} functions (spec/abi-v1.md §6)`);
      }
      const wf = WASI_FUNCS[im.name];
      if (im.kind !== KIND.func || !Object.hasOwn(WASI_FUNCS, im.name)) {
        throw fail(CLASS.forbiddenImport, `imports ${im.module}.${im.name}, which the wasi-deterministic profile does not provide (allowed: ${Object.keys(WASI_FUNCS).sort().join(', ')}; spec/abi-v1.md §6.2)`);
      }
      if (!typeEqual(wf, im.type)) {
        throw fail(CLASS.forbiddenImport, `imports ${im.module}.${im.name} with signature ${typeString(im.type)}; the profile defines ${typeString(wf)}`);
      }
      this.profile = 'wasi-deterministic';
    }

    const [cls, has] = checkExports(m);
    if (cls) throw fail(cls, has);
    this.has = has;
    const memExp = exportNamed(m, 'memory');
    const mem = memoryAt(m, memExp.index);
    if (mem && mem.min > LIMITS.maxMemoryPages) {
      throw fail(CLASS.memoryLimit, `declares ${mem.min} initial memory pages (${Math.floor(mem.min / 16)} MiB); the limit is ${LIMITS.maxMemoryPages} pages (${LIMITS.maxMemoryPages / 16} MiB)`);
    }
    const [lcls, ldetail] = checkLoad(m, mem, LIMITS.maxTableElements);
    if (lcls) throw fail(lcls, ldetail);

    try {
      this.compiled = new WebAssembly.Module(inst.bytes);
    } catch (e) {
      throw fail(CLASS.invalid, firstLine(e));
    }
  }
}

/**
 * One prepared instance of a module (spec/abi-v1.md §3): instantiated, initialised, version
 * checked, metadata read, buffer obtained, configured. Not reentrant: one caller at a time.
 *
 * Open with Plugin.open(bytes, { source, config }), or Plugin.instantiate(module, { config }) for
 * a PluginModule compiled before; both throw LoadError.
 */
export class Plugin {
  static open(bytes, { source = '', config = new Uint8Array(0), wasiTime, wasiSeed } = {}) {
    return Plugin.instantiate(PluginModule.compile(bytes, { source }), { config, wasiTime, wasiSeed });
  }

  static instantiate(module, { config = new Uint8Array(0), wasiTime, wasiSeed } = {}) {
    const p = new Plugin();
    p.load(module, config, { time: wasiTime, seed: wasiSeed });
    return p;
  }

  load(module, config, wasiOpts) {
    const source = module.source;
    this.module = module;
    this.digest = module.digest;
    this.profile = module.profile;
    this.name = 'unnamed';
    const has = module.has;
    this.has = has;
    const compiled = module.compiled;
    const fail = (cls, detail, digest = this.digest) => new LoadError(source, digest, cls, detail);

    // Instantiate and prepare (§3). A failure here is a refusal at load.
    const asLoad = (e) => {
      if (e instanceof CallError) {
        const code = e.cls === CLASS.exit ? `with code ${e.code}: ` : e.cls === CLASS.code ? `${codeName(e.code)}: ` : '';
        return fail(e.cls, `${code}while loading: ${e.op}: ${e.detail}`);
      }
      return e;
    };
    let imports = {};
    if (this.profile === 'wasi-deterministic') {
      const w = wasiImports(() => this.memory, wasiOpts, () => this.fuel);
      imports = { [WASI_MODULE]: w[WASI_MODULE] };
    }
    let instance;
    try {
      instance = new WebAssembly.Instance(compiled, imports);
    } catch (e) {
      throw fail(CLASS.trap, `while loading: instantiate: ${firstLine(e)}`);
    }
    const ex = instance.exports;
    this.exports = ex;
    this.memory = ex.memory;
    this.fuel = ex[FUEL_EXPORT];
    this.depth = ex[DEPTH_EXPORT];
    this.memFail = ex[MEMFAIL_EXPORT];
    this.fnPartition = ex.pctl_partition;
    this.fnBatch = has.pctl_partition_batch ? ex.pctl_partition_batch : null;
    this.u8 = null;
    this.dv = null;
    try {
      if (ex[START_EXPORT]) this.call('start', ex[START_EXPORT]);
      if (has._initialize) this.call('_initialize', ex._initialize);
      const ver = this.call('pctl_abi_version', ex.pctl_abi_version);
      if (ver !== ABI_VERSION) {
        throw fail(CLASS.abi, `module declares ABI version ${ver}; this host supports ${ABI_VERSION}; upgrade pctl or rebuild the module against spec/abi-v1.md`);
      }
      this.metadata = { name: 'unnamed', version: '0.0.0' };
      if (has.pctl_metadata) {
        const res = BigInt.asUintN(64, this.call('pctl_metadata', ex.pctl_metadata));
        const ptr = Number(res >> 32n);
        const len = Number(res & 0xffffffffn);
        if (len > LIMITS.maxMetadata) throw fail(CLASS.metadata, `pctl_metadata returned ${len} bytes; the limit is ${LIMITS.maxMetadata}`);
        this.view();
        if (ptr + len > this.u8.length) throw fail(CLASS.metadata, `pctl_metadata points at [${ptr}, ${ptr + len}), outside memory (${this.u8.length} bytes)`);
        const md = parseMetadata(this.u8.subarray(ptr, ptr + len));
        if (typeof md === 'string') throw fail(CLASS.metadata, md);
        this.metadata = md;
        this.name = md.name;
      }
      if ((this.metadata.properties ?? []).includes('ancestry') && !has.pctl_ancestry) {
        throw fail(CLASS.metadata, 'metadata declares the "ancestry" property but the module does not export pctl_ancestry');
      }
      const buf = this.call('pctl_key_buffer', ex.pctl_key_buffer, LIMITS.bufferBytes) >>> 0;
      this.view();
      if (buf === 0 || buf + LIMITS.bufferBytes > this.u8.length) {
        throw fail(CLASS.buffer, `pctl_key_buffer(${LIMITS.bufferBytes}) returned ${buf}; memory is ${this.u8.length} bytes; the module must return a non-zero address of a region of that size inside memory (spec/abi-v1.md §2.2)`);
      }
      this.buf = buf;
      this.bufSize = LIMITS.bufferBytes;
      if (config.length > LIMITS.maxConfig) throw fail(CLASS.configTooLarge, `${config.length} bytes; the limit is ${LIMITS.maxConfig}`);
      if (has.pctl_configure) {
        this.view();
        this.u8.set(config, this.buf);
        const code = this.call('pctl_configure', ex.pctl_configure, config.length);
        if (code !== 0) {
          const shown = JSON.stringify(Buffer.from(config.subarray(0, 80)).toString('latin1'));
          if (code === -2) throw fail(CLASS.configRejected, `config of ${config.length} bytes ${shown}; check the --config values against the plugin's documentation`);
          throw fail(CLASS.code, `pctl_configure returned ${codeName(code)}: config of ${config.length} bytes ${shown}`);
        }
      } else if (config.length > 0) {
        throw fail(CLASS.configUnsupported, `it does not export pctl_configure, so its topic config must be empty (got ${config.length} bytes)`);
      }
    } catch (e) {
      throw asLoad(e);
    }
  }

  // Re-derives the memory views if memory grew (V8 replaces the ArrayBuffer).
  view() {
    const b = this.memory.buffer;
    if (!this.u8 || this.u8.buffer !== b) {
      this.u8 = new Uint8Array(b);
      this.dv = new DataView(b);
      this.nb = Buffer.from(b); // a Node Buffer view of the same memory, for string keys
    }
  }

  call(op, fn, ...args) {
    try {
      return fn(...args);
    } catch (e) {
      throw this.fail(op, e);
    }
  }

  // Classifies an exception thrown by a call into the guest, in the Go host's order.
  fail(op, err) {
    const mk = (cls, detail, code) => new CallError(this.digest, this.name, op, cls, detail, code);
    if (err instanceof ProcExit) return mk(CLASS.exit, `proc_exit(${err.code}); a partitioner must return, not exit`, err.code);
    if (!(err instanceof WebAssembly.RuntimeError) && !(err instanceof RangeError) && !(err instanceof FuelExhausted)) throw err; // a host bug
    if (this.fuel && this.fuel.value < 0n) {
      const init = op === 'start' || op === '_initialize';
      return mk(CLASS.timeLimit, `used its whole work budget of ${init ? LIMITS.initFuel : LIMITS.fuel} units (spec/abi-v1.md §7.2, about ${init ? 4 : 1}s of work): it loops forever, does unbounded work or is far too slow for a partitioner`);
    }
    if ((this.depth && (this.depth.value >>> 0) > LIMITS.maxCallDepth) || (err instanceof RangeError && /call stack/i.test(err.message))) {
      return mk(CLASS.callDepth, `nested more than ${LIMITS.maxCallDepth} calls (unbounded recursion?)`);
    }
    const memBytes = this.memory.buffer.byteLength;
    if ((this.memFail && this.memFail.value !== 0) || memBytes >= LIMITS.maxMemoryPages * 65536) {
      return mk(CLASS.memoryLimit, `trapped after memory.grow was refused at ${memBytes / 65536} of at most ${LIMITS.maxMemoryPages} pages (${LIMITS.maxMemoryPages / 16} MiB): ${firstLine(err)}`);
    }
    return mk(CLASS.trap, firstLine(err));
  }

  resultError(op, r, n, index) {
    const where = index >= 0 ? `key ${index} of the batch` : '';
    if (r >= n) return new CallError(this.digest, this.name, op, CLASS.outOfRange, `${where ? where + ': ' : ''}returned ${r} for n=${n}; a partition must be in [0, n)`);
    return new CallError(this.digest, this.name, op, CLASS.code, where, r);
  }

  /** The partition of one key (a Uint8Array) with a single pctl_partition call. */
  partition(key, n) {
    this.view();
    this.u8.set(key, this.buf);
    const r = this.call('pctl_partition', this.fnPartition, key.length, n);
    if (r >= 0 && r < n) return r;
    throw this.resultError('pctl_partition', r, n, -1);
  }

  /**
   * The partition of a string key, its UTF-8 bytes written straight into the buffer (no copy in
   * between: what a producer of string keys pays per record). Throws UsageError for a key over
   * PCTL_MAX_KEY bytes.
   */
  partitionString(key, n) {
    this.view();
    if (key.length > LIMITS.maxKey / 3) {
      const bytes = Buffer.byteLength(key, 'utf8');
      if (bytes > LIMITS.maxKey) throw new UsageError(`${CLASS.keyTooLong}: ${bytes} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    }
    const len = this.nb.utf8Write(key, this.buf);
    const r = this.call('pctl_partition', this.fnPartition, len, n);
    if (r >= 0 && r < n) return r;
    throw this.resultError('pctl_partition', r, n, -1);
  }

  /**
   * Partitions of many keys, into out (an Int32Array) from index `at`; batch calls when the module
   * exports pctl_partition_batch (at most maxBatchKeys keys and the buffer's bytes per crossing),
   * single calls otherwise.
   */
  partitionAll(keys, n, out = new Int32Array(keys.length)) {
    if (n < 1 || n > LIMITS.maxPartitions || !Number.isInteger(n)) throw new UsageError(`${CLASS.badN}: ${n} is outside [1, ${LIMITS.maxPartitions}]`);
    for (let i = 0; i < keys.length; i++) {
      if (keys[i].length > LIMITS.maxKey) throw new UsageError(`${CLASS.keyTooLong}: key ${i} has ${keys[i].length} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    }
    if (!this.fnBatch) {
      for (let i = 0; i < keys.length; i++) out[i] = this.partition(keys[i], n);
      return out;
    }
    let i = 0;
    while (i < keys.length) {
      let j = i;
      let bytes = 0;
      while (j < keys.length && j - i < LIMITS.maxBatchKeys && 4 * (j - i + 1) + bytes + keys[j].length <= this.bufSize) {
        bytes += keys[j].length;
        j++;
      }
      this.batch(keys, i, j, n, out);
      i = j;
    }
    return out;
  }

  /**
   * partitionAll for keys that are strings (UTF-8) or Uint8Arrays, each string encoded straight
   * into the module's buffer at its place in the §2.4 layout (no copy in between, as
   * partitionString does for one key). A crossing takes up to maxBatchKeys keys: the lengths'
   * slots for all of them are reserved first; a key whose bytes do not fit what is left of the
   * buffer ends the crossing early, and the keys written so far move down to follow the lengths
   * actually used. Memory views are re-derived before every crossing (a call may grow memory,
   * which replaces memory.buffer). Throws UsageError for a bad n or a key over PCTL_MAX_KEY bytes.
   */
  partitionKeys(keys, n, out = new Int32Array(keys.length)) {
    if (n < 1 || n > LIMITS.maxPartitions || !Number.isInteger(n)) throw new UsageError(`${CLASS.badN}: ${n} is outside [1, ${LIMITS.maxPartitions}]`);
    if (!this.fnBatch) {
      for (let i = 0; i < keys.length; i++) {
        const k = keys[i];
        if (typeof k === 'string') {
          if (k.length > LIMITS.maxKey / 3) checkStringKey(k, i);
          out[i] = this.partitionString(k, n);
        } else {
          if (k.length > LIMITS.maxKey) throw keyTooLong(i, k.length);
          out[i] = this.partition(k, n);
        }
      }
      return out;
    }
    const buf = this.buf;
    const end = buf + this.bufSize;
    let i = 0;
    while (i < keys.length) {
      this.view();
      const { nb, dv } = this;
      const slots = Math.min(keys.length - i, LIMITS.maxBatchKeys);
      const data = buf + 4 * slots;
      let off = data;
      let k = 0;
      for (; k < slots; k++) {
        const key = keys[i + k];
        let len;
        if (typeof key === 'string') {
          if (key.length > LIMITS.maxKey / 3) checkStringKey(key, i + k);
          if (end - off < 3 * key.length && end - off < Buffer.byteLength(key, 'utf8')) break; // does not fit: the next crossing
          len = nb.utf8Write(key, off);
        } else {
          len = key.length;
          if (len > LIMITS.maxKey) throw keyTooLong(i + k, len);
          if (end - off < len) break;
          nb.set(key, off);
        }
        dv.setUint32(buf + 4 * k, len, true);
        off += len;
      }
      if (k < slots) nb.copyWithin(buf + 4 * k, data, off); // fewer keys than slots: the keys follow the k lengths
      this.crossing(k, i, n, out);
      i += k;
    }
    return out;
  }

  /**
   * @deprecated since 0.1.0: partitionKeys, the same method (it takes byte keys as well as
   * strings); this name stays for callers of `@pctl/sdk/runtime`.
   */
  partitionStrings(keys, n, out = new Int32Array(keys.length)) {
    return this.partitionKeys(keys, n, out);
  }

  // The pctl_partition_batch call of count keys already in the buffer; results into out from at.
  crossing(count, at, n, out) {
    const status = this.call('pctl_partition_batch', this.fnBatch, count, n);
    // A status is 0 or a negative error code; a positive one is undefined: an unknown error code
    // (spec/abi-v1.md §2.4), never "out of range".
    if (status !== 0) throw new CallError(this.digest, this.name, 'pctl_partition_batch', CLASS.code, 'the batch as a whole failed', status);
    this.view();
    for (let k = 0; k < count; k++) {
      const r = this.dv.getInt32(this.buf + 4 * k, true);
      if (r < 0 || r >= n) throw this.resultError('pctl_partition_batch', r, n, k);
      out[at + k] = r;
    }
  }

  // One pctl_partition_batch crossing for keys[i:j] (§2.4 layout).
  batch(keys, i, j, n, out) {
    const count = j - i;
    this.view();
    const { u8, dv } = this;
    let off = this.buf + 4 * count;
    for (let k = 0; k < count; k++) {
      const key = keys[i + k];
      dv.setUint32(this.buf + 4 * k, key.length, true);
      u8.set(key, off);
      off += key.length;
    }
    this.crossing(count, i, n, out);
  }
}

const keyTooLong = (i, bytes) => new UsageError(`${CLASS.keyTooLong}: key ${i} has ${bytes} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);

// A string key of more than maxKey/3 UTF-16 units may have more than maxKey bytes of UTF-8.
function checkStringKey(key, i) {
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes > LIMITS.maxKey) throw keyTooLong(i, bytes);
}

/** How deep arrays and objects may nest in a metadata document (spec/abi-v1.md §2.6, rule 3). */
export const MAX_METADATA_DEPTH = 32;

// How deep arrays and objects nest in b, read as JSON (brackets inside strings do not count).
function jsonDepth(b) {
  let depth = 0;
  let max = 0;
  let inString = false;
  let escaped = false;
  for (const c of b) {
    if (inString) {
      if (escaped) escaped = false;
      else if (c === 0x5c) escaped = true;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) max = Math.max(max, ++depth);
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return max;
}

// The rules of spec/abi-v1.md §2.6, which every host applies alike.
function parseMetadata(bytes) {
  const notJSON = (why) => `pctl_metadata returned ${bytes.length} bytes that are not a JSON object: ${why}`;
  let text;
  try {
    // ignoreBOM: keep a byte-order mark, so that JSON.parse refuses it as every host does.
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return notJSON('not valid UTF-8 (spec/abi-v1.md §2.6)');
  }
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return notJSON('it starts with a byte-order mark (spec/abi-v1.md §2.6)');
  const depth = jsonDepth(bytes);
  if (depth > MAX_METADATA_DEPTH) return notJSON(`arrays and objects nest ${depth} deep; at most ${MAX_METADATA_DEPTH} are allowed (spec/abi-v1.md §2.6)`);
  let md;
  try {
    md = JSON.parse(text);
  } catch (e) {
    return notJSON(e.message);
  }
  if (md === null || typeof md !== 'object' || Array.isArray(md)) return notJSON('not an object');
  const present = (k) => Object.hasOwn(md, k) && md[k] !== null;
  if (present('name') && typeof md.name !== 'string') return 'metadata "name" must be a string (spec/abi-v1.md §2.6)';
  if (present('version') && typeof md.version !== 'string') return 'metadata "version" must be a string (spec/abi-v1.md §2.6)';
  if (present('description') && typeof md.description !== 'string') return 'metadata "description" must be a string (spec/abi-v1.md §2.6)';
  if (present('properties') && (!Array.isArray(md.properties) || md.properties.some((p) => typeof p !== 'string'))) {
    return 'metadata "properties" must be a list of strings (spec/abi-v1.md §2.6)';
  }
  const name = present('name') ? md.name : '';
  if (!NAME_RE.test(name)) return `metadata name ${JSON.stringify(name)} must match [a-z0-9][a-z0-9-]{0,62} (spec/abi-v1.md §2.6)`;
  if (!present('version') || md.version === '') return 'metadata has no "version" (spec/abi-v1.md §2.6)';
  return { name, version: md.version, description: present('description') ? md.description : undefined, properties: present('properties') ? md.properties : [] };
}
