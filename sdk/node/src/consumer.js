// A member of a pctl consumer group (spec/protocol.md §6): membership and assignment (modulo: the
// i-th assignable partition to member i mod M; sticky: the leader's g.assignment record, §6.2.1,
// computed by rules.nextAssignment), leases and commits by compare-and-set in KV
// pctl-groups, fence markers, per-key gating on every undrained older epoch with the epoch's own
// WebAssembly partitioner, retired partitions drained after a shrink, KIP-253's key-level
// callbacks, seek/reset by group generations (§6.6), and readers that never stall (§6.7).
//
// Structure (like client/consumer.go): one Worker per owned partition reads its stream in order
// (reader.js), gates each keyed record, and delivers it — to the handler of run(), or into the
// queue the async iterator takes from. The Consumer keeps the group's view (members, committed
// positions, the reset generation) from one watch of the group's keys, and runs the heartbeat,
// rebalance and commit clocks. Everything runs on the event loop; state is changed only between
// awaits, and every network call's result is applied with a revision or generation check.

import { PullReader } from './reader.js';
import * as rules from './rules.js';
import { epochOf, ended, maxPartitions } from './rules.js';
import { KV, CasConflict, GROUPS_BUCKET } from './kv.js';
import { streamInfo, jsRequest, JsApiError, JS } from './jsapi.js';
import { goQuote } from './jsonl.js';
import { requireServer } from './server.js';
import { appHeaders, parseTime, TIME_HEADER } from './records.js';
import { BadRequestError, ConflictError, NotFoundError, PctlError, UnavailableError, UnsupportedError, InternalError, permissionError } from './errors.js';
import { keyToken, keySubjects, parseOrigin, backfilling, originRetired, currentEpochStart } from './compact.js';

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
const decoder = new TextDecoder();
const encoder = new TextEncoder();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A pause that does not keep the process alive (for races against something else).
const idle = (ms) => new Promise((r) => setTimeout(r, ms).unref());
const EMPTY = Buffer.alloc(0);
const B64_RE = /^b64:[A-Za-z0-9+/]*={0,2}$/;
const LATER = Symbol('later');
// ownUnanswered's answer when the key could not be read (spec/protocol.md §6.3: decides nothing).
const UNREAD = Symbol('unread');
const MISPLACED_POLICIES = ['stop', 'deliver', 'skip'];
const STARTS = ['now', 'beginning', 'current-epoch'];

/**
 * A record stored outside its key's partition stopped the member (misplaced policy 'stop',
 * spec/protocol.md §6.8): everything before it was delivered, nothing after it in its partition
 * is until the group runs with misplaced 'deliver' or 'skip'. Names topic, partition, seq, epoch,
 * key and the misplacement {expected, reason}.
 */
export class MisplacedError extends PctlError {
  constructor(topic, partition, m, mp) {
    super('internal', `misplaced record in topic ${topic} partition ${partition} at sequence ${m.seq} (epoch ${m.epoch}, key ${m.key === null ? '(none)' : JSON.stringify(m.key.toString())}): ${mp.reason}. A producer bypassed the partitioner; the group stopped before this record. To go on, consume with misplaced: 'deliver' (flagged) or 'skip' (consume --misplaced deliver|skip)`);
    this.name = 'MisplacedError';
    this.topic = topic;
    this.partition = partition;
    this.seq = m.seq;
    this.epoch = m.epoch;
    this.key = m.key;
    this.misplacement = mp;
  }
}

/** Defaults of consumer options (milliseconds and counts). */
export const CONSUMER_DEFAULTS = Object.freeze({
  heartbeat: 1000,
  sessionTimeout: 6000,
  commitInterval: 200,
  prefetch: 1024,
  revokeTimeout: 1500,
});

function randomId() {
  const a = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const b = new Uint8Array(22);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => a[x % a.length]).join('');
}

function json(bytes) {
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch {
    return null;
  }
}

// Descriptor helpers (spec/protocol.md §4) and the group's decisions: rules.js.

// Group keys (spec/protocol.md §6).
const groupPrefix = (tid, g) => `${tid}.${g}.`;
const partitionKey = (tid, g, q) => `${tid}.${g}.p.${q}`;
const memberKey = (tid, g, m) => `${tid}.${g}.m.${m}`;
const resetKey = (tid, g) => `${tid}.${g}.g.reset`;
const createdKey = (tid, g) => `${tid}.${g}.g.created`;
const startKey = (tid, g) => `${tid}.${g}.g.start`;

function equalBytes(a, b) {
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function partitionBody(ps) {
  const o = {};
  if (ps.owner) o.owner = ps.owner;
  if (ps.lease_end) o.lease_end = ps.lease_end;
  o.position = ps.position;
  if (ps.generation) o.generation = ps.generation;
  return encoder.encode(JSON.stringify(o));
}

/**
 * A seek or reset target: 'beginning' (or 'earliest'), 'end' (or 'latest'), a Date, unix
 * milliseconds, an ISO 8601 / RFC 3339 string, or {time}. Returns {to, time}.
 */
export function parseTarget(target) {
  if (target === 'beginning' || target === 'earliest') return { to: 'beginning' };
  if (target === 'end' || target === 'latest') return { to: 'end' };
  let t = target;
  if (t && typeof t === 'object' && !(t instanceof Date) && 'time' in t) t = t.time;
  let ms = NaN;
  if (t instanceof Date) ms = t.getTime();
  else if (typeof t === 'number') ms = t;
  else if (typeof t === 'string' && /^\d{4}-\d\d-\d\d/.test(t)) ms = Date.parse(t);
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new BadRequestError(`seek target ${JSON.stringify(target)}: give 'beginning', 'end', a Date, unix milliseconds or an RFC 3339 time such as 2026-12-01T08:00:00Z`);
  }
  return { to: 'time', time: ms };
}

// Where a new group starts (spec/protocol.md §6.1, §10.5): the from option; else beginning with
// fromBeginning; on a compacted topic current-epoch when no backfill runs (beginning while one
// does); else now.
function startOf(o, desc) {
  if (o.from) return o.from;
  if (o.fromBeginning) return 'beginning';
  if (desc.compact) return backfilling(desc) ? 'beginning' : 'current-epoch';
  return 'now';
}

// Creates the group's state on first use (spec/protocol.md §6.1): a group that reads the current
// epoch alone writes g.start (§10.5). A get that finds no g.created proves nothing (a lagging
// follower answers direct gets), so the create path starts with a write that proves the group
// absent (§6.1, "Proving that the group does not exist"): g.assignor, stored only while g.created
// has no message. Refused: the group exists (or another member is creating it), and nothing is
// created. `desc` was read before that write, so every stream in it predates the group.
export async function ensureGroup(client, kv, desc, group, o, log) {
  const tid = desc.id;
  if (await kv.get(createdKey(tid, group))) return false;
  let absent;
  try {
    absent = await kv.putIfAbsent(`${tid}.${group}.g.assignor`, encoder.encode(JSON.stringify({ assignor: o?.assignor ?? 'modulo' })), createdKey(tid, group));
  } catch (e) {
    if (e?.code === 'permission') throw e;
    throw new UnavailableError(`consumer group ${group}: could not learn whether it exists (its assignor written on the condition that it does not: ${e?.message ?? e}): retry the join`, { cause: e });
  }
  if (!absent) return false;
  const from = startOf(o, desc);
  if (from === 'current-epoch') {
    const bf = backfilling(desc);
    if (bf) log?.(`group ${group} starts at the current epoch ${bf.epoch} while its backfill runs: keys not yet copied arrive as their copies do`);
    try {
      await kv.create(startKey(tid, group), encoder.encode(JSON.stringify({ from: 'current-epoch', epoch: desc.epochs[desc.epochs.length - 1].epoch })));
    } catch (e) {
      if (!(e instanceof CasConflict)) throw e;
    }
  }
  for (let q = 0; q < maxPartitions(desc); q++) {
    let start = 0;
    if (from === 'current-epoch') {
      start = currentEpochStart(desc, q);
    } else if (from === 'now') {
      try {
        start = (await streamInfo(client.nc, `PCTL_${desc.name}_${q}`)).state.last_seq;
      } catch (e) {
        throw new UnavailableError(`create group ${group}: partition ${q} of ${desc.name}: ${e.message}`, { cause: e });
      }
    }
    try {
      await kv.create(partitionKey(tid, group, q), partitionBody({ position: start }));
    } catch (e) {
      if (!(e instanceof CasConflict)) throw e;
    }
  }
  try {
    await kv.create(createdKey(tid, group), encoder.encode(new Date().toISOString()));
  } catch (e) {
    if (!(e instanceof CasConflict)) throw e;
  }
  return true;
}

// A member joins only a group whose assignor it implements (spec/protocol.md §6.1): this SDK
// implements modulo and sticky; a group without the key is modulo. An assignor asked for that
// is not the group's is a conflict. `e` is the group's g.assignor (readGroupKeys; null: none).
// Returns the group's assignor.
function checkAssignor(e, group, topic, asked) {
  const a = e ? json(e.value)?.assignor : 'modulo';
  if (!ASSIGNORS.includes(a)) {
    throw new UnsupportedError(`group ${group} of topic ${topic} uses the assignor ${JSON.stringify(a)}, which this client does not implement (it knows modulo and sticky): use a client that implements it, or another group`);
  }
  if (asked && asked !== a) {
    throw new ConflictError(`group ${group} of topic ${topic} uses the assignor ${a}, not the ${asked} this consumer asked for: ask for ${a}, or use another group`);
  }
  return a;
}

/** How long a member waits, at join, for a state of its group that holds g.created (ms). */
export const JOIN_TIMEOUT = 30_000;

/**
 * The group's g.start and g.assignor ({start, assignor}: {value, revision}, or null for a key that
 * does not exist), read together with g.created from one server's state (spec/protocol.md §6.1,
 * "Reading the group's keys at join"): the initial values of a watch of the group's g.* keys. A
 * direct get may be answered by a follower that lags, and its "not found" proves nothing; the
 * creator writes g.created last, so a state that holds it holds the others if they exist. Without
 * g.created among the initial values it reads again (back-off 20 ms doubling to 500 ms), and
 * throws UnavailableError once `timeout` ms have passed.
 */
export async function readGroupKeys(kv, tid, group, timeout = JOIN_TIMEOUT) {
  const deadline = Date.now() + timeout;
  let wait = 20;
  for (;;) {
    let vals;
    try {
      vals = await kv.initialValues(`${groupPrefix(tid, group)}g.*`);
    } catch (e) {
      if (e?.code === 'permission') throw e;
      throw new UnavailableError(`consumer group ${group}: read its keys: ${e?.message ?? e}`, { cause: e });
    }
    if (vals.has(createdKey(tid, group))) {
      return { start: vals.get(startKey(tid, group)) ?? null, assignor: vals.get(`${tid}.${group}.g.assignor`) ?? null };
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new UnavailableError(`consumer group ${group}: its g.created key exists but no server's state that was read holds it yet (waited ${timeout}ms)`);
    }
    await idle(Math.min(wait, left));
    wait = Math.min(2 * wait, 500);
  }
}

/** The assignors of spec/protocol.md §6.2 this SDK implements. */
const ASSIGNORS = ['modulo', 'sticky'];

// The reset positions of spec/protocol.md §6.6 for every partition stream of the descriptor.
async function resetPositions(client, desc, target) {
  const out = [];
  for (let q = 0; q < maxPartitions(desc); q++) {
    const stream = `PCTL_${desc.name}_${q}`;
    if (target.to === 'beginning') {
      out.push(0);
      continue;
    }
    let last;
    try {
      last = (await streamInfo(client.nc, stream)).state.last_seq;
    } catch (e) {
      if (e instanceof JsApiError && e.errCode === JS.streamNotFound) {
        out.push(0); // being created: all of its records come after the reset
        continue;
      }
      throw e;
    }
    if (target.to === 'end') {
      out.push(last);
      continue;
    }
    out.push(await positionAt(client, stream, `pctl.data.${desc.name}.>`, target.time));
  }
  return out;
}

// The position before a stream's first message stored at or after time ms: a reader created at
// that time (JetStream picks its first sequence; its info says delivered = that - 1), which a
// scoped consumer credential may do where it may not direct-get (spec/protocol.md §6.6, §8.2).
async function positionAt(client, stream, filter, ms) {
  const name = `pctl_at_${randomId().slice(0, 12)}`;
  const config = {
    name, deliver_policy: 'by_start_time', opt_start_time: new Date(ms).toISOString(), ack_policy: 'none',
    mem_storage: true, num_replicas: 1, inactive_threshold: 5e9, filter_subject: filter,
  };
  const r = await jsRequest(client.nc, `$JS.API.CONSUMER.CREATE.${stream}.${name}.${filter}`, { stream_name: stream, config, action: 'create' });
  jsRequest(client.nc, `$JS.API.CONSUMER.DELETE.${stream}.${name}`, undefined, 2000).catch(() => {});
  return r.delivered.stream_seq;
}

/**
 * Resets a consumer group to the beginning, the end or a time (spec/protocol.md §6.6), whether or
 * not members are running: writes the group's next generation (the commit point), then moves every
 * partition key. Returns the reset {generation, to, time, positions, by, at}. Members that run
 * stop delivering, forget what they knew of drained epochs, and go on from the new positions.
 */
export async function resetGroup(client, topic, group, target, { by = 'pctl-node' } = {}) {
  if (typeof group !== 'string' || !NAME_RE.test(group)) {
    throw new BadRequestError(`bad group name ${JSON.stringify(group)}: a group name is 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)`);
  }
  const tgt = parseTarget(target);
  // A reset writes group keys (and creates a missing group): the members' server (§6.1, §6.6).
  requireServer(client, "pctl's group reset", "it writes the group's keys that members read, spec/protocol.md §6.1, §6.6");
  const { topic: desc } = await client.topic(topic);
  const kv = new KV(client.nc, GROUPS_BUCKET, 10_000);
  await ensureGroup(client, kv, desc, group, true);
  return applyResetTarget(client, kv, desc, group, tgt, by);
}

async function applyResetTarget(client, kv, desc, group, tgt, by) {
  const tid = desc.id;
  const rk = resetKey(tid, group);
  let reset;
  for (let attempt = 0; ; attempt++) {
    const cur = await kv.get(rk);
    const prev = cur && !cur.deleted ? json(cur.value) : null;
    const positions = await resetPositions(client, desc, tgt);
    reset = { generation: (prev?.generation ?? 0) + 1, to: tgt.to, positions, by, at: new Date().toISOString() };
    if (tgt.to === 'time') reset.time = tgt.time;
    const body = encoder.encode(JSON.stringify(reset));
    try {
      if (cur) await kv.update(rk, body, cur.revision);
      else await kv.create(rk, body);
      break;
    } catch (e) {
      if (!(e instanceof CasConflict) || attempt >= 20) throw e;
    }
  }
  // Move every partition key (members do it too, lazily, if this stops halfway).
  for (let q = 0; q < reset.positions.length; q++) await applyResetToKey(kv, tid, group, q, reset);
  return reset;
}

// Writes a reset's position to one partition key unless a newer generation is there already.
async function applyResetToKey(kv, tid, group, q, reset, expectRev) {
  const key = partitionKey(tid, group, q);
  for (let attempt = 0; attempt < 20; attempt++) {
    const e = await kv.get(key);
    const ps = e && !e.deleted ? json(e.value) ?? {} : null;
    if (ps && (ps.generation ?? 0) >= reset.generation) return;
    if (expectRev !== undefined && e && e.revision !== expectRev) return; // someone else was first
    const body = partitionBody({ position: reset.positions[q] ?? 0, generation: reset.generation });
    try {
      if (e) await kv.update(key, body, e.revision);
      else await kv.create(key, body);
      return;
    } catch (err) {
      if (!(err instanceof CasConflict)) throw err;
      if (expectRev !== undefined) return;
    }
  }
}

/**
 * A record delivered to a consumer. `key` is a Buffer, or null for a keyless record; `value` a
 * Buffer. `headers` are the record's application headers ({name: [values]}, empty when none);
 * `timestamp` is the producer's record time (Pctl-Time) or else the time the stream stored it, in
 * unix milliseconds; `storedTime` is always the latter. ack() acknowledges it (needed when
 * autoCommit is off); commit() acknowledges it and commits its partition at once.
 */
/**
 * The keys of one state handover (spec/protocol.md §6.9): {topic, reason, partition, fromEpoch,
 * toEpoch, keys, contains(key)}. reason is 'key-arrives' (load), 'partition-revoked' or
 * 'keys-revoked' (flush); fromEpoch/toEpoch are set for 'keys-revoked'; keys are Buffers, sorted.
 */
function keySet(topic, reason, partition, ks, fromEpoch = null, toEpoch = null) {
  const sorted = [...ks].sort((a, b) => Buffer.compare(Buffer.from(a, 'latin1'), Buffer.from(b, 'latin1')));
  const set = new Set(sorted);
  return {
    topic, reason, partition, fromEpoch, toEpoch,
    keys: sorted.map((k) => Buffer.from(k, 'latin1')),
    contains: (key) => set.has(Buffer.isBuffer(key) ? key.toString('latin1') : Buffer.from(String(key)).toString('latin1')),
  };
}

export class Message {
  constructor(worker, e, epoch) {
    this.worker = worker;
    this.topic = worker.cn.topic;
    this.partition = worker.partition;
    this.epoch = epoch;
    this.seq = e.seq;
    this.raw = e;
    const h = e.headers;
    const k = h ? h.get('Pctl-Key') : '';
    // Like Go's wire.DecodeKey: "b64:" and standard base64; anything else is keyless.
    this.key = k.startsWith('b64:') && B64_RE.test(k) && k.length % 4 === 0 ? Buffer.from(k.slice(4), 'base64') : null;

    this.producer = h ? h.get('Pctl-Producer') : '';
    const ps = h ? h.get('Pctl-Seq') : '';
    this.pseq = ps ? Number(ps) : 0;
    this.acked = false;
    // On a backfilled copy (spec/protocol.md §10.4): {epoch, partition, seq} of the record it
    // copies. A group delivers a copy only when it cannot have delivered the original.
    this.backfill = null;
  }

  /**
   * Whether the record is a tombstone: it deletes its key (spec/protocol.md §10.2); its value
   * is then not a value.
   */
  get tombstone() { return !!this.raw.headers?.get('Pctl-Tombstone'); }

  /** The record's value (a Buffer over the received bytes). */
  get value() {
    if (this._value === undefined) {
      const d = this.raw.data;
      this._value = d.length ? Buffer.from(d.buffer, d.byteOffset, d.length) : EMPTY;
    }
    return this._value;
  }

  /** The record's application headers: {name: [values]} (spec/protocol.md §5.3). */
  get headers() {
    if (this._headers === undefined) this._headers = appHeaders(this.raw.headers) ?? Object.create(null);
    return this._headers;
  }

  /** The first value of an application header, or undefined. */
  header(name) { return this.headers[name]?.[0]; }

  /** When the stream stored the record: unix milliseconds. */
  get storedTime() { return this.raw.tsMs; }
  /** When the stream stored the record: unix nanoseconds. */
  get storedNanos() { return BigInt(this.raw.tsMs) * 1000000n + BigInt(this.raw.tsRest); }
  /** The record's time: its producer's Pctl-Time, else storedTime (unix milliseconds). */
  get timestamp() {
    const t = parseTime(this.raw.headers?.get(TIME_HEADER));
    return t ?? this.storedTime;
  }
  /** Whether the producer set the record's time. */
  get hasProducerTime() { return parseTime(this.raw.headers?.get(TIME_HEADER)) !== null; }

  /** Acknowledges the record (the group may commit past it once every earlier one is too). */
  ack() {
    if (this.acked) return;
    this.acked = true;
    this.worker.ack(this.seq);
  }

  /** Acknowledges the record and commits its partition now; resolves when written. */
  async commit() {
    this.ack();
    await this.worker.commit(true);
  }
}

/**
 * A member of a consumer group on one topic. Make it with `client.consumer(topic, options)`;
 * consume with `for await (const m of consumer)` or `await consumer.run(handler)`; stop with
 * `await consumer.close()` (it commits what was acknowledged and hands its partitions back).
 *
 * Order: records with the same key are delivered in the order they were produced, across epoch
 * changes, by this member and by the group as a whole (a record waits until the group has
 * committed its key's older partitions). At least once: a member that crashes leaves what it
 * delivered and did not commit to the next owner, who delivers it again, in order.
 *
 * Callbacks (all optional, may be async; the member waits for them): onAssigned(partitions),
 * onRevoked(partitions, {lost}), onKeysRevoked(change), onKeysAssigned(change) where change is
 * {topic, fromEpoch, toEpoch, partition, parent, moved(key)} (KIP-253), onReset(reset).
 *
 * State handover (spec/protocol.md §6.9), option state: {load(keySet), flush(keySet)} (may be
 * async; one call at a time per consumer, never while a record of a key in the set is being
 * delivered). load before a record of a key the member does not hold is delivered, after the
 * record passed its epoch gate; flush of the keys held for a partition after its worker stopped
 * and before it is released (a failed flush does not release it: its lease expires), and at keys
 * revoked of the keys that move to a partition this member does not own, before the member
 * commits past the boundary (keys moving between two partitions of this member stay held). A
 * lost partition's keys are forgotten without a flush; a reset flushes every held key. A load or
 * flush that throws stops the member; a consumer with state cannot set gating: false.
 */
export class Consumer {
  /** @private use client.consumer(). */
  static async create(client, topic, opts = {}) {
    if (typeof topic !== 'string' || !NAME_RE.test(topic)) {
      throw new BadRequestError(`bad topic name ${JSON.stringify(topic)}: a topic name is 1 to 64 characters of A-Z a-z 0-9 _ -`);
    }
    if (typeof opts.group !== 'string' || !NAME_RE.test(opts.group)) {
      throw new BadRequestError(`bad or missing group ${JSON.stringify(opts.group)}: give options.group, 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)`);
    }
    const member = opts.member ?? randomId();
    if (typeof member !== 'string' || !NAME_RE.test(member)) {
      throw new BadRequestError(`bad member id ${JSON.stringify(member)}: a member id is 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)`);
    }
    for (const k of ['heartbeat', 'sessionTimeout', 'commitInterval', 'prefetch', 'revokeTimeout']) {
      if (opts[k] !== undefined && !(Number.isFinite(opts[k]) && opts[k] > 0)) throw new BadRequestError(`consumer option ${k}: ${opts[k]} is not a positive number`);
    }
    if (opts.from !== undefined && opts.from !== null && !STARTS.includes(opts.from)) {
      throw new BadRequestError(`consumer option from: ${JSON.stringify(opts.from)}: give 'now', 'beginning' or 'current-epoch' (spec/protocol.md §6.1, §10.5)`);
    }
    if (opts.assignor !== undefined && opts.assignor !== null && !ASSIGNORS.includes(opts.assignor)) {
      throw new BadRequestError(`consumer option assignor: ${JSON.stringify(opts.assignor)}: give 'modulo' or 'sticky' (spec/protocol.md §6.2)`);
    }
    if (opts.state !== undefined && opts.state !== null) {
      if (typeof opts.state !== 'object' || typeof opts.state.load !== 'function' || typeof opts.state.flush !== 'function') {
        throw new BadRequestError('consumer option state: give an object with load(keySet) and flush(keySet) functions (spec/protocol.md §6.9)');
      }
      if (opts.gating === false) {
        throw new BadRequestError('consumer option state: a state handler needs the epoch gate (a key\'s state is loaded after it): drop gating: false (spec/protocol.md §6.9)');
      }
    }
    if (opts.misplaced !== undefined && !MISPLACED_POLICIES.includes(opts.misplaced)) {
      throw new BadRequestError(`consumer option misplaced: ${JSON.stringify(opts.misplaced)}: give 'stop', 'deliver' or 'skip' (spec/protocol.md §6.8)`);
    }
    let resetTo = null;
    if (opts.resetTo !== undefined && opts.resetTo !== null) resetTo = parseTarget(opts.resetTo);
    // Before any group key is written: a server older than 2.11 ignores the condition that proves
    // a group absent (spec/protocol.md §6.1, "The server version a consumer needs").
    requireServer(client, "pctl's consumer", 'a member proves a new group absent with a conditioned write, spec/protocol.md §6.1');
    const { topic: desc } = await client.topic(topic);
    const cn = new Consumer(client, topic, desc, member, opts);
    cn.resetTo = resetTo;
    await cn.loadPartitioners(desc);
    return cn;
  }

  constructor(client, topic, desc, member, opts) {
    this.client = client;
    this.topic = topic;
    this.topicId = desc.id;
    this.desc = desc;
    this.group = opts.group;
    this.memberId = member;
    this.o = {
      fromBeginning: !!opts.fromBeginning,
      from: opts.from ?? null,
      autoCommit: opts.autoCommit !== false,
      gating: opts.gating !== false,
      heartbeat: opts.heartbeat ?? CONSUMER_DEFAULTS.heartbeat,
      sessionTimeout: opts.sessionTimeout ?? CONSUMER_DEFAULTS.sessionTimeout,
      commitInterval: opts.commitInterval ?? CONSUMER_DEFAULTS.commitInterval,
      prefetch: opts.prefetch ?? CONSUMER_DEFAULTS.prefetch,
      revokeTimeout: opts.revokeTimeout ?? CONSUMER_DEFAULTS.revokeTimeout,
      keepDrainedOnReset: !!opts.unsafeKeepDrainedOnReset, // test hook: Pulsar's bug, on purpose
      // Test hook: called after each stored commit; true makes the member take that commit as
      // unanswered (stored, its answer lost on the way), as a leader change can.
      loseCommitAnswer: opts.unsafeLoseCommitAnswer ?? null,
      failReadBack: opts.unsafeFailReadBack ?? null,
      misplaced: opts.misplaced ?? 'stop',
      assignor: opts.assignor ?? null,
    };
    this.cb = {
      onAssigned: opts.onAssigned, onRevoked: opts.onRevoked, onKeysRevoked: opts.onKeysRevoked,
      onKeysAssigned: opts.onKeysAssigned, onReset: opts.onReset, onLog: opts.onLog, onMisplaced: opts.onMisplaced,
    };
    // State handovers (spec/protocol.md §6.9): stateQ serialises the calls; home maps every key
    // this member holds (latin1 string of its bytes) to the partition it holds it for.
    this.state = opts.state ?? null;
    this.stateQ = Promise.resolve();
    this.home = new Map();
    this.opTimeout = Math.max(this.o.sessionTimeout, 2000);
    this.kv = new KV(client.nc, GROUPS_BUCKET, this.opTimeout);
    this.prefix = `$KV.${GROUPS_BUCKET}.${groupPrefix(this.topicId, this.group)}`;
    this.parts = new Map(); // digest/config -> Partitioner
    this.epochParts = new WeakMap(); // descriptor epoch -> Partitioner
    this.states = new Map(); // q -> {gen, position}: the group's committed positions (watch)
    this.leases = new Map(); // q -> {rev, owner, leaseEnd}: who holds each partition (watch)
    this.members = new Map(); // member -> {time, deleted}
    this.gen = 0;
    this.startEpoch = 0; // the group reads the current epoch alone from this epoch on (g.start, §10.5)
    this.reset = null;
    this.pendingReset = null;
    this.drained = { gen: -1, through: 0 };
    this.passed = new Set(); // "q/epoch": keys-revoked ran (this generation)
    this.assignedKeys = new Set(); // "p/epoch/parent": keys-assigned ran (this generation)
    this.owned = new Map(); // q -> Worker
    this.waiters = new Map(); // q -> Set of {boundary, resolve}
    this.queue = []; // iterator mode: messages ready, in delivery order
    this.qhead = 0;
    this.queueWaiter = null;
    this.inHand = null;
    this.mode = null; // 'run' | 'iterate'
    this.handler = null;
    this.started = null;
    this.closing = false;
    this.closed = null;
    this.error = null;
    this.rebalancing = false;
    this.rebalanceAgain = false;
    this.lastTs = 0n;
    this.stats = { delivered: 0, gated: 0, totalWaitMs: 0, maxWaitMs: 0, misplaced: 0, readerRecreated: {}, rebalances: 0, assignments: 0, moved: null, movedModulo: null };
    this.assignor = 'modulo'; // the group's (checkAssignor)
    this.record = null; // sticky: the last g.assignment read, and its revision
    this.recordRev = 0;
    this.lastView = null; // sticky: the live members of the previous rebalance
    this.samples = new Map(); // sticky: "digest/config/n" -> the sample's partitions
  }

  /** This member's id in the group. */
  get member() { return this.memberId; }
  /** The partitions this member owns now, sorted. */
  get assignment() { return [...this.owned.keys()].sort((a, b) => a - b); }
  /** The group's reset generation as this member knows it (spec/protocol.md §6.6). */
  get generation() { return this.gen; }

  log(msg) { this.cb.onLog?.(`member ${this.memberId}: ${msg}`); }

  // Partitioners of every epoch of the descriptor, loaded before they are needed (the gate's fast
  // path is synchronous).
  async loadPartitioners(desc) {
    for (const e of desc.epochs) await this.partitionerOf(e);
  }

  async partitionerOf(ep) {
    const k = `${ep.partitioner.digest}/${ep.partitioner.config ?? ''}`;
    let p = this.parts.get(k);
    if (!p) {
      p = await this.client.partitioner(ep.partitioner);
      this.parts.set(k, p);
    }
    return p;
  }

  partitionerSync(ep) {
    let p = this.epochParts.get(ep); // per descriptor epoch object: no key string per record
    if (p === undefined) {
      p = this.parts.get(`${ep.partitioner.digest}/${ep.partitioner.config ?? ''}`);
      if (p) this.epochParts.set(ep, p);
    }
    return p;
  }

  // ---- starting and stopping ----

  /** Joins the group (run() and iteration call it; calling it first is optional). */
  start() {
    this.started ??= this.doStart().catch((e) => {
      this.fail(e);
      throw e;
    });
    return this.started;
  }

  async doStart() {
    await ensureGroup(this.client, this.kv, this.desc, this.group, this.o, (m) => this.log(m));
    const gk = await readGroupKeys(this.kv, this.topicId, this.group);
    this.takeStart(gk.start);
    // The descriptor read after the group's keys exist (spec/protocol.md §10.4: a retirement
    // that does not show in it checked this group's positions after they were written).
    {
      const { topic: t } = await this.client.topic(this.topic);
      if (t.id === this.topicId && t.epochs.length >= this.desc.epochs.length) {
        await this.loadPartitioners(t);
        this.desc = t;
      }
    }
    this.assignor = checkAssignor(gk.assignor, this.group, this.desc.name, this.o.assignor);
    this.watch = new PullReader(this.client, {
      stream: `KV_${GROUPS_BUCKET}`, filter: `${this.prefix}>`, lastPerSubject: true, batch: 256,
      heartbeat: this.o.heartbeat, idleCheck: Math.max(3 * this.o.heartbeat, 3000),
      onError: (e) => {
        this.log(`group watch: ${e.message}`);
        if (e?.code === 'permission') this.fail(e);
      },
      onRecreate: (why) => this.log(`group watch re-created: ${why}`),
    }).start();
    this.watchLoop().catch((e) => this.fail(new InternalError(`group watch: ${e?.message ?? e}`, { cause: e })));
    await Promise.race([this.watch.whenCaughtUp(), idle(5000)]);
    if (this.closing) return;
    this.eventsSub = this.client.nc.subscribe(`pctl.events.topic.${this.topic}`, { callback: () => this.refresh() });
    this.stopViolation = this.client.onViolation((subject, v) => {
      if (subject.startsWith('$KV.') || subject.startsWith('$JS.')) this.fail(permissionError(subject, v));
    });
    if (this.resetTo) this.noteReset(await applyResetTarget(this.client, this.kv, this.desc, this.group, this.resetTo, this.memberId));
    await this.heartbeat();
    if (this.closing) return;
    this.hbTimer = setInterval(() => this.tick(), this.o.heartbeat);
    this.commitTimer = setInterval(() => this.commitAll(false), this.o.commitInterval);
    await this.rebalance();
  }

  async tick() {
    if (this.closing || this.ticking) return; // a slow round: the next tick skips, not overlaps
    this.ticking = true;
    try {
      if (this.client.nc.isClosed()) {
        this.fail(new UnavailableError(`the connection of group ${this.group}'s member ${this.memberId} was closed under it; close consumers before their client`));
        return;
      }
      await this.heartbeat();
      await this.refresh();
      await this.rebalance();
    } catch (e) {
      this.fail(e instanceof PctlError ? e : new InternalError(`member ${this.memberId}: ${e?.message ?? e}`, { cause: e }));
    } finally {
      this.ticking = false;
    }
  }

  async heartbeat() {
    const body = { id: this.memberId, started: this.startedAt ??= new Date().toISOString(), heartbeat: new Date().toISOString(), owns: this.assignment };
    // Informational (spec/protocol.md §6): records held at the gate since start, and their wait.
    if (this.stats.gated > 0) {
      body.gated = this.stats.gated;
      body.gate_wait_ms = Math.round(this.stats.totalWaitMs);
    }
    try {
      await this.kv.put(memberKey(this.topicId, this.group, this.memberId), encoder.encode(JSON.stringify(body)));
    } catch (e) {
      if (e?.code === 'permission') this.fail(e);
      // otherwise transient: the next heartbeat retries
    }
  }

  async refresh() {
    if (this.closing) return;
    let t;
    try {
      ({ topic: t } = await this.client.topic(this.topic));
    } catch (e) {
      if (e?.code === 'not_found') this.fail(new NotFoundError(`topic ${this.topic} was deleted while group ${this.group} consumed it`, { cause: e }));
      return;
    }
    if (t.deleting) {
      this.fail(new NotFoundError(`topic ${this.topic} is being deleted; group ${this.group}'s member ${this.memberId} stops`));
      return;
    }
    if (t.id !== this.topicId) {
      this.fail(new NotFoundError(`topic ${this.topic} was deleted and created again (id ${this.topicId} is now ${t.id}); this member stops: start a new one for the new topic`));
      return;
    }
    if (t.epochs.length < this.desc.epochs.length) return;
    const grew = t.epochs.length > this.desc.epochs.length || maxPartitions(t) > maxPartitions(this.desc) || !!t.change !== !!this.desc.change;
    try {
      await this.loadPartitioners(t);
    } catch (e) {
      this.fail(e);
      return;
    }
    this.desc = t;
    for (const w of this.owned.values()) w.boundaryChanged();
    this.wakeAll();
    if (grew) this.rebalance();
  }

  // ---- the group watch ----

  async watchLoop() {
    const w = this.watch;
    for (;;) {
      const batch = await w.take();
      if (batch.length === 0) return;
      for (const e of batch) this.onGroupEntry(e);
    }
  }

  onGroupEntry(e) {
    const name = e.subject.slice(this.prefix.length);
    const dot = name.indexOf('.');
    if (dot < 0) return;
    const kind = name.slice(0, dot);
    const id = name.slice(dot + 1);
    const op = e.headers?.get('KV-Operation');
    const deleted = op === 'DEL' || op === 'PURGE';
    if (kind === 'm') {
      const time = e.tsMs;
      if (deleted) this.members.delete(id);
      else {
        const known = this.members.has(id);
        this.members.set(id, { time });
        if (!known && this.started) this.rebalance();
      }
      return;
    }
    if (kind === 'g' && id === 'assignment') {
      if (this.started && this.assignor === 'sticky') this.rebalance(); // the leader's new record
      return;
    }
    if (kind === 'g' && id === 'reset' && !deleted) {
      const r = json(e.data);
      if (r && Number.isInteger(r.generation)) this.noteReset(r);
      return;
    }
    if (kind !== 'p' || deleted) return;
    const q = Number(id);
    const ps = json(e.data);
    if (!Number.isInteger(q) || !ps) return;
    const gen = ps.generation ?? 0;
    if (gen > this.gen) this.fetchReset();
    this.noteState(q, gen, ps.position ?? 0);
    this.noteLease(q, e.seq, ps.owner ?? '', ps.lease_end ?? 0);
    const w = this.owned.get(q);
    if (w && w.rev && !w.releasing && !this.closing && e.seq > w.rev && (ps.owner !== this.memberId || gen !== w.gen)) {
      w.markLost(`partition ${q}: lost: ${ps.owner ? `taken over by ${ps.owner}` : 'released by another writer (a reset)'} at revision ${e.seq}`);
    }
  }

  // Who holds partition q's lease, as of KV revision rev (the latest revision wins).
  noteLease(q, rev, owner, leaseEnd) {
    const l = this.leases.get(q);
    if (!l || rev > l.rev) this.leases.set(q, { rev, owner, leaseEnd });
  }

  // Whether the group's position of q is past boundary b for keys-assigned (spec/protocol.md
  // §6.5): above b (the fence marker is passed, so keys revoked returned), or at b while nobody
  // holds q's lease and q is not assignable (a drained retired partition: no one reads its marker).
  pastBoundary(q, b) {
    const l = this.leases.get(q);
    const leased = !!l && rules.leaseLive(l.owner, l.leaseEnd, Date.now(), rules.maxClockSkew(this.o.sessionTimeout));
    return rules.pastBoundary(this.desc, q, b, (p) => this.effective(p), leased);
  }

  // A committed position seen (watch, own commit, direct read).
  noteState(q, gen, position) {
    const st = this.states.get(q);
    if (!st || gen > st.gen || (gen === st.gen && position > st.position)) {
      this.states.set(q, { gen, position });
      this.wakeWaiters(q);
    }
  }

  async fetchReset() {
    try {
      const e = await this.kv.get(resetKey(this.topicId, this.group));
      const r = e && !e.deleted ? json(e.value) : null;
      if (r && Number.isInteger(r.generation)) this.noteReset(r);
    } catch {
      // the watch brings it too
    }
  }

  /** The effective committed position of partition q at the current generation (§6.6). */
  effective(q) {
    const st = this.states.get(q);
    if (st && st.gen === this.gen) return st.position;
    if (this.gen > 0) return this.reset?.positions?.[q] ?? 0;
    return st ? st.position : 0;
  }

  // ---- reset (spec/protocol.md §6.6) ----

  noteReset(r) {
    if (r.generation <= this.gen) return;
    this.log(`reset to generation ${r.generation} (${r.to}${r.time ? ` ${new Date(r.time).toISOString()}` : ''}) by ${r.by}`);
    this.gen = r.generation;
    this.reset = r;
    this.pendingReset = r;
    // Stop delivering at once; the rebalance below releases the partitions under the new
    // generation and starts again from the reset positions.
    for (const w of this.owned.values()) w.halt();
    this.dropQueued();
    if (!this.o.keepDrainedOnReset) {
      this.drained = { gen: -1, through: 0 };
      this.passed = new Set();
      this.assignedKeys = new Set();
    } else {
      this.drained.gen = this.gen;
    }
    this.wakeAll();
    if (this.started) this.rebalance();
  }

  /**
   * Moves the whole group to 'beginning', 'end' or a time (a Date, unix milliseconds or an RFC
   * 3339 string) — spec/protocol.md §6.6. Resolves once the reset is committed and this member
   * has stopped what it delivered before; every member then goes on from the new positions, and
   * per-key order holds among the records delivered after it (gates close again). Returns the
   * reset {generation, to, time, positions}.
   */
  async seek(target) {
    const tgt = parseTarget(target);
    if (this.closing) throw new BadRequestError('consumer is closed');
    for (const w of this.owned.values()) w.halt();
    this.dropQueued();
    if (this.inHand) this.inHand = null;
    await ensureGroup(this.client, this.kv, this.desc, this.group, this.o, (m) => this.log(m));
    const r = await applyResetTarget(this.client, this.kv, this.desc, this.group, tgt, this.memberId);
    this.noteReset(r);
    if (this.started) await this.rebalance();
    return r;
  }

  // The group's g.start (spec/protocol.md §10.5): the epoch it started reading the current epoch
  // at. `e` is the key as readGroupKeys read it (null: none).
  takeStart(e) {
    if (!e) return;
    const st = json(e.value);
    if (!st || !Number.isSafeInteger(st.epoch) || st.epoch < 1) {
      throw new InternalError(`consumer group ${this.group}: its start key holds ${goQuote(decoder.decode(e.value).slice(0, 80))}`);
    }
    this.startEpoch = st.epoch;
  }

  // Whether a backfilled copy is skipped (spec/protocol.md §10.4): unless the group cannot have
  // delivered its origin (it started at the current epoch after the origin's epoch, or the
  // origin's epoch is retired). Sets m.backfill on a copy.
  skipsCopy(m) {
    const v = m.raw.headers?.get('Pctl-Backfill');
    if (!v || m.misplaced) return false;
    const o = parseOrigin(v);
    if (!o || o.epoch >= m.epoch) return false;
    m.backfill = o;
    return !((this.startEpoch > 0 && o.epoch < this.startEpoch) || originRetired(this.desc, o.epoch));
  }

  // ---- assignment (spec/protocol.md §6.2) ----

  liveMembers() {
    const now = Date.now();
    const out = [];
    for (const [id, m] of this.members) if (now - m.time < this.o.sessionTimeout) out.push(id);
    if (!out.includes(this.memberId)) out.push(this.memberId);
    return out.sort();
  }

  assignable(desc = this.desc) {
    return rules.assignable(desc, (q) => this.effective(q));
  }

  // The partitions this member should read (spec/protocol.md §6.2): by modulo, or by the sticky
  // record, which the leader rewrites when it no longer matches the group (§6.2.1). parts are
  // desc's assignable partitions: the record is compared with, computed from and written with
  // desc's current epoch, the rebalance's one view of the descriptor (§6.2.1 "One view per
  // rebalance"), never this.desc re-read after the await below (an epoch change delivered while
  // the record is fetched would give a record the new epoch with the old epoch's partitions).
  async wanted(members, parts, desc) {
    if (this.assignor !== 'sticky') {
      const me = members.indexOf(this.memberId);
      return new Set(parts.filter((_, i) => i % members.length === me));
    }
    const key = `${this.topicId}.${this.group}.g.assignment`;
    let rec = this.record;
    let rev = this.recordRev;
    let readOk = true;
    try {
      const e = await this.kv.get(key);
      rec = e && !e.deleted ? json(e.value) : null;
      rev = e ? e.revision : 0;
    } catch (e) {
      readOk = false;
      this.log(`read the group's assignment: ${e.message} (keeping the last one)`);
    }
    const epoch = desc.epochs[desc.epochs.length - 1].epoch;
    const previousView = this.lastView;
    this.lastView = members;
    // The view is whole once the group watch has delivered every member key (its snapshot).
    const complete = readOk && !!this.watch?.caughtUp;
    if (rules.stickyWrites({ record: rec, members, partitions: parts, epoch, me: this.memberId, complete, previousView })) {
      let next;
      let body;
      try {
        next = rules.nextAssignment(rec, members, parts, epoch, (e) => this.samplePartitions(desc, e), new Date().toISOString().replace(/\.\d+Z$/, 'Z'));
        body = rules.encodeAssignment(next, this.group);
      } catch (e) {
        if (e?.code === 'bad_request') throw e; // no retry mends it: the group cannot use sticky here
        throw new InternalError(`group ${this.group}: compute the sticky assignment: ${e?.message ?? e}`, { cause: e });
      }
      try {
        rev = rec ? await this.kv.update(key, encoder.encode(body), rev) : await this.kv.create(key, encoder.encode(body));
        rec = next;
        this.stats.assignments++;
        if (next.moved !== undefined) [this.stats.moved, this.stats.movedModulo] = [next.moved, next.moved_modulo];
        this.log(`wrote assignment round ${next.round} (epoch ${epoch}, ${members.length} members, ${parts.length} partitions, moved ${next.moved ?? '-'}, modulo would move ${next.moved_modulo ?? '-'})`);
      } catch (e) {
        if (e?.code === 'permission') throw e;
        this.log(`write the group's assignment: ${e.message} (the next rebalance reads the winner)`);
      }
    }
    this.record = rec;
    this.recordRev = rev;
    return new Set(rules.stickyWants(rec, this.memberId, parts));
  }

  // The partitions of the sticky assignor's key sample under epoch e of desc (§6.2.1 step 1).
  samplePartitions(desc, e) {
    const ep = rules.epochOf(desc, e);
    if (!ep) throw new NotFoundError(`topic ${desc.name} has no epoch ${e}`);
    const p = this.partitionerSync(ep);
    if (!p) throw new InternalError(`epoch ${e}'s partitioner is not loaded`);
    const k = `${ep.partitioner.digest}/${ep.partitioner.config ?? ''}/${ep.partitions}`;
    let out = this.samples.get(k);
    if (!out) {
      out = p.partitionMany(rules.STICKY_SAMPLE, ep.partitions);
      this.samples.set(k, out);
    }
    return out;
  }

  async rebalance() {
    if (this.rebalancing) {
      this.rebalanceAgain = true;
      return this.rebalanceDone;
    }
    this.rebalancing = true;
    let done;
    this.rebalanceDone = new Promise((r) => { done = r; });
    try {
      do {
        this.rebalanceAgain = false;
        if (this.closing) break;
        await this.rebalanceOnce();
      } while (this.rebalanceAgain && !this.closing);
    } catch (e) {
      this.fail(e instanceof PctlError ? e : new InternalError(`rebalance: ${e?.message ?? e}`, { cause: e }));
    } finally {
      this.rebalancing = false;
      done();
    }
  }

  async rebalanceOnce() {
    this.stats.rebalances++;
    const reset = this.pendingReset;
    this.pendingReset = null;
    const members = this.liveMembers();
    // One view of the descriptor for the assignment (spec/protocol.md §6.2.1): a descriptor that
    // arrives during this rebalance is the next one's (refresh() asks for it).
    const desc = this.desc;
    const want = await this.wanted(members, this.assignable(desc), desc);
    if (this.closing) return;
    const drop = [...this.owned.values()].filter((w) => reset || !want.has(w.partition) || w.lost || w.gen !== this.gen);
    if (drop.length > 0) {
      await Promise.all(drop.map((w) => w.stop()));
      // A lost partition's new owner loads its keys itself: what this member holds of them may
      // be stale, and is loaded again if the partition comes back (spec/protocol.md §6.9).
      for (const w of drop) if (w.lost) this.stateForget(w.partition);
      const lost = drop.filter((w) => w.lost).map((w) => w.partition).sort((a, b) => a - b);
      const revoked = drop.map((w) => w.partition).sort((a, b) => a - b);
      await this.callback('onRevoked', revoked, { lost });
      await Promise.all(drop.map((w) => (w.lost ? null : this.release(w))));
      for (const w of drop) if (this.owned.get(w.partition) === w) this.owned.delete(w.partition);
    }
    if (reset) this.home.clear(); // lost partitions' keys too: every key is loaded again after a reset
    if (reset) await this.callback('onReset', { ...reset });
    if (this.closing) return;
    // Parents first (spec/protocol.md §6.7): the partitions whose next records are of the oldest
    // epoch, acquired together, then the next epoch's; their workers start in that order. Only an
    // order (the gate decides), so it reads the newest descriptor, as the Go client does: it holds
    // every partition of desc, and knows boundaries desc may not.
    const fresh = [];
    for (const group of rules.parentFirst(this.desc, [...want], (q) => this.effective(q))) {
      if (this.closing) break;
      const got = await Promise.all(group.filter((q) => !this.owned.has(q)).map((q) => this.acquire(q)));
      for (const w of got) if (w) fresh.push(w);
    }
    if (fresh.length === 0) return;
    await this.callback('onAssigned', fresh.map((w) => w.partition).sort((a, b) => a - b));
    for (const w of fresh) if (this.owned.get(w.partition) === w && !w.halted) w.start();
  }

  async callback(name, ...args) {
    const f = this.cb[name];
    if (!f) return;
    try {
      await f(...args);
    } catch (e) {
      this.fail(new PctlError('internal', `${name} callback failed: ${e?.message ?? e}`, { cause: e }));
    }
  }

  // ---- leases (spec/protocol.md §6.3) ----

  async acquire(q) {
    const key = partitionKey(this.topicId, this.group, q);
    const gen = this.gen;
    let e;
    try {
      e = await this.kv.get(key);
    } catch (err) {
      this.log(`partition ${q}: read lease: ${err.message}`);
      return null;
    }
    let ps = e && !e.deleted ? json(e.value) ?? {} : null;
    const now = Date.now();
    if (ps) {
      const pgen = ps.generation ?? 0;
      if (pgen > gen) {
        await this.fetchReset(); // a reset we have not seen yet: next rebalance
        return null;
      }
      if (!rules.mayAcquire(this.memberId, ps.owner, ps.lease_end, now, rules.maxClockSkew(this.o.sessionTimeout))) return null; // leased
      if (ps.owner && ps.owner !== this.memberId) this.log(`partition ${q}: lease of ${ps.owner} expired ${now - ps.lease_end}ms ago; taking over at ${ps.position}`);
      if (pgen < gen) ps = { position: this.reset?.positions?.[q] ?? 0 }; // apply the reset
    }
    // A missing key is at 0, or at the reset's position after a reset (§6.6): the gates read the
    // same effective position.
    const position = ps ? ps.position ?? 0 : (gen > 0 ? this.reset?.positions?.[q] ?? 0 : 0);
    const before = Date.now();
    const body = partitionBody({ owner: this.memberId, lease_end: before + this.o.sessionTimeout, position, generation: gen });
    let rev;
    try {
      rev = e ? await this.kv.update(key, body, e.revision) : await this.kv.create(key, body);
    } catch (err) {
      if (!(err instanceof CasConflict)) this.log(`partition ${q}: acquire: ${err.message}`);
      return null;
    }
    if (gen !== this.gen || this.closing) {
      // A reset (or close) came meanwhile: give it back at once.
      this.kv.update(key, partitionBody({ position, generation: gen }), rev).catch(() => {});
      return null;
    }
    this.log(`partition ${q}: acquired at ${position} (generation ${gen})`);
    this.noteState(q, gen, position);
    const w = new Worker(this, q, { position, rev, gen, leaseUntil: before + this.o.sessionTimeout });
    this.owned.set(q, w);
    return w;
  }

  async release(w) {
    if (w.releasing) return w.releasing;
    w.releasing = (async () => {
      // Keys revoked runs before a release at or past a boundary (spec/protocol.md §6.5): a
      // drained retired partition has no next owner to run it.
      if (w.gen === this.gen) await this.passBoundaries(w);
      if (this.state) {
        try {
          await this.statePartition(w.partition);
        } catch (e) {
          // Not released: its lease expires, the next owner loads what is durable.
          this.log(`${e.message} (partition ${w.partition} not released: its lease expires)`);
          this.fail(e);
          return;
        }
      }
      await w.commitIdle();
      const key = partitionKey(this.topicId, this.group, w.partition);
      const gen = this.gen;
      try {
        if (w.gen === gen) {
          const body = partitionBody({ position: w.position, generation: gen });
          try {
            await this.kv.update(key, body, w.rev);
          } catch (e) {
            // The last commit's answer was lost: if the key holds exactly what it wrote, it was
            // ours, and the release goes on from its revision (spec/protocol.md §6.3). Otherwise
            // the partition stayed leased to this member until its lease expired, and the member
            // it went to waited for that.
            let cur = e instanceof CasConflict ? await w.ownUnanswered(key) : null;
            if (cur === UNREAD) cur = await w.ownUnanswered(key); // read once more
            if (cur === UNREAD) {
              this.log(`partition ${w.partition}: not released: its key could not be read back (its lease expires)`);
              return;
            }
            if (!cur) throw e;
            w.unsure = null;
            this.log(`partition ${w.partition}: the commit whose answer was lost was stored (revision ${cur.revision}); releasing from it`);
            await this.kv.update(key, body, cur.revision);
          }
          this.noteState(w.partition, gen, w.position);
        } else if (this.reset) {
          // A reset came: move our key to it (spec/protocol.md §6.6, members step 3).
          await applyResetToKey(this.kv, this.topicId, this.group, w.partition, this.reset, w.rev);
        }
      } catch (e) {
        if (!(e instanceof CasConflict)) this.log(`partition ${w.partition}: release: ${e.message}`);
      }
    })();
    return w.releasing;
  }

  async commitAll(renew) {
    if (this.closing && !renew) return;
    await Promise.all([...this.owned.values()].map((w) => w.commit(renew)));
  }

  /** Commits every acknowledged position now; resolves when written. */
  async commit() {
    await this.commitAll(true);
  }

  // ---- placement (spec/protocol.md §6.8) ----

  /**
   * Whether a record is where its epoch's partitioner puts its key: null (in place, or keyless),
   * a Misplacement {expected, reason}, or LATER when it takes a newer descriptor or a partitioner
   * not loaded yet (placementAsync). Reasons are worded as the Go client words them.
   */
  placement(w, m) {
    const h = m.raw.headers;
    if (!h || !h.has('Pctl-Key')) return null; // keyless: any partition will do
    if (m.key === null) {
      const v = h.get('Pctl-Key');
      return { expected: -1, reason: `its Pctl-Key header ${goQuote([...v].slice(0, 40).join(''))} is not b64:<standard base64>` };
    }
    const sub = m.sub;
    if (!sub) return { expected: -1, reason: `its subject ${goQuote(m.raw.subject)} is not an epoch's record subject` };
    if (sub.partition !== w.partition) return { expected: -1, reason: `its subject ${goQuote(m.raw.subject)} names partition ${sub.partition}` };
    const t = this.desc;
    if (keySubjects(t) && sub.token !== keyToken(m.key)) return { expected: -1, reason: `its subject ${goQuote(m.raw.subject.slice(0, 80))} does not end with its key's token (a compacted or backfilled topic's record subject names its key, spec/protocol.md §10.1)` };
    if (!keySubjects(t) && sub.token !== '') return { expected: -1, reason: `its subject ${goQuote(m.raw.subject.slice(0, 80))} has a key token, but the topic has no key subjects (neither compacted nor backfilled)` };
    const ep = epochOf(t, sub.epoch);
    if (!ep) {
      if (sub.epoch <= t.epochs[t.epochs.length - 1].epoch) return { expected: -1, reason: `the topic has no epoch ${sub.epoch}` };
      return LATER; // an epoch newer than our descriptor: wait for the descriptor
    }
    const f = this.partitionerSync(ep);
    if (!f) return LATER;
    const want = f.partition(m.key, ep.partitions);
    if (want !== w.partition) return { expected: want, reason: `epoch ${sub.epoch}'s partitioner (${ep.partitions} partitions) puts the key in partition ${want}` };
    return null;
  }

  async placementAsync(w, m) {
    for (;;) {
      const mp = this.placement(w, m);
      if (mp !== LATER) return mp;
      if (w.halted) return null;
      await this.refresh();
      await this.loadPartitioners(this.desc);
      if (this.placement(w, m) === LATER) await sleep(50);
    }
  }

  // ---- gating (spec/protocol.md §6.5) ----

  drainedThrough() {
    const t = this.desc;
    const d = rules.drainedThrough(t, this.drained.gen === this.gen ? this.drained.through : t.epochs[0].epoch - 1, (q) => this.effective(q));
    this.drained = { gen: this.gen, through: d };
    return d;
  }

  /**
   * Gates a keyed record: null when it may be delivered now, else a promise that resolves when
   * it may (or when its worker stops). A record of epoch x waits until, for every epoch e < x the
   * group has not fully drained, the key's partition q_e = f_e(k, N_e) has a committed position
   * >= its boundary in e (its own partition needs no wait: spec/protocol.md §6.7).
   */
  gate(w, m) {
    const t = this.desc;
    const x = m.epoch;
    if (x <= t.epochs[0].epoch) return null;
    const prev = epochOf(t, x - 1);
    if (!ended(prev) || !epochOf(t, x)) return this.gateSlow(w, m);
    const d = this.o.gating ? this.drainedThrough() : x - 1;
    const f = (ep) => {
      const p = this.partitionerSync(ep);
      return p ? p.partition(m.key, ep.partitions) : null;
    };
    const g = rules.gateRecord(t, d, x, w.partition, f, (q) => this.effective(q));
    if (!g) return this.gateSlow(w, m);
    if (g.refresh) return this.gateSlow(w, m);
    const waits = g.waits.length ? g.waits.map((c) => [c.partition, c.boundary, c.epoch]) : null;
    let assigned = null;
    if (this.cb.onKeysAssigned && g.assigned) {
      const k = `${w.partition}/${x}/${g.parent}`;
      if (!this.assignedKeys.has(k)) assigned = { k, parent: g.parent, boundary: g.assigned.boundary };
    }
    if (!waits && !assigned) return null;
    return this.gateWait(w, m, waits, assigned);
  }

  async gateSlow(w, m) {
    // The record is newer than our descriptor, or a partitioner is not loaded yet.
    for (;;) {
      const t = this.desc;
      if (ended(epochOf(t, m.epoch - 1)) && epochOf(t, m.epoch)) break;
      if (w.halted) return;
      await this.refresh();
      if (ended(epochOf(this.desc, m.epoch - 1)) && epochOf(this.desc, m.epoch)) break;
      await sleep(50);
    }
    await this.loadPartitioners(this.desc);
    const g = this.gate(w, m);
    if (g) await g;
  }

  async gateWait(w, m, waits, assigned) {
    const start = Date.now();
    const gen = this.gen;
    if (waits) {
      for (const [q, boundary, e] of waits) {
        let logged = false;
        while (this.effective(q) < boundary) {
          if (w.halted || this.gen !== gen) return;
          if (!logged && Date.now() - start > 3 * this.o.sessionTimeout) {
            logged = true;
            this.log(`partition ${w.partition}: record ${m.seq} (epoch ${m.epoch}) still waits for partition ${q} to reach ${boundary} (epoch ${e} boundary); the group is at ${this.effective(q)}`);
          }
          await this.waitPosition(q, boundary, this.o.heartbeat);
          if (this.effective(q) < boundary && !w.halted) await this.fetchPosition(q);
        }
      }
      const d = Date.now() - start;
      this.stats.gated++;
      this.stats.totalWaitMs += d;
      if (d > this.stats.maxWaitMs) this.stats.maxWaitMs = d;
    }
    if (assigned) {
      // Keys assigned waits until the parent is past its boundary, not merely at it: the old
      // owner may have committed the boundary while its keys-revoked callback still runs.
      const { parent: q, boundary: b } = assigned;
      while (!this.pastBoundary(q, b)) {
        if (w.halted || this.gen !== gen) return;
        await this.waitPosition(q, b + 1, this.o.heartbeat);
        if (!this.pastBoundary(q, b) && !w.halted) await this.fetchPosition(q);
      }
    }
    if (assigned && !w.halted && this.gen === gen && !this.assignedKeys.has(assigned.k)) {
      this.assignedKeys.add(assigned.k);
      const t = this.desc;
      const prev = epochOf(t, m.epoch - 1);
      const next = epochOf(t, m.epoch);
      const fOld = this.partitionerSync(prev);
      const fNew = this.partitionerSync(next);
      const child = w.partition;
      const parent = assigned.parent;
      await this.callback('onKeysAssigned', {
        topic: this.topic, fromEpoch: prev.epoch, toEpoch: next.epoch, partition: child, parent,
        moved: (k) => fOld.partition(k, prev.partitions) === parent && fNew.partition(k, next.partitions) === child,
      });
    }
  }

  // Resolves when q's effective position may have reached boundary, or after ms.
  waitPosition(q, boundary, ms) {
    return new Promise((resolve) => {
      let set = this.waiters.get(q);
      if (!set) this.waiters.set(q, (set = new Set()));
      const entry = { boundary, resolve: null };
      const timer = setTimeout(() => entry.resolve(), ms);
      entry.resolve = () => {
        clearTimeout(timer);
        set.delete(entry);
        resolve();
      };
      set.add(entry);
    });
  }

  wakeWaiters(q) {
    const set = this.waiters.get(q);
    if (!set) return;
    const pos = this.effective(q);
    for (const e of [...set]) if (pos >= e.boundary) e.resolve();
  }

  wakeAll() {
    for (const set of this.waiters.values()) for (const e of [...set]) e.resolve();
  }

  async fetchPosition(q) {
    try {
      const e = await this.kv.get(partitionKey(this.topicId, this.group, q));
      const ps = e && !e.deleted ? json(e.value) : null;
      if (ps) {
        if ((ps.generation ?? 0) > this.gen) await this.fetchReset();
        this.noteState(q, ps.generation ?? 0, ps.position ?? 0);
        this.noteLease(q, e.revision, ps.owner ?? '', ps.lease_end ?? 0);
      }
    } catch {
      // the watch brings it too
    }
  }

  // Waits until the descriptor shows epoch e ended (a fence marker read before activation).
  async ensureEnded(e, w) {
    while (!ended(epochOf(this.desc, e)) && !w.halted && !this.closing) {
      await this.refresh();
      if (ended(epochOf(this.desc, e))) break;
      await sleep(50);
    }
  }

  // ---- key-level revocation (KIP-253) ----

  async passBoundaries(w) {
    const t = this.desc;
    const q = w.partition;
    const list = rules.revokes(t, q, w.position, (e) => this.passed.has(`${q}/${e}`));
    for (const en of list) this.passed.add(`${q}/${en}`);
    for (const en of list) {
      const e = epochOf(t, en);
      const next = epochOf(t, en + 1);
      if (this.cb.onKeysRevoked) {
        const fOld = await this.partitionerOf(e);
        const fNew = await this.partitionerOf(next);
        await this.callback('onKeysRevoked', {
          topic: this.topic, fromEpoch: e.epoch, toEpoch: next.epoch, partition: q, parent: q,
          moved: (key) => fOld.partition(key, e.partitions) === q && fNew.partition(key, next.partitions) !== q,
        });
      }
      // The state handover runs after the application's keys-revoked callback (which may still
      // write the state), before the member commits past the boundary.
      if (this.state && !(await this.stateKeysRevoked(w, e, next))) break;
    }
    return list.length > 0;
  }

  // ---- state handover (spec/protocol.md §6.9) ----

  // Runs fn after every earlier state call has returned: one call at a time per consumer.
  stateRun(fn) {
    const p = this.stateQ.then(fn);
    this.stateQ = p.catch(() => {});
    return p;
  }

  // Loads a key's state before its record is delivered from w's partition (after its gate);
  // the member then holds it for that partition. False when the load failed (the member stops).
  async stateLoad(w, m, k) {
    try {
      await this.stateRun(() => this.state.load(keySet(this.topic, 'key-arrives', w.partition, [k])));
    } catch (e) {
      this.fail(new PctlError('internal', `state load of key ${goQuote(k)} (partition ${w.partition}) failed: ${e?.message ?? e}`, { cause: e }));
      w.halt();
      return false;
    }
    this.home.set(k, w.partition);
    return true;
  }

  // Keys revoked (q, e): the held keys of q that move to a partition this member does not own
  // are flushed; the others stay, held for their new partition. False when the flush failed.
  async stateKeysRevoked(w, e, next) {
    const q = w.partition;
    try {
      await this.stateRun(async () => {
        const fOld = await this.partitionerOf(e);
        const fNew = await this.partitionerOf(next);
        const leave = [];
        for (const [k, h] of this.home) {
          if (h !== q) continue;
          const key = Buffer.from(k, 'latin1');
          if (fOld.partition(key, e.partitions) !== q) continue;
          const p = fNew.partition(key, next.partitions);
          if (p === q) continue;
          if (this.owned.has(p)) this.home.set(k, p);
          else leave.push(k);
        }
        if (leave.length === 0) return;
        await this.state.flush(keySet(this.topic, 'keys-revoked', q, leave, e.epoch, next.epoch));
        for (const k of leave) if (this.home.get(k) === q) this.home.delete(k);
      });
    } catch (err) {
      this.fail(new PctlError('internal', `state flush (keys revoked from partition ${q}, epoch ${e.epoch}) failed: ${err?.message ?? err}`, { cause: err }));
      w.halt();
      return false;
    }
    return true;
  }

  // Flushes the keys held for partition q (its worker has stopped); throws when the flush fails.
  async statePartition(q) {
    await this.stateRun(async () => {
      const keys = [];
      for (const [k, h] of this.home) if (h === q) keys.push(k);
      if (keys.length === 0) return;
      try {
        await this.state.flush(keySet(this.topic, 'partition-revoked', q, keys));
      } catch (e) {
        throw new PctlError('internal', `state flush of partition ${q} failed: ${e?.message ?? e}`, { cause: e });
      }
      for (const k of keys) if (this.home.get(k) === q) this.home.delete(k);
    });
  }

  // Stops holding the keys held for q without flushing them (q's lease was lost).
  stateForget(q) {
    for (const [k, h] of this.home) if (h === q) this.home.delete(k);
  }

  // At a partition's start: boundaries below the position were passed by an earlier owner, who
  // ran keys revoked for them (spec/protocol.md §6.5); one at the position is run again when the
  // marker after it is read (that owner may have stopped before running it).
  markPassedBelow(w) {
    for (const e of rules.passed(this.desc, w.partition, w.position)) this.passed.add(`${w.partition}/${e}`);
  }

  // ---- delivery ----

  // A record passed its gate and its lease check: hand it to the application.
  deliver(w, m) {
    if (this.mode === 'run') return this.deliverRun(w, m);
    this.queue.push(m);
    w.queued++;
    if (this.queueWaiter) {
      const r = this.queueWaiter;
      this.queueWaiter = null;
      r();
    }
    if (w.queued >= this.o.prefetch) return w.waitSpace();
    return null;
  }

  async deliverRun(w, m) {
    w.inHandler = true;
    w.lastHanded = m.seq;
    try {
      await this.handler(m);
    } catch (e) {
      this.fail(new PctlError('internal', `handler failed on partition ${m.partition} seq ${m.seq}: ${e?.message ?? e}`, { cause: e }));
      w.halt();
      return;
    } finally {
      w.inHandler = false;
    }
    this.stats.delivered++;
    if (this.o.autoCommit) m.ack();
  }

  nextTs() {
    // Delivery times for "ts" (pctl consume --timestamps): wall-clock nanoseconds, increasing.
    let ts = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e3)) * 1000n;
    if (ts <= this.lastTs) ts = this.lastTs + 1n;
    this.lastTs = ts;
    return ts;
  }

  dropQueued() {
    for (let i = this.qhead; i < this.queue.length; i++) {
      const w = this.queue[i].worker;
      w.queued = 0;
      w.wakeSpace();
    }
    this.queue = [];
    this.qhead = 0;
  }

  async next() {
    if (this.inHand) {
      const m = this.inHand;
      this.inHand = null;
      if (this.o.autoCommit) m.ack();
    }
    for (;;) {
      if (this.error) throw this.error;
      while (this.qhead < this.queue.length) {
        const m = this.queue[this.qhead++];
        if (this.qhead === this.queue.length) {
          this.queue = [];
          this.qhead = 0;
        } else if (this.qhead > 8192) {
          this.queue = this.queue.slice(this.qhead);
          this.qhead = 0;
        }
        const w = m.worker;
        if (w.queued > 0) w.queued--;
        w.wakeSpace();
        if (w.halted || w.gen !== this.gen) continue; // revoked, lost or reset: not delivered
        if (!w.leaseOk()) {
          await w.holdLease();
          if (w.halted) continue;
        }
        this.stats.delivered++;
        this.inHand = m;
        w.lastHanded = m.seq;
        return { value: m, done: false };
      }
      if (this.closing) return { value: undefined, done: true };
      await new Promise((r) => { this.queueWaiter = r; });
    }
  }

  [Symbol.asyncIterator]() {
    if (this.mode === 'run') throw new BadRequestError('this consumer runs a handler (run()); iterate another one');
    this.mode = 'iterate';
    this.start().catch(() => {});
    return {
      next: () => this.next(),
      return: async () => {
        // Leaving the loop (break, return, a throw) counts the record in hand as processed, as
        // Kafka's auto-commit does on close; autoCommit: false leaves it to m.ack().
        if (this.inHand && this.o.autoCommit) this.inHand.ack();
        this.inHand = null;
        await this.close();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]() { return this; },
    };
  }

  /**
   * Runs `handler(message)` for every record until close() or a failure: concurrently for
   * different partitions, one at a time within a partition. A handler that throws stops the
   * member (the record is delivered again to the group). Resolves when closed; rejects with the
   * error that stopped it.
   */
  async run(handler) {
    if (typeof handler !== 'function') throw new BadRequestError('run(handler): handler is a function (message) => Promise');
    if (this.mode) throw new BadRequestError(`this consumer is ${this.mode === 'run' ? 'running already' : 'being iterated'}`);
    this.mode = 'run';
    this.handler = handler;
    await this.start();
    await new Promise((resolve) => { this.onClosed = resolve; if (this.closed) this.closed.then(resolve); });
    await this.closed;
    if (this.error) throw this.error;
  }

  fail(err) {
    if (this.error || this.closing) return;
    this.error = err;
    this.log(`failed: ${err.message}`);
    this.close().catch(() => {});
  }

  /** Stops: commits what was acknowledged, hands the partitions back, leaves the group. */
  close() {
    if (this.closed) return this.closed;
    this.closing = true;
    this.closed = (async () => {
      clearInterval(this.hbTimer);
      clearInterval(this.commitTimer);
      if (this.queueWaiter) {
        const r = this.queueWaiter;
        this.queueWaiter = null;
        r();
      }
      this.wakeAll();
      try {
        await this.started;
      } catch {
        // failed to start: nothing to hand back
      }
      while (this.rebalancing) await this.rebalanceDone;
      const ws = [...this.owned.values()];
      await Promise.all(ws.map((w) => w.stop()));
      this.dropQueued();
      if (ws.length) await this.callback('onRevoked', ws.map((w) => w.partition).sort((a, b) => a - b), { lost: ws.filter((w) => w.lost).map((w) => w.partition) });
      await Promise.all(ws.filter((w) => !w.lost).map((w) => this.release(w)));
      this.owned.clear();
      if (this.started) {
        try {
          await this.kv.delete(memberKey(this.topicId, this.group, this.memberId));
        } catch {
          // the session timeout ends the membership
        }
      }
      this.watch?.stop();
      try {
        this.eventsSub?.unsubscribe();
      } catch {
        // connection closed
      }
      this.stopViolation?.();
      this.onClosed?.();
    })();
    return this.closed;
  }
}

/**
 * One owned partition: reads its stream from the committed position + 1, skips fence markers,
 * runs the boundary steps, gates keyed records and delivers them; tracks acknowledgements so that
 * only a contiguous acknowledged prefix is committed (spec/protocol.md §6.7).
 */
class Worker {
  constructor(cn, q, { position, rev, gen, leaseUntil }) {
    this.cn = cn;
    this.partition = q;
    this.stream = `PCTL_${cn.topic}_${q}`;
    this.position = position; // every record up to here is acknowledged
    this.committed = position;
    this.rev = rev;
    this.gen = gen;
    this.leaseUntil = leaseUntil;
    this.lost = false;
    this.halted = false; // delivers nothing more
    this.ua = []; // tracked (delivered or skipped) sequences not yet folded into position
    this.uh = 0;
    this.ackedSet = new Set();
    this.queued = 0;
    this.spaceWaiter = null;
    this.posWaiters = [];
    this.committing = null;
    this.commitAgain = false;
    this.inHandler = false;
    this.lastHanded = 0; // the last record given to the application
    this.nextB = 0;
    this.subjEpoch = new Map(); // subject -> {epoch, partition} | null
    this.boundaryChanged();
  }

  start() {
    const cn = this.cn;
    this.reader = new PullReader(cn.client, {
      stream: this.stream, startSeq: this.position + 1, heartbeat: Math.min(cn.o.heartbeat, 1000),
      filter: `pctl.data.${cn.topic}.>`, probe: 'stream',
      onError: (e) => {
        cn.log(`partition ${this.partition}: read: ${e.message}`);
        if (e?.code === 'permission') cn.fail(e);
      },
      onRecreate: (why) => {
        cn.stats.readerRecreated[why] = (cn.stats.readerRecreated[why] ?? 0) + 1;
        cn.log(`partition ${this.partition}: reader re-created: ${why}`);
      },
    }).start();
    this.loop = this.run().catch((e) => cn.fail(e instanceof PctlError ? e : new InternalError(`partition ${this.partition}: ${e?.message ?? e}`, { cause: e })));
  }

  // The smallest boundary at or above the position that this generation has not passed yet.
  boundaryChanged() {
    const t = this.cn.desc;
    let b = Infinity;
    for (let i = 0; i + 1 < t.epochs.length; i++) {
      const e = t.epochs[i];
      if (this.partition >= (e.boundaries?.length ?? 0)) continue;
      if (this.cn.passed.has(`${this.partition}/${e.epoch}`)) continue;
      if (e.boundaries[this.partition] < b) b = e.boundaries[this.partition];
    }
    this.nextB = b;
  }

  async run() {
    const cn = this.cn;
    cn.markPassedBelow(this);
    this.boundaryChanged();
    while (!this.halted) {
      const batch = await this.reader.take(256);
      for (const e of batch) {
        if (this.halted) break;
        const p = this.handle(e);
        if (p) await p;
      }
    }
  }

  // {epoch, partition, token} of a record subject pctl.data.<topic>.<epoch>.<partition>[.<kt>]
  // (as Go's wire.SplitRecordSubject reads it; token '' without the sixth), or null. Compacted
  // topics' subjects (one per key) are not cached.
  subjectOf(subject) {
    let s = this.subjEpoch.get(subject);
    if (s === undefined) {
      const t = subject.split('.');
      const int = (x) => (/^[+-]?[0-9]+$/.test(x) && Number.isSafeInteger(Number(x)) ? Number(x) : null);
      s = (t.length === 5 || (t.length === 6 && t[5] !== '')) && t[0] === 'pctl' && t[1] === 'data' && int(t[3]) !== null && int(t[4]) !== null ? { epoch: int(t[3]), partition: int(t[4]), token: t[5] ?? '' } : null;
      if (t.length === 6) return s;
      this.subjEpoch.set(subject, s);
    }
    return s;
  }

  // One message of the stream: returns null when done synchronously, else a promise.
  handle(e) {
    if (e.seq > this.nextB || (e.headers && e.headers.has('Pctl-Fence'))) return this.handleSlow(e);
    const m = this.message(e);
    const mp = this.cn.placement(this, m);
    if (mp === LATER) return this.handleRecord(m);
    if (mp) return this.handleMisplaced(m, mp);
    if (this.cn.skipsCopy(m)) return this.skip(m);
    if (m.key !== null && this.cn.o.gating) {
      const g = this.cn.gate(this, m);
      if (g) return this.afterGate(g, m);
    }
    return this.deliver(m);
  }

  message(e) {
    const sub = this.subjectOf(e.subject);
    const m = new Message(this, e, sub ? sub.epoch : 0);
    m.sub = sub;
    return m;
  }

  // The slow path of a record: its placement may need a newer descriptor or a partitioner.
  async handleRecord(m) {
    const mp = await this.cn.placementAsync(this, m);
    if (this.halted) return;
    if (mp) {
      const p = this.handleMisplaced(m, mp);
      if (p) await p;
      return;
    }
    if (this.cn.skipsCopy(m)) {
      const p = this.skip(m);
      if (p) await p;
      return;
    }
    if (m.key !== null && this.cn.o.gating) {
      const g = this.cn.gate(this, m);
      if (g) await g;
    }
    const p = this.deliver(m);
    if (p) await p;
  }

  // A misplaced record (spec/protocol.md §6.8): reported, then the policy.
  handleMisplaced(m, mp) {
    const cn = this.cn;
    m.misplaced = mp;
    cn.stats.misplaced++;
    cn.log(`partition ${this.partition}: misplaced record at ${m.seq} (epoch ${m.epoch}, key ${m.key === null ? '-' : goQuote(m.key.toString('latin1'))}): ${mp.reason}`);
    try {
      cn.cb.onMisplaced?.(m);
    } catch (e) {
      cn.fail(new PctlError('internal', `onMisplaced callback failed: ${e?.message ?? e}`, { cause: e }));
      return null;
    }
    switch (cn.o.misplaced) {
      case 'deliver':
        return this.deliver(m); // flagged, not gated, no key-level callbacks
      case 'skip':
        return this.skip(m);
      default:
        cn.fail(new MisplacedError(cn.topic, this.partition, m, mp));
        this.halt();
        return null;
    }
  }

  // Passes a record without delivering it (a misplaced one under 'skip', a backfilled copy whose
  // origin the group delivered: spec/protocol.md §10.4), like a fence marker.
  skip(m) {
    if (!this.leaseOk()) return this.holdLease().then(() => { if (!this.halted) { this.track(m.seq); this.ack(m.seq); } });
    this.track(m.seq);
    this.ack(m.seq);
    return null;
  }

  async handleSlow(e) {
    const cn = this.cn;
    const fence = e.headers?.get('Pctl-Fence');
    if (fence) {
      // A fence marker (spec/protocol.md §6.4): the epoch before it ended at seq - 1. Know its
      // boundary before going on, then pass it like a record.
      await cn.ensureEnded(Number(fence) - 1, this);
      this.boundaryChanged();
    }
    if (e.seq > this.nextB) {
      // Past a boundary of this partition: everything up to it is acknowledged, keys-revoked
      // runs and the position is committed before anything after it is delivered.
      await this.waitPosition(this.nextB);
      if (this.halted) return;
      await cn.passBoundaries(this);
      this.boundaryChanged();
    }
    if (this.halted) return;
    if (fence) {
      // Past the marker (keys revoked returned above): commit at once, which opens the children's
      // gates and their keys-assigned steps.
      this.track(e.seq);
      this.ack(e.seq);
      await this.commit(false, true);
      return;
    }
    await this.handleRecord(this.message(e));
  }

  async afterGate(g, m) {
    await g;
    const p = this.deliver(m);
    if (p) await p;
  }

  deliver(m) {
    if (this.halted) return null;
    const cn = this.cn;
    if (cn.state && m.key !== null && !m.misplaced) {
      // The key's state, after its gate: every older record of it is committed (§6.9).
      const k = m.key.toString('latin1');
      const h = cn.home.get(k);
      if (h === undefined) return this.loadThenDeliver(m, k);
      if (h !== this.partition) cn.home.set(k, this.partition); // it moved here from a partition of ours
    }
    if (!this.leaseOk()) return this.deliverLater(m);
    this.track(m.seq);
    return this.cn.deliver(this, m);
  }

  async loadThenDeliver(m, k) {
    if (!(await this.cn.stateLoad(this, m, k)) || this.halted) return;
    const p = this.deliver(m);
    if (p) await p;
  }

  async deliverLater(m) {
    await this.holdLease();
    if (this.halted) return;
    this.track(m.seq);
    const p = this.cn.deliver(this, m);
    if (p) await p;
  }

  // ---- acknowledgements ----

  track(seq) { this.ua.push(seq); }

  ack(seq) {
    if (this.lost || seq <= this.position) return;
    if (this.ua[this.uh] !== seq) {
      this.ackedSet.add(seq);
      return;
    }
    this.uh++;
    this.position = seq;
    while (this.uh < this.ua.length && this.ackedSet.has(this.ua[this.uh])) {
      const s = this.ua[this.uh++];
      this.ackedSet.delete(s);
      this.position = s;
    }
    if (this.uh === this.ua.length) {
      this.ua = [];
      this.uh = 0;
    } else if (this.uh > 4096) {
      this.ua = this.ua.slice(this.uh);
      this.uh = 0;
    }
    if (this.posWaiters.length) {
      const keep = [];
      for (const w of this.posWaiters) if (this.position >= w.pos) w.resolve(); else keep.push(w);
      this.posWaiters = keep;
    }
  }

  get unacked() { return this.ua.length - this.uh; }

  waitPosition(pos) {
    if (this.position >= pos || this.halted) return Promise.resolve();
    return new Promise((resolve) => this.posWaiters.push({ pos, resolve }));
  }

  // ---- leases and commits ----

  leaseOk() { return rules.mayDeliver(this.leaseUntil, Date.now(), this.cn.o.sessionTimeout); }

  async holdLease() {
    while (!this.halted && !this.leaseOk()) {
      await this.commit(true);
      if (this.halted || this.leaseOk()) return;
      await sleep(20);
    }
  }

  /**
   * Writes the acknowledged position (renewing the lease), by compare-and-set; one write at a
   * time. With renew false it writes only when the position moved or a third of the lease is
   * used. A lost compare-and-set means another member took the partition: stop at once.
   */
  commit(renew, force = false) {
    if (this.committing) {
      this.commitAgain = true;
      this.againRenew = this.againRenew || renew || force;
      return this.committing;
    }
    this.committing = this.doCommit(renew || force).finally(() => {
      this.committing = null;
      if (this.commitAgain) {
        this.commitAgain = false;
        const r = this.againRenew;
        this.againRenew = false;
        return this.commit(r);
      }
      return undefined;
    });
    return this.committing;
  }

  async doCommit(renew) {
    const cn = this.cn;
    const session = cn.o.sessionTimeout;
    if (this.lost || this.gen !== cn.gen || (this.halted && this.releasing)) return;
    if (!renew && this.position === this.committed && this.leaseUntil - Date.now() > (session * 2) / 3) return;
    const pos = this.position;
    const before = Date.now();
    const body = partitionBody({ owner: cn.memberId, lease_end: before + session, position: pos, generation: this.gen });
    const key = partitionKey(cn.topicId, cn.group, this.partition);
    try {
      let rev;
      try {
        rev = await cn.kv.update(key, body, this.rev);
        if (cn.o.loseCommitAnswer?.()) throw new UnavailableError('commit answer lost (test hook)');
      } catch (e) {
        // The previous write's answer never came, so the key's revision may be that write's
        // (spec/protocol.md §6.3): a key holding exactly its bytes was ours, not a takeover.
        const cur = e instanceof CasConflict ? await this.ownUnanswered(key) : null;
        if (cur === UNREAD) {
          // Ours or a takeover, unknown yet: not lost; the unanswered write stays and the next
          // commit asks again (the lease still bounds delivery).
          cn.log(`partition ${this.partition}: commit refused, and the key could not be read back; retrying`);
          return;
        }
        if (!cur) throw e;
        this.rev = cur.revision;
        this.committed = Math.max(this.committed, this.unsure.pos);
        this.leaseUntil = Math.max(this.leaseUntil, this.unsure.until);
        this.unsure = null;
        cn.log(`partition ${this.partition}: the commit whose answer was lost was stored (revision ${cur.revision}); committing again`);
        rev = await cn.kv.update(key, body, cur.revision);
      }
      this.rev = rev;
      this.unsure = null;
    } catch (e) {
      if (e instanceof CasConflict) this.markLost(`partition ${this.partition}: lost (taken over); acknowledged ${this.position}, committed ${this.committed}`);
      else this.unsure = { body, pos, until: before + session }; // stored or not: the next compare-and-set tells
      return;
    }
    this.committed = pos;
    this.leaseUntil = before + session;
    cn.noteState(this.partition, this.gen, pos);
  }

  // After a failed compare-and-set: the key's entry when it holds exactly the bytes of this
  // partition's last write whose answer never came (that write was stored, and the revision is
  // ours: spec/protocol.md §6.3); else null (a takeover, or nothing unanswered).
  // After a refused compare-and-set: the key's entry when it holds exactly the bytes of the last
  // write whose answer never came (ours); null when not (a takeover); UNREAD when the key could not
  // be read, which decides nothing (spec/protocol.md §6.3): the caller asks again later.
  async ownUnanswered(key) {
    if (!this.unsure) return null;
    let cur;
    try {
      if (this.cn.o.failReadBack?.()) throw new UnavailableError('read-back lost (test hook)');
      cur = await this.cn.kv.get(key);
    } catch {
      return UNREAD;
    }
    if (!cur || cur.deleted || !equalBytes(cur.value, this.unsure.body)) return null;
    return cur;
  }

  // Waits for a commit in flight (before a release writes the final position).
  async commitIdle() {
    while (this.committing) await this.committing.catch(() => {});
  }

  markLost(why) {
    if (this.lost) return;
    this.cn.log(why);
    this.lost = true;
    this.halt();
    this.cn.rebalance();
  }

  // Delivers nothing more (idempotent); stop() also waits for the record in hand.
  halt() {
    if (this.halted) return;
    this.halted = true;
    this.reader?.stop();
    this.wakeSpace();
    for (const w of this.posWaiters) w.resolve();
    this.posWaiters = [];
  }

  waitSpace() {
    if (this.halted || this.queued < this.cn.o.prefetch) return null;
    return new Promise((r) => { this.spaceWaiter = r; });
  }

  wakeSpace() {
    if (this.spaceWaiter && (this.halted || this.queued < this.cn.o.prefetch / 2)) {
      const r = this.spaceWaiter;
      this.spaceWaiter = null;
      r();
    }
  }

  /** Stops delivering, waits for the record in hand (and, briefly, its acknowledgement). */
  async stop() {
    this.halt();
    await this.loop;
    if (this.lost) return;
    // Iterator mode: the record in hand is acknowledged when the application asks for the next
    // one; give it revokeTimeout, so that a rebalance does not deliver it twice.
    const cn = this.cn;
    const until = Date.now() + cn.o.revokeTimeout;
    while (this.position < this.lastHanded && Date.now() < until && !cn.closing) await sleep(10);
  }
}
