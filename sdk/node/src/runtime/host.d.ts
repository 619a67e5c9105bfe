// TypeScript declarations of `@pctl/sdk/runtime` (src/runtime/host.js): the host of
// spec/abi-v1.md on Node's built-in WebAssembly. The contract is spec/abi-v1.md; the errors carry
// the Go runtime's failure-class phrases (runtime/errors.go).
/// <reference types="node" />

/** Limits and ABI constants (spec/abi-v1.md §1.3, §7), the Go runtime's defaults. */
export const LIMITS: Readonly<{
  /** Largest module accepted, in bytes (8 MiB). */
  maxModuleBytes: number;
  /** Most 64 KiB memory pages an instance may have (512: 32 MiB). */
  maxMemoryPages: number;
  /** Most table elements, all tables together. */
  maxTableElements: number;
  /** Deepest call nesting. */
  maxCallDepth: number;
  /** Work budget of one call (fuel units, §7.2). */
  fuel: bigint;
  /** Work budget of the start function and `_initialize`. */
  initFuel: bigint;
  /** Size of the key buffer asked of pctl_key_buffer. */
  bufferBytes: number;
  /** Most keys in one pctl_partition_batch crossing. */
  maxBatchKeys: number;
  /** PCTL_MAX_KEY: the longest key, in bytes. */
  maxKey: number;
  /** Longest configuration, in bytes. */
  maxConfig: number;
  /** Longest metadata document, in bytes. */
  maxMetadata: number;
  /** Largest partition count n. */
  maxPartitions: number;
}>;

/** The ABI version this host supports (pctl_abi_version must return it). */
export const ABI_VERSION: 1;

/** Failure classes: the phrases of the Go runtime's sentinel errors, found in `LoadError#cls` and `CallError#cls`. */
export const CLASS: Readonly<{
  notWasm: 'not a WebAssembly module';
  tooLarge: 'module too large';
  invalid: 'invalid WebAssembly module';
  feature: 'unsupported WebAssembly feature';
  missingExport: 'missing export';
  badSignature: 'export has the wrong signature';
  forbiddenImport: 'forbidden import';
  abi: 'unsupported ABI version';
  metadata: 'invalid plugin metadata';
  buffer: 'plugin did not provide a usable key buffer';
  configRejected: 'plugin rejected its configuration';
  configUnsupported: 'plugin takes no configuration';
  configTooLarge: 'configuration too large';
  keyTooLong: 'key too long';
  badN: 'invalid partition count';
  timeLimit: 'time limit exceeded';
  memoryLimit: 'memory limit exceeded';
  tableLimit: 'table limit exceeded';
  callDepth: 'call stack exhausted';
  trap: 'plugin trapped';
  exit: 'plugin exited';
  outOfRange: 'plugin returned a partition out of range';
  code: 'plugin returned an error code';
}>;

/** One of the failure-class phrases of CLASS. */
export type FailureClass = (typeof CLASS)[keyof typeof CLASS];

/** The name of an ABI error code (-1 → "PCTL_E_INVALID", ... -5 → "PCTL_E_INTERNAL"; others "unknown error code c"). */
export function codeName(c: number): string;

/** A module refused at load (exit status 2). The message is "source (sha256:…): class: detail". */
export class LoadError extends Error {
  constructor(source: string, digest: string, cls: FailureClass, detail?: string);
  /** The failure class. */
  readonly cls: FailureClass;
}

/** A failed call into a plugin (exit status 1). The message is "plugin name (sha256:…): op: class…". */
export class CallError extends Error {
  constructor(digest: string, name: string, op: string, cls: FailureClass, detail?: string, code?: number);
  /** The failure class. */
  readonly cls: FailureClass;
  /** The call that failed: "pctl_partition", "pctl_partition_batch", "_initialize", ... */
  readonly op: string;
  readonly detail: string | undefined;
  /** The error code returned (CLASS.code) or the proc_exit status (CLASS.exit); undefined otherwise. */
  readonly code: number | undefined;
}

/** An error of the caller's input (exit status 2): bad n, key too long. */
export class UsageError extends Error {}

/** How deep arrays and objects may nest in a metadata document (spec/abi-v1.md §2.6, rule 3). */
export const MAX_METADATA_DEPTH: 32;

/** The import profile of a module (spec/abi-v1.md §6), decided by its imports. */
export type Profile = 'portable' | 'wasi-deterministic';

/** The ABI exports a module may have (spec/abi-v1.md §2). */
export type AbiExport =
  | 'pctl_abi_version' | 'pctl_key_buffer' | 'pctl_partition' | '_initialize' | 'pctl_configure'
  | 'pctl_metadata' | 'pctl_partition_batch' | 'pctl_ancestry';

/** A plugin's metadata (spec/abi-v1.md §2.6); without pctl_metadata, `{ name: 'unnamed', version: '0.0.0' }`. */
export interface PluginMetadata {
  readonly name: string;
  readonly version: string;
  readonly description?: string;
  readonly properties?: readonly string[];
}

/** Options of Plugin.open and Plugin.instantiate. */
export interface InstanceOptions {
  /** The topic's configuration bytes, given to pctl_configure (default empty). */
  config?: Uint8Array;
  /** wasi-deterministic clock_time_get's answer, in nanoseconds since 1970 (default 2024-01-01T00:00:00Z). */
  wasiTime?: bigint;
  /** The seed of random_get's SplitMix64 stream (default 0, as the spec). */
  wasiSeed?: bigint | number;
}

/**
 * A module checked and compiled once (size, magic, features, import profile, exports, initial
 * memory; rewritten for the limits of §7), from which any number of instances can be made: a
 * host discards an instance after a failed call (§3) and makes a fresh one from here.
 * Immutable (frozen); safe to share.
 */
export class PluginModule {
  private constructor();
  /** Checks and compiles a module. Throws LoadError. `source` names it in errors (a path, a builtin name). */
  static compile(bytes: Uint8Array, opts?: { source?: string }): PluginModule;
  readonly source: string;
  /** sha256 of the bytes, hex. */
  readonly digest: string;
  readonly profile: Profile;
  /** The optional ABI exports present (and the required ones). */
  readonly has: Readonly<Partial<Record<AbiExport, true>>>;
  /** The rewritten, compiled module. */
  readonly compiled: WebAssembly.Module;
}

/**
 * One prepared instance of a module (spec/abi-v1.md §3): instantiated, initialised, version
 * checked, metadata read, buffer obtained, configured. Not reentrant: one caller at a time. After
 * a call threw CallError the instance must be discarded (make a fresh one with Plugin.instantiate).
 */
export class Plugin {
  private constructor();
  /** Compiles and instantiates bytes. Throws LoadError. */
  static open(bytes: Uint8Array, opts?: InstanceOptions & { source?: string }): Plugin;
  /** A fresh instance of a module compiled before. Throws LoadError. */
  static instantiate(module: PluginModule, opts?: InstanceOptions): Plugin;
  readonly module: PluginModule;
  /** The metadata name ("unnamed" without pctl_metadata). */
  readonly name: string;
  readonly metadata: PluginMetadata;
  readonly digest: string;
  readonly profile: Profile;
  readonly has: Readonly<Partial<Record<AbiExport, true>>>;

  /** The partition of one key with a single pctl_partition call. Throws CallError. */
  partition(key: Uint8Array, n: number): number;
  /**
   * The partition of a string key, its UTF-8 bytes written straight into the buffer. Throws
   * UsageError for a key over PCTL_MAX_KEY bytes, CallError for a failed call.
   */
  partitionString(key: string, n: number): number;
  /**
   * Partitions of many byte keys into out (default a new Int32Array of keys.length); batch calls
   * when the module exports pctl_partition_batch, single calls otherwise. Throws UsageError for a
   * bad n or a key over PCTL_MAX_KEY bytes, CallError for a failed call.
   */
  partitionAll(keys: readonly Uint8Array[], n: number, out?: Int32Array): Int32Array;
  /**
   * partitionAll for keys that are strings (UTF-8) or Uint8Arrays, each string encoded straight
   * into the module's buffer. Throws UsageError for a bad n or a key over PCTL_MAX_KEY bytes,
   * CallError for a failed call.
   */
  partitionKeys(keys: readonly (string | Uint8Array)[], n: number, out?: Int32Array): Int32Array;
  /**
   * @deprecated since 0.1.0: use partitionKeys, the same method (it takes byte keys as well as
   * strings).
   */
  partitionStrings(keys: readonly (string | Uint8Array)[], n: number, out?: Int32Array): Int32Array;
}
