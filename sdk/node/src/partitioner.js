// Partitioners: a WebAssembly module of spec/abi-v1.md run on Node's built-in WebAssembly through
// the SDK's runtime (./runtime, the same code the conformance host runs), usable offline to answer
// "which partition does this key go to?" and used by the producer for every keyed record.

import { readFile } from 'node:fs/promises';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Plugin, PluginModule, LoadError, CallError, UsageError, LIMITS } from './runtime/host.js';
import { encodeConfig, ConfigError } from './runtime/config.js';
import { BadRequestError, PluginError } from './errors.js';

const encoder = new TextEncoder();
const builtinDir = new URL('../builtin/', import.meta.url);
let builtinList = null;

/** The names of the built-in partitioners embedded in the package, sorted. */
export function builtinNames() {
  if (!builtinList) {
    builtinList = readdirSync(builtinDir).filter((f) => f.endsWith('.wasm')).map((f) => f.slice(0, -5)).sort();
  }
  return [...builtinList];
}

/** A key as bytes: a string is UTF-8; Uint8Array (Buffer) as it is. */
export function keyBytes(key) {
  if (typeof key === 'string') return encoder.encode(key);
  if (key instanceof Uint8Array) return key;
  if (key instanceof ArrayBuffer) return new Uint8Array(key);
  throw new BadRequestError(`a key is a string or a Uint8Array, not ${key === null ? 'null' : typeof key}; a keyless record never reaches a partitioner`);
}

/**
 * Canonical config bytes (spec/abi-v1.md §2.5) from what a caller may give: nothing (the empty
 * config), raw bytes (used as they are), an object {K: V} or an array of "K=V" strings.
 */
export function configBytes(config) {
  if (config === undefined || config === null) return new Uint8Array(0);
  if (config instanceof Uint8Array) return config;
  try {
    if (Array.isArray(config)) return encodeConfig(config.map(String));
    if (typeof config === 'object') return encodeConfig(Object.entries(config).map(([k, v]) => `${k}=${v}`));
  } catch (e) {
    if (e instanceof ConfigError) throw new BadRequestError(e.message, { cause: e });
    throw e;
  }
  throw new BadRequestError(`a partitioner config is an object {K: V}, an array of "K=V" strings or the config bytes, not ${typeof config}`);
}

function toBytes(b) {
  if (b instanceof Uint8Array) return b;
  if (b instanceof ArrayBuffer) return new Uint8Array(b);
  throw new BadRequestError('module bytes must be a Uint8Array, Buffer or ArrayBuffer');
}

function shortDigest(d) { return d ? `sha256:${d.slice(0, 12)}` : 'module'; }

/** Maps the runtime's errors to the SDK's (PluginError names the plugin and the failure class). */
function mapRuntimeError(e, who) {
  if (e instanceof LoadError || e instanceof CallError) {
    return new PluginError(e.message, { plugin: who.name, digest: who.digest, failure: e.cls, cause: e });
  }
  if (e instanceof UsageError) return new BadRequestError(e.message, { cause: e });
  return e;
}

/**
 * A partitioner: one WebAssembly module and one config. `partition(key, n)` returns the partition
 * in [0, n) that every pctl host (Go, Node, Python, Java, the broker) computes for the same module,
 * config, key and n.
 *
 * Not safe for reentrant use (there is none in JavaScript: calls are synchronous). After a failed
 * call the instance is discarded and the next call runs on a fresh one (spec/abi-v1.md §3).
 *
 *   const p = await Partitioner.load('plugins/builtin/kafka-murmur2.wasm');
 *   p.partition('user-1', 12);          // -> 0..11
 */
export class Partitioner {
  /**
   * Loads a module from a file path (string or file: URL) or from its bytes. Options: `config`
   * (object {K: V}, array of "K=V", or the config bytes; default none), `source` (the name used in
   * error messages; default the path). Throws PluginError (the module is refused) or
   * BadRequestError (a bad config flag).
   */
  static async load(source, opts = {}) {
    if (typeof source === 'string' || source instanceof URL) {
      const path = source instanceof URL ? fileURLToPath(source) : source;
      let bytes;
      try {
        bytes = await readFile(path);
      } catch (e) {
        throw new BadRequestError(`read plugin ${path}: ${e.message}`, { cause: e });
      }
      return Partitioner.fromBytes(bytes, { source: path, ...opts });
    }
    return Partitioner.fromBytes(source, opts);
  }

  /** Like load, synchronously (a path is read with readFileSync). */
  static loadSync(source, opts = {}) {
    if (typeof source === 'string' || source instanceof URL) {
      const path = source instanceof URL ? fileURLToPath(source) : source;
      let bytes;
      try {
        bytes = readFileSync(path);
      } catch (e) {
        throw new BadRequestError(`read plugin ${path}: ${e.message}`, { cause: e });
      }
      return Partitioner.fromBytes(bytes, { source: path, ...opts });
    }
    return Partitioner.fromBytes(source, opts);
  }

  /**
   * A built-in partitioner by name ("kafka-murmur2", "jump", ...; see builtinNames()): its module
   * is embedded in the package (builtin/, byte for byte plugins/builtin of the repository), so this
   * needs no file and no broker. Options: `config`. Throws BadRequestError for an unknown name.
   */
  static builtin(name, opts = {}) {
    if (!builtinNames().includes(name)) {
      throw new BadRequestError(`${JSON.stringify(name)} is not a built-in partitioner; the built-ins are ${builtinNames().join(', ')}`);
    }
    return Partitioner.fromBytes(readFileSync(new URL(`${name}.wasm`, builtinDir)), { source: `built-in ${name}`, ...opts });
  }

  /** A partitioner of module bytes (Uint8Array, Buffer or ArrayBuffer), compiled synchronously. */
  static fromBytes(bytes, { config, source = '' } = {}) {
    const b = toBytes(bytes);
    let module;
    try {
      module = PluginModule.compile(b, { source });
    } catch (e) {
      throw mapRuntimeError(e, { name: source || 'module', digest: '' });
    }
    return new Partitioner(module, configBytes(config));
  }

  /** @private use load, loadSync or fromBytes. */
  constructor(module, config) {
    this.module = module;
    this.config = config;
    this.plugin = null;
    this.instance(); // load-time refusals (config rejected, bad ABI version...) surface here
  }

  /** The module's SHA-256 (64 hex digits): its identity. */
  get digest() { return this.module.digest; }
  /** "portable" or "wasi-deterministic" (spec/abi-v1.md §6). */
  get profile() { return this.module.profile; }
  /** The module's metadata (spec/abi-v1.md §2.6): {name, version, description?, properties?}. */
  get metadata() { return this.instance().metadata; }
  /** The metadata name ("unnamed" without metadata). */
  get name() { return this.metadata.name; }

  instance() {
    if (this.plugin) return this.plugin;
    try {
      this.plugin = Plugin.instantiate(this.module, { config: this.config });
    } catch (e) {
      throw mapRuntimeError(e, { name: this.module.source || shortDigest(this.module.digest), digest: this.module.digest });
    }
    return this.plugin;
  }

  /**
   * The partition of one key (string: UTF-8 bytes; or Uint8Array) among n (1 to 2^31-1). An
   * empty key is a key. Throws BadRequestError for a bad n or a key over 65536 bytes, PluginError
   * when the module fails (nothing is returned then, never a made-up partition).
   */
  partition(key, n) {
    if ((n | 0) !== n || n < 1) checkN(n); // n is an int32 >= 1: in [1, 2^31-1]
    const p = this.plugin ?? this.instance();
    if (typeof key === 'string') {
      try {
        return p.partitionString(key, n);
      } catch (e) {
        if (!(e instanceof UsageError)) this.plugin = null;
        throw mapRuntimeError(e, { name: p.name, digest: p.digest });
      }
    }
    const k = keyBytes(key);
    if (k.length > LIMITS.maxKey) throw new BadRequestError(`key too long: ${k.length} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    try {
      return p.partition(k, n);
    } catch (e) {
      this.plugin = null;
      throw mapRuntimeError(e, { name: p.name, digest: p.digest });
    }
  }

  /**
   * The partitions of many keys, in order, as an Int32Array; one crossing per 4096 keys when the
   * module exports pctl_partition_batch. All or nothing: on a failure it throws.
   */
  partitionMany(keys, n) {
    checkN(n);
    const p = this.instance();
    try {
      return p.partitionKeys(keys.map(stringOrBytes), n);
    } catch (e) {
      if (!(e instanceof UsageError) && !(e instanceof BadRequestError)) this.plugin = null; // a bad key is the caller's
      throw mapRuntimeError(e, { name: p.name, digest: p.digest });
    }
  }
}

// A batch goes to the host's partitionKeys, which encodes each string key straight into the
// module's buffer at its place in the batch layout (spec/abi-v1.md §2.4) and copies byte keys there
// (1.2x faster than partitionAll for byte keys too: one pass, no separate length check). Before
// it, the keys went through a reused 1 MiB arena, each key a view of it, that the host then copied
// into the buffer (144 ns/key for kafka-murmur2 on 16-byte keys, the native function 68); before
// that, one Uint8Array per key (TextEncoder#encode: 735 to 2,100 ns a key).
const stringOrBytes = (k) => (typeof k === 'string' ? k : keyBytes(k));

function checkN(n) {
  if (!Number.isInteger(n) || n < 1 || n > LIMITS.maxPartitions) {
    throw new BadRequestError(`invalid partition count: ${n} is not an integer in [1, ${LIMITS.maxPartitions}]`);
  }
}

/**
 * One-shot: the partition of `key` among `n` with the module at `source` (path or bytes). For
 * many keys, load a Partitioner once instead.
 */
export async function partition(source, key, n, opts) {
  return (await Partitioner.load(source, opts)).partition(key, n);
}
