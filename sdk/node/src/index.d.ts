// TypeScript declarations of the pctl Node.js SDK's public API (src/index.js). The contracts are
// spec/protocol.md and spec/abi-v1.md; the doc comments here are the short form of the README's.
/// <reference types="node" />

import type { NatsConnection, Status } from '@nats-io/transport-node';

// ---- errors (spec/protocol.md §3) ----

/** The wire error codes of spec/protocol.md §3. */
export type ErrorCode =
  | 'bad_request' | 'not_found' | 'exists' | 'conflict' | 'in_use' | 'plugin_rejected' | 'plugin_failed'
  | 'fenced' | 'change_in_progress' | 'permission' | 'unavailable' | 'out_of_sequence' | 'unsupported'
  | 'internal';

export const CODES: readonly ErrorCode[];

/** Every error the SDK raises on purpose: branch on `code` (or `instanceof` a subclass). */
export class PctlError extends Error {
  constructor(code: ErrorCode, message: string, opts?: { cause?: unknown; detail?: unknown; remote?: boolean });
  readonly code: ErrorCode;
  /** The broker's optional JSON detail (plugin_rejected: the conformance report). */
  readonly detail?: unknown;
  /** True when the broker answered with this error. */
  readonly remote: boolean;
}
export class BadRequestError extends PctlError { constructor(message: string, opts?: object); }
export class NotFoundError extends PctlError { constructor(message: string, opts?: object); }
export class ExistsError extends PctlError { constructor(message: string, opts?: object); }
export class ConflictError extends PctlError { constructor(message: string, opts?: object); }
export class InUseError extends PctlError { constructor(message: string, opts?: object); }
export class PluginRejectedError extends PctlError { constructor(message: string, opts?: object); }
export class FencedError extends PctlError { constructor(message: string, opts?: object); }
export class ChangeInProgressError extends PctlError { constructor(message: string, opts?: object); }
export class UnavailableError extends PctlError { constructor(message: string, opts?: object); }
/**
 * unavailable, for one record: JetStream kept refusing its message id as "in process" (API error
 * 10158, spec/protocol.md §5.1.5). Its fate is unknown: read the partition before producing it again.
 */
export class MsgIdInProcessError extends UnavailableError {
  constructor(message: string, opts?: { msgId?: string; partition?: number; answers?: number; cause?: unknown });
  readonly msgId: string;
  readonly partition: number;
  readonly answers: number;
}
/** out_of_sequence: the produce service missed an earlier request of this producer (§5.2): re-send in order. */
export class OutOfSequenceError extends PctlError { constructor(message: string, opts?: object); }
/** unsupported: the request or group needs something this implementation lacks (§6.1). */
export class UnsupportedError extends PctlError { constructor(message: string, opts?: object); }
export class InternalError extends PctlError { constructor(message: string, opts?: object); }
/** plugin_failed: a module refused at load or failing a call. */
export class PluginError extends PctlError {
  constructor(message: string, opts?: { plugin?: string; digest?: string; failure?: string; cause?: unknown });
  readonly plugin: string;
  readonly digest: string;
  /** The failure class phrase ("plugin trapped", "time limit exceeded", ...). */
  readonly failure: string;
}
/** permission: the credentials may not use `subject`; `role` is the role it needs. */
export class PermissionError extends PctlError {
  constructor(message: string, opts?: { subject?: string; role?: string; cause?: unknown });
  readonly subject: string;
  readonly role: string;
}
/** A misplaced record stopped the member (misplaced policy 'stop', spec/protocol.md §6.8). */
export class MisplacedError extends PctlError {
  readonly topic: string;
  readonly partition: number;
  readonly seq: number;
  readonly epoch: number;
  readonly key: Buffer | null;
  readonly misplacement: Misplacement;
}
/** The PctlError subclass of a wire code (unknown codes become internal). */
/**
 * The PctlError of a wire code; `unavailable` with detail `in_process: true` (spec/protocol.md §3)
 * is a MsgIdInProcessError, not to be re-sent under the same identity (§5.2 step 5).
 */
export function errorFromCode(code: string, message: string, opts?: object): PctlError;

// ---- connecting ----

export interface ConnectOptions {
  /** Server URL. Default $PCTL_SERVER, else nats://127.0.0.1:4222. */
  server?: string;
  /** NKey seed file (admin.nk, producer.nk, consumer.nk or a scoped credential). Default $PCTL_CREDS. */
  creds?: string;
  /** Connection name. Default "pctl-node". */
  name?: string;
  /** Milliseconds for each broker API request. Default 30000. */
  timeout?: number;
  /** Milliseconds before an unacknowledged publish counts as ambiguous. Default 5000. */
  ackTimeout?: number;
  /** Milliseconds between reconnection attempts (forever). Default 250. */
  reconnectWait?: number;
  /** Use the shared _INBOX prefix instead of _INBOX_<public key> with NKey credentials. Default false. */
  sharedInbox?: boolean;
  /** Partition with the JavaScript implementation of a built-in when an epoch's module is exactly the shipped built-in's (by digest), without config. Default false: the module runs. */
  nativeBuiltins?: boolean;
}

export const DEFAULTS: Readonly<{ server: string; timeout: number; ackTimeout: number; reconnectWait: number; name: string }>;

/** Connects to a broker. Throws PermissionError, UnavailableError or BadRequestError. */
export function connect(opts?: ConnectOptions): Promise<Client>;
/** The NKey seed of a credentials file (its first seed line). Throws BadRequestError. */
export function readSeed(path: string): Uint8Array;

/** An epoch's partitioner reference in a descriptor. */
export interface PartitionerRef {
  name: string;
  digest: string;
  /** Canonical config bytes, base64 (absent, null or "" mean none). */
  config?: string | null;
}

/** An epoch of a topic descriptor (spec/protocol.md §4). */
export interface Epoch {
  epoch: number;
  partitioner: PartitionerRef;
  partitions: number;
  started: string;
  /** Set once the epoch has ended: boundaries[q] is partition q's last sequence of the epoch. */
  boundaries?: number[];
  ancestry?: { source: string; parents: Array<Array<[number, number]>> };
}

/** A topic descriptor (spec/protocol.md §4). */
export interface TopicDescriptor {
  name: string;
  id: string;
  created: string;
  epochs: Epoch[];
  change?: { to: number; partitions: number; partitioner: PartitionerRef; state: string; started: string } | null;
  creating?: boolean;
  deleting?: boolean;
}

/** A connection to a broker. */
export class Client {
  private constructor();
  /** The underlying NATS connection. */
  readonly connection: NatsConnection;
  /** A new inbox subject under this connection's inbox prefix. */
  inbox(): string;
  /** A producer of a topic (client-side partitioning). Throws NotFoundError for an unknown topic. */
  producer(topic: string, opts?: ProducerOptions): Promise<Producer>;
  /** A member of a consumer group on a topic. Throws NotFoundError, BadRequestError. */
  consumer(topic: string, opts: ConsumerOptions): Promise<Consumer>;
  /** Resets a group to the beginning, the end or a time, with or without members running. */
  resetGroup(topic: string, group: string, target: SeekTarget, opts?: { by?: string }): Promise<Reset>;
  /** A topic's descriptor and its KV revision. */
  topic(name: string, opts?: { timeout?: number }): Promise<{ topic: TopicDescriptor; revision: number }>;
  /** A plugin's module bytes by digest or built-in name, verified against its SHA-256. */
  module(ref: string): Promise<Uint8Array>;
  /** The partitioner of an epoch (module fetched, verified and cached). */
  partitioner(p: PartitionerRef): Promise<Partitioner>;
  /** Calls fn for every status event of the connection; returns a function that stops it. */
  onStatus(fn: (s: Status) => void): () => void;
  /** A broker API request with a JSON reply. */
  request(subject: string, body?: object | Uint8Array): Promise<any>;
  /** Drains and closes the connection (close producers and consumers first). */
  close(): Promise<void>;
}

// ---- producing ----

export interface ProducerOptions {
  /** Producer id, [A-Za-z0-9_-]{1,64}. Default random: an id is one producer instance's. */
  id?: string;
  /** Records in flight per partition beyond the last one the server confirmed persisted. Default 1024. */
  maxInFlight?: number;
  /** Unsettled records before ready() waits. Default 65536. */
  maxBuffered?: number;
  /** Most records in one fast batch before it is committed (it is also committed whenever the partition's queue runs empty). Default 4096. */
  batchSize?: number;
  /** Milliseconds without a reply after which the producer re-reads the descriptor (a fenced subject on a cluster may answer nothing). Default 250. */
  stallTimeout?: number;
  /**
   * Deduplication tokens from each record's key and value instead of random (spec/protocol.md
   * §5.1.4): a re-run of the same input under the same `id` stores nothing twice, but a record's
   * id is predictable to whoever knows its key and value. Default false.
   */
  contentTokens?: boolean;
  /** Receives the producer's decisions after failures (settle, re-send, repartition). */
  onLog?: (line: string) => void;
}
export const PRODUCER_DEFAULTS: Readonly<{ maxInFlight: number; maxBuffered: number; batchSize: number; stallTimeout: number }>;
/** The oldest nats-server the producer and the consumer work with ('2.14.0': fast batches, and the conditioned write of spec/protocol.md §6.1). */
export const MIN_SERVER_VERSION: string;

/** Application headers: {name: value or values}, a Map, or [name, value] pairs (spec/protocol.md §5.3). */
export type RecordHeaders = Record<string, string | string[]> | Map<string, string | string[]> | Array<[string, string]>;

export interface ProducerRecord {
  /** The key (a string is UTF-8); null or absent: a keyless record. '' is the empty key. */
  key?: string | Uint8Array | null;
  value?: string | Uint8Array | null;
  headers?: RecordHeaders;
  /** The record time (Pctl-Time): a Date or unix milliseconds. */
  timestamp?: Date | number;
  /** A tombstone: deletes its key (no value; spec/protocol.md §10.2). On a compacted topic every record needs a key. */
  tombstone?: boolean;
}

export interface ProduceResult {
  /** The record's Pctl-Seq. */
  pseq: number;
  partition: number;
  epoch: number;
  /**
   * Stream sequence when the producer learned it, else 0 ("stored, sequence not reported"): a
   * fast batch's PubAck names its last record's only (spec/protocol.md §5.1.2).
   */
  seq: number;
  /** The server said the record was stored already, and the stored message was checked to be this record. */
  duplicate: boolean;
}

/** A producer of one topic: records with the same key keep their send() order across epochs. */
export class Producer {
  private constructor();
  readonly id: string;
  /** The epoch records are produced to now. */
  readonly epoch: number;
  /** Records re-sent under a new epoch after a fence. */
  readonly resent: number;
  /** Records of settled batches found stored (their acknowledgement was lost). */
  readonly recovered: number;
  /** Fast batches settled after an anomaly (a gap, a refusal, a lost connection, a timeout, a fence). */
  readonly settled: number;
  /** Records a cluster counted in a committed batch but did not store (a nats-server fault), sent again. */
  readonly holes: number;
  /** The partition streams' max_msg_size (0: none). */
  readonly maxRecord: number;
  /** Sends a record; resolves when the broker acknowledged it. Never blocks. */
  send(record: ProducerRecord): Promise<ProduceResult>;
  /** Resolves when fewer than maxBuffered records are unsettled. */
  ready(): Promise<void>;
  /** Resolves when every record sent so far is settled; rejects with the producer's fatal error. */
  flush(): Promise<void>;
  /** Flushes, then stops. */
  close(): Promise<void>;
}

// ---- consuming ----

/** What a member does with a record outside its key's partition (spec/protocol.md §6.8). */
export type MisplacedPolicy = 'stop' | 'deliver' | 'skip';

/** Why a record is misplaced: the partition its key maps to (-1: no usable key or epoch) and why. */
export interface Misplacement {
  expected: number;
  reason: string;
}

/** Keys that move between partitions at an epoch change (KIP-253's key-level rebalance listener). */
export interface KeyChange {
  topic: string;
  fromEpoch: number;
  toEpoch: number;
  /** The partition whose keys leave (onKeysRevoked) or arrive (onKeysAssigned). */
  partition: number;
  /** For onKeysAssigned, the old partition the keys come from (onKeysRevoked: the partition). */
  parent: number;
  /** Whether a key is one of the moving keys. */
  moved(key: Uint8Array): boolean;
}

/** The keys of one state handover (spec/protocol.md §6.9). */
export interface KeySet {
  topic: string;
  /** 'key-arrives' (load), 'partition-revoked' or 'keys-revoked' (flush). */
  reason: 'key-arrives' | 'partition-revoked' | 'keys-revoked';
  partition: number;
  /** For 'keys-revoked': the epoch change; else null. */
  fromEpoch: number | null;
  toEpoch: number | null;
  /** The keys, sorted by their bytes. */
  keys: Buffer[];
  /** Whether a key (bytes, or a string as UTF-8) is in the set. */
  contains(key: Uint8Array | string): boolean;
}

/**
 * A stateful processor's per-key state (spec/protocol.md §6.9): load(ks) before a record of a key
 * the member does not hold is delivered (after its epoch gate); flush(ks) when keys leave the
 * member (a partition given up, keys moving at an epoch change to a partition of another member).
 * Calls are serialised; a call that throws stops the member.
 */
export interface StateHandler {
  load(ks: KeySet): void | Promise<void>;
  flush(ks: KeySet): void | Promise<void>;
}

/** A group reset (spec/protocol.md §6.6). */
export interface Reset {
  generation: number;
  to: 'beginning' | 'end' | 'time';
  /** For 'time': unix milliseconds. */
  time?: number;
  /** The position of every partition stream after the reset. */
  positions: number[];
  by: string;
  at: string;
}

/** 'beginning' ('earliest'), 'end' ('latest'), a Date, unix milliseconds or an RFC 3339 time. */
export type SeekTarget = 'beginning' | 'earliest' | 'end' | 'latest' | Date | number | string | { time: Date | number | string };

export interface ConsumerOptions {
  /** The consumer group, [A-Za-z0-9_-]{1,64}. */
  group: string;
  /** This member's id. Default random. */
  member?: string;
  /** A group that does not exist yet starts at the first record (default: after what is there). */
  fromBeginning?: boolean;
  /**
   * Where a new group starts: 'now', 'beginning' (every epoch, gated) or 'current-epoch' (the
   * current epoch alone, no gates, every backfilled copy delivered: spec/protocol.md §10.5).
   * Default: 'beginning' with fromBeginning; on a compacted topic 'current-epoch' when no
   * backfill runs ('beginning' while one does); else 'now'.
   */
  from?: 'now' | 'beginning' | 'current-epoch';
  /** Acknowledge records automatically (handler returned / next record asked). Default true. */
  autoCommit?: boolean;
  /** Reset the group when joining. */
  resetTo?: SeekTarget;
  /** Misplaced records: 'stop' (default), 'deliver' (flagged) or 'skip'. */
  misplaced?: MisplacedPolicy;
  /**
   * A new group's assignor (spec/protocol.md §6.2): 'modulo' (the default) or 'sticky' (keeps
   * each key with the member that holds its state, §6.2.1). An existing group keeps its own; a
   * group whose assignor differs from the one given here refuses the member (code conflict).
   */
  assignor?: 'modulo' | 'sticky';
  /** Per-key gating (default true). false breaks per-key order: for benchmarks only. */
  gating?: boolean;
  /** Per-key state handover (spec/protocol.md §6.9); needs gating. */
  state?: StateHandler;
  /** Milliseconds between heartbeats and rebalances. Default 1000. */
  heartbeat?: number;
  /** Milliseconds after which a silent member is gone. Default 6000 (the same in every member). */
  sessionTimeout?: number;
  /** Milliseconds between commits. Default 200. */
  commitInterval?: number;
  /** Records read ahead per partition. Default 1024. */
  prefetch?: number;
  /** Milliseconds a revoked partition waits for the record in hand to be acknowledged. Default 1500. */
  revokeTimeout?: number;
  onAssigned?: (partitions: number[]) => void | Promise<void>;
  onRevoked?: (partitions: number[], info: { lost: number[] }) => void | Promise<void>;
  onKeysRevoked?: (change: KeyChange) => void | Promise<void>;
  onKeysAssigned?: (change: KeyChange) => void | Promise<void>;
  onReset?: (reset: Reset) => void | Promise<void>;
  onMisplaced?: (m: Message) => void;
  /** The member's decisions, one line each. */
  onLog?: (line: string) => void;
}

export const CONSUMER_DEFAULTS: Readonly<{ heartbeat: number; sessionTimeout: number; commitInterval: number; prefetch: number; revokeTimeout: number }>;

/** A record delivered to a consumer. */
export class Message {
  private constructor();
  readonly topic: string;
  readonly partition: number;
  readonly epoch: number;
  /** Stream sequence. */
  readonly seq: number;
  /** The key, or null for a keyless record. */
  readonly key: Buffer | null;
  readonly value: Buffer;
  /** The producer's id ('' if none). */
  readonly producer: string;
  /** The producer's sequence number (0 if none). */
  readonly pseq: number;
  /** A tombstone: the record deletes its key (spec/protocol.md §10.2); its value is not a value. */
  readonly tombstone: boolean;
  /** On a backfilled copy the group delivers (spec/protocol.md §10.4): the record it copies. */
  readonly backfill: { epoch: number; partition: number; seq: number } | null;
  /** Set on a misplaced record delivered under misplaced: 'deliver'. */
  readonly misplaced?: Misplacement;
  /** Application headers. */
  readonly headers: Record<string, string[]>;
  /** The first value of an application header. */
  header(name: string): string | undefined;
  /** The producer's Pctl-Time, else storedTime: unix milliseconds. */
  readonly timestamp: number;
  readonly hasProducerTime: boolean;
  /** When the stream stored the record: unix milliseconds. */
  readonly storedTime: number;
  /** When the stream stored the record: unix nanoseconds. */
  readonly storedNanos: bigint;
  /** Acknowledges the record. */
  ack(): void;
  /** Acknowledges the record and commits its partition now. */
  commit(): Promise<void>;
}

export interface ConsumerStats {
  delivered: number;
  /** Records that waited at a gate. */
  gated: number;
  totalWaitMs: number;
  maxWaitMs: number;
  misplaced: number;
  /** Reader re-creations by reason. */
  readerRecreated: Record<string, number>;
  rebalances: number;
  /** Sticky groups: the assignment records this member wrote as the group's leader (spec/protocol.md §6.2.1). */
  assignments: number;
  /** The fractions of keys that changed member at the last record it wrote, under sticky and under modulo (§6.2.2); null before one. */
  moved: number | null;
  movedModulo: number | null;
}

/** A member of a consumer group. */
export class Consumer implements AsyncIterable<Message> {
  private constructor();
  readonly member: string;
  readonly topic: string;
  readonly group: string;
  /** The partitions this member owns now, sorted. */
  readonly assignment: number[];
  /** The group's reset generation as this member knows it. */
  readonly generation: number;
  readonly stats: ConsumerStats;
  /** Joins the group (iteration and run() do it). */
  start(): Promise<void>;
  /** Records one at a time across the member's partitions; ends when the consumer is closed. */
  [Symbol.asyncIterator](): AsyncIterator<Message>;
  /** Runs the handler for every record (concurrently across partitions) until closed or a failure. */
  run(handler: (m: Message) => void | Promise<void>): Promise<void>;
  /** Moves the whole group; resolves when committed and this member stopped its old deliveries. */
  seek(target: SeekTarget): Promise<Reset>;
  /** Writes every acknowledged position now. */
  commit(): Promise<void>;
  /** Commits what was acknowledged, hands the partitions back, leaves the group. Idempotent. */
  close(): Promise<void>;
  /** Wall-clock nanoseconds, increasing within the process (the consume command's "ts"). */
  nextTs(): bigint;
}

/** Resets a group (see Client.resetGroup). */
export function resetGroup(client: Client, topic: string, group: string, target: SeekTarget, opts?: { by?: string }): Promise<Reset>;
/** Parses a seek target; throws BadRequestError. */
export function parseTarget(target: SeekTarget): { to: 'beginning' | 'end' | 'time'; time?: number };

// ---- records ----

export const TIME_HEADER: 'Pctl-Time';
export const MAX_HEADER_BYTES: number;
export const DEFAULT_MAX_RECORD_BYTES: number;

// ---- partitioners ----

export type PartitionerConfig = Uint8Array | Record<string, string | number> | string[];

/** A WebAssembly partitioner (spec/abi-v1.md) with one config. Calls are synchronous. */
export class Partitioner {
  private constructor();
  static load(source: string | URL | Uint8Array | ArrayBuffer, opts?: { config?: PartitionerConfig; source?: string }): Promise<Partitioner>;
  static loadSync(source: string | URL | Uint8Array | ArrayBuffer, opts?: { config?: PartitionerConfig; source?: string }): Partitioner;
  static fromBytes(bytes: Uint8Array | ArrayBuffer, opts?: { config?: PartitionerConfig; source?: string }): Partitioner;
  /** A built-in partitioner, embedded in the package (no file, no broker): see builtinNames(). */
  static builtin(name: string, opts?: { config?: PartitionerConfig }): Partitioner;
  readonly digest: string;
  readonly profile: string;
  readonly metadata: { name: string; version: string; description?: string; properties?: string[] };
  readonly name: string;
  /** The partition of a key among n, in [0, n). */
  partition(key: string | Uint8Array, n: number): number;
  partitionMany(keys: Array<string | Uint8Array>, n: number): Int32Array;
}
/** One-shot partition of a key with a module file or bytes. */
export function partition(source: string | URL | Uint8Array, key: string | Uint8Array, n: number, opts?: { config?: PartitionerConfig }): Promise<number>;
/** The names of the built-in partitioners embedded in the package ("jump", "kafka-murmur2", ...). */
export function builtinNames(): string[];
/** Canonical config bytes (spec/abi-v1.md §2.5). */
export function configBytes(config?: PartitionerConfig | null): Uint8Array;
