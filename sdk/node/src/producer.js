// The client-side-partitioning producer of spec/protocol.md §5.1: partition with the epoch's
// module, give each record its identity (Pctl-Key, Pctl-Producer, Pctl-Seq, Nats-Msg-Id with a
// random token), and publish it in JetStream fast batches (§5.1.1) so that records with the same
// key are stored in send order across connection losses, stream-leader changes and epoch changes,
// and nothing acknowledged is lost.
//
// Structure (the Go client's client/producer.go and client/sink.go): one Sink per partition of
// the current epoch (sink.js) sends that partition's records in order, one fast batch open at a
// time; every reply arrives on one subscription (<inbox>.>) and is routed to its sink by batch id.
// The producer re-reads the descriptor on a topic event, a stall (250 ms without a reply) or no
// responders; when the epoch moved on, every sink settles its open batch and hands back its
// records, which are re-partitioned and re-sent in their original send order under the new epoch.
// Everything runs on the event loop: no locks.

import { headers as natsHeaders } from '@nats-io/transport-node';
import { keyBytes } from './partitioner.js';
import { parseReplySubject, parseReply, newToken, recordToken, versionAtLeast } from './fastbatch.js';
import { Sink } from './sink.js';
import { InProcess } from './inprocess.js';
import { BadRequestError, NotFoundError, PctlError, UnavailableError, isTopicCreating, permissionError } from './errors.js';
import { headerPairs, timeHeader, headerBlockBytes, TIME_HEADER, DEFAULT_MAX_RECORD_BYTES } from './records.js';
import { streamInfo, directGet } from './jsapi.js';
import * as rules from './rules.js';
import { tombstoneTTL } from './compact.js';

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
const encoder = new TextEncoder();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const current = (desc) => desc.epochs[desc.epochs.length - 1];

/** The oldest nats-server the producer works with (fast batches, spec/protocol.md §5.1). */
export const MIN_SERVER_VERSION = '2.14.0';

/** Defaults of Producer options. */
export const PRODUCER_DEFAULTS = Object.freeze({ maxInFlight: 1024, maxBuffered: 65536, batchSize: 4096, stallTimeout: 250 });

function valueBytes(v) {
  if (v === undefined || v === null) return new Uint8Array(0);
  if (typeof v === 'string') return encoder.encode(v);
  if (v instanceof Uint8Array) return v;
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  throw new BadRequestError(`a record value is a string or a Uint8Array, not ${typeof v}`);
}

function randomId() {
  const a = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const b = new Uint8Array(22);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => a[x % a.length]).join('');
}

/**
 * A producer of one topic. Make it with `client.producer(topic, opts)`.
 *
 * `send(record)` returns a promise of the record's Result, `{pseq, partition, epoch, seq,
 * duplicate}`, once the broker acknowledged it (it is stored and will be delivered to every
 * consumer group), or rejects with a PctlError whose `code` says why (spec/protocol.md §3). `seq`
 * is the record's stream sequence when the producer learned it, else 0 ("stored, sequence not
 * reported"): a fast batch's PubAck names the stream sequence of its last record only. A record
 * whose id JetStream refused 4 times as "in process" (spec/protocol.md §5.1.5) rejects with
 * MsgIdInProcessError, an UnavailableError: its fate is unknown, read the partition before
 * producing it again.
 *
 * Order: records with the same key are stored, and delivered to every consumer group, in the
 * order send() was called, across epoch changes, lost connections and stream-leader changes.
 * Keyless records (key null or undefined) are spread round-robin and promise no order; an empty
 * key ('') is a key like any other.
 */
export class Producer {
  /** @private use client.producer(). */
  static async create(client, topic, opts = {}) {
    if (typeof topic !== 'string' || !NAME_RE.test(topic)) {
      throw new BadRequestError(`bad topic name ${JSON.stringify(topic)}: a topic name is 1 to 64 characters of A-Z a-z 0-9 _ -`);
    }
    const id = opts.id ?? randomId();
    if (typeof id !== 'string' || !NAME_RE.test(id)) {
      throw new BadRequestError(`bad producer id ${JSON.stringify(id)}: a producer id is 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)`);
    }
    const version = client.nc.info?.version ?? '';
    if (!versionAtLeast(version, 2, 14)) {
      throw new UnavailableError(`the server at ${client.opts.server} runs nats-server ${JSON.stringify(version)}; pctl's producer needs nats-server ${MIN_SERVER_VERSION} or later on every node (fast batch publishing, spec/protocol.md §5.1): upgrade the NATS servers`);
    }
    const p = new Producer(client, topic, id, opts);
    const desc = await p.fetch();
    await p.install(desc);
    p.maxRecord = await maxRecordBytes(client, topic);
    p.start();
    return p;
  }

  constructor(client, topic, id, opts) {
    this.client = client;
    this.topic = topic;
    this.id = id;
    this.maxInFlight = opts.maxInFlight > 0 ? opts.maxInFlight : PRODUCER_DEFAULTS.maxInFlight;
    this.maxBuffered = opts.maxBuffered > 0 ? opts.maxBuffered : PRODUCER_DEFAULTS.maxBuffered;
    this.batchSize = opts.batchSize > 0 ? opts.batchSize : PRODUCER_DEFAULTS.batchSize;
    this.stallTimeout = opts.stallTimeout > 0 ? opts.stallTimeout : PRODUCER_DEFAULTS.stallTimeout;
    this.contentTokens = !!opts.contentTokens;
    this.onLog = typeof opts.onLog === 'function' ? opts.onLog : null;
    // Test hooks (tests/holes.test.js), not part of the API: verify makes a single server's
    // streams count as clustered (every batch confirmed by reading it back), holes(stream, first,
    // last) runs after a clean PubAck before the confirmation (the test deletes stored records
    // there, as nats-server's fault loses them), noKeyRule switches the per-key rule off.
    this.test = opts._test ?? {};
    this.ackTimeout = client.opts.ackTimeout;
    this.inbox = client.inbox();
    this.desc = null;
    this.part = null;
    this.sinks = new Map();
    this.batches = new Map(); // open batch id -> Sink
    this.held = []; // records sent while repartitioning
    this.switching = false;
    this.seq = 0;
    this.unsettled = 0;
    this.rr = 0;
    this.fatal = null;
    this.closed = false;
    this.connected = true;
    this.disconnects = 0;
    this.waiters = []; // {ready: bool, resolve}
    this.checkWanted = false;
    this.fencedDesc = null;
    this.controlling = false;
    this.timer = null;
    this.resent = 0; // records re-sent under a new epoch after a fence
    this.recovered = 0; // records of settled batches found stored (their acknowledgement was lost)
    this.settled = 0; // fast batches settled after an anomaly
    this.holes = 0; // records a committed batch claimed but a cluster did not store (re-sent)
  }

  // Subscribes to the replies and the topic's events and watches the connection.
  start() {
    const nc = this.client.nc;
    this.replySub = nc.subscribe(`${this.inbox}.>`, { callback: (err, m) => { if (!err) this.onReply(m); } });
    // An event is a hint to re-read the descriptor; one with a $JS. reply subject comes from a
    // push consumer someone aimed at the subject, not from a broker (spec/protocol.md §8.4).
    this.eventSub = nc.subscribe(`pctl.events.topic.${this.topic}`, { callback: (err, m) => { if (!err && !m.reply?.startsWith('$JS.')) this.requestCheck(); } });
    this.stopViolation = this.client.onViolation((subject, v) => {
      if (subject.startsWith(`pctl.data.${this.topic}.`)) this.fail(permissionError(subject, v));
    });
    this.stopStatus = this.client.onStatus((s) => {
      if (s.type === 'disconnect') this.connChanged(false);
      else if (s.type === 'reconnect') this.connChanged(true);
    });
    nc.closed().then(() => {
      if (!this.closed && this.unsettled > 0) this.fail(new UnavailableError(`the connection to ${this.client.opts.server} is closed with ${this.unsettled} records of topic ${this.topic} not acknowledged; close producers before their client`));
    });
  }

  connChanged(connected) {
    this.connected = connected;
    if (!connected) this.disconnects++;
    for (const s of this.sinks.values()) s.connChanged(connected);
  }

  log(msg) { this.onLog?.(`producer ${this.id}: ${msg}`); }

  /** The epoch records are produced to now. */
  get epoch() { return this.current().epoch; }

  current() { return current(this.desc); }

  /** The topic's descriptor; throws NotFoundError when the topic was deleted (and re-created). */
  async fetch({ timeout } = {}) {
    for (let i = 0; ; i++) {
      let topic;
      try {
        ({ topic } = await this.client.topic(this.topic, { timeout }));
      } catch (e) {
        // A topic being created answers unavailable with the detail creating (spec/protocol.md
        // §3): wait for it (20 s).
        if (isTopicCreating(e) && i < 400) {
          await sleep(50);
          continue;
        }
        throw e;
      }
      if (topic.deleting) throw new UnavailableError(`topic ${this.topic} is being deleted`);
      if (this.desc && this.desc.id && topic.id !== this.desc.id) {
        throw new NotFoundError(`topic ${this.topic} was deleted and created again while producing (id ${this.desc.id}, now ${topic.id}); records not yet acknowledged are not sent to the new topic`);
      }
      return topic;
    }
  }

  async install(desc) {
    const cur = current(desc);
    this.part = await this.client.partitioner(cur.partitioner);
    this.desc = desc;
    this.sinks = new Map();
  }

  /**
   * Sends a record: `{key, value, headers, timestamp}`, key a string (UTF-8) or Uint8Array, or
   * null/undefined for a keyless record; value a string or Uint8Array; headers (optional) the
   * application headers {name: value or [values]} (or a Map, or [name, value] pairs) and
   * timestamp (optional) the record time, a Date or unix milliseconds (spec/protocol.md §5.3).
   * `tombstone: true` sends a tombstone: a keyed record without a value that deletes its key (on
   * a compacted topic the key's value is gone at once, and the tombstone itself after the topic's
   * delete retention: spec/protocol.md §10.2). On a compacted topic every record needs a key.
   * Returns a promise of its Result (see the class comment). The record's producer sequence
   * (Pctl-Seq) is fixed by the order of send() calls. Never blocks: use `await producer.ready()`
   * to bound memory when sending in a loop. A record the stream could not store (larger than its
   * max_msg_size, headers included) fails at once with BadRequestError, naming its size.
   */
  send(record) {
    if (this.closed) return Promise.reject(new BadRequestError('producer is closed'));
    if (this.fatal) return Promise.reject(this.fatal);
    let key = null;
    let value;
    let hdrs;
    let time;
    let tomb = false;
    const pseq = this.seq + 1;
    try {
      if (record === null || typeof record !== 'object') throw new BadRequestError('a record is an object {key, value}');
      if (record.key !== undefined && record.key !== null) key = keyBytes(record.key);
      value = valueBytes(record.value);
      tomb = !!record.tombstone;
      checkCompaction(this.topic, !!this.desc?.compact, !!this.desc?.backfill, key, value, tomb);
      if (key && key.length > 65536) throw new BadRequestError(`key of ${key.length} bytes; keys are at most 65536 bytes (spec/abi-v1.md §1.1)`);
      hdrs = headerPairs(record.headers);
      time = timeHeader(record.timestamp);
      this.checkSize(pseq, key, value, hdrs, time, tomb);
    } catch (e) {
      return Promise.reject(e);
    }
    this.seq = pseq;
    const pd = this.pending(pseq, key, value, hdrs.pairs, time);
    pd.tombstone = tomb;
    const promise = new Promise((resolve, reject) => { pd.resolve = resolve; pd.reject = reject; });
    this.unsettled++;
    if (this.switching) {
      this.held.push(pd);
    } else {
      try {
        this.assign(pd);
      } catch (e) {
        this.finish(pd, null, e);
      }
    }
    return promise;
  }

  // A record's identity, fixed for all its sends (spec/protocol.md §5.1 step 3); its message
  // headers are made at its first send (headersOf).
  pending(pseq, key, value, headers, time) {
    const seqText = String(pseq);
    const token = this.contentTokens ? recordToken(key, value) : newToken();
    return {
      pseq, key, value, headers, time,
      producer: this.id,
      seqText,
      msgId: `${this.id}-${seqText}-${token}`,
      keyHdr: key === null ? null : `b64:${Buffer.from(key.buffer, key.byteOffset, key.length).toString('base64')}`,
      hdr: null,
      epoch: 0,
      partition: -1,
      sends: 0, // publishes so far, in any partition
      floors: null, // stream -> its sink's floor at the record's first send there
      failed: null, // set when the server refused the record for good
      inProcess: new InProcess(), // its message id's 10158 answers (spec/protocol.md §5.1.5)
      settled: false,
    };
  }

  // The record's message headers (spec/protocol.md §5.1 and §5.3), made once.
  headersOf(pd) {
    if (pd.hdr) return pd.hdr;
    const h = natsHeaders();
    if (pd.headers) for (const [k, v] of pd.headers) h.append(k, v);
    if (pd.time !== null && pd.time !== undefined) h.set(TIME_HEADER, pd.time);
    if (pd.keyHdr !== null) h.set('Pctl-Key', pd.keyHdr);
    if (pd.tombstone) {
      // A tombstone (spec/protocol.md §10.2); on a compacted topic it expires after the topic's
      // delete retention.
      h.set('Pctl-Tombstone', 'true');
      if (this.desc.compact) h.set('Nats-TTL', tombstoneTTL(this.desc.compact));
    }
    h.set('Pctl-Producer', pd.producer);
    h.set('Pctl-Seq', pd.seqText);
    h.set('Nats-Msg-Id', pd.msgId);
    pd.hdr = h;
    return h;
  }

  // Gives a tombstone of a compacted topic the Nats-TTL of the descriptor it is (re-)sent under
  // (spec/protocol.md §10.2): one created under an earlier descriptor and handed back by a fenced
  // partition gets the hold of the new epoch's backfill, not the first send's delete retention,
  // which could expire before the backfill reaches its key. Its headers are made again (the same
  // identity: producer, sequence, deduplication id, key; sameRecord does not compare Nats-TTL).
  refreshTTL(pd) {
    if (pd.tombstone && pd.hdr && this.desc.compact && pd.hdr.get('Nats-TTL') !== tombstoneTTL(this.desc.compact)) pd.hdr = null;
  }

  // Gives a record that is provably not stored a new deduplication id (a fresh token; the
  // producer id and sequence stay): the server may still count its old id as being stored. The
  // new id's 10158 answers are counted afresh (§5.1.5 counts per message id): a hole is re-sent
  // under it, stuck old id or not.
  renew(pd) {
    pd.msgId = `${pd.producer}-${pd.seqText}-${newToken()}`;
    pd.inProcess.renewed();
    pd.hdr = null;
    pd.floors = null;
  }

  // Partitions a record under the current epoch and queues it on its partition's sink. part, when
  // given, is the partition computed already (a batch).
  assign(pd, part) {
    const cur = this.current();
    if (part === undefined) {
      if (pd.key === null) {
        part = this.rr % cur.partitions;
        this.rr = (this.rr + 1) % 0x40000000;
      } else {
        part = this.part.partition(pd.key, cur.partitions);
      }
    }
    pd.epoch = cur.epoch;
    pd.partition = part;
    this.refreshTTL(pd);
    let s = this.sinks.get(part);
    if (!s) {
      s = new Sink(this, cur.epoch, part);
      this.sinks.set(part, s);
    }
    s.push(pd);
  }

  // Assigns many records in order, partitioning the keyed ones in one batch (one WebAssembly
  // crossing per 4096 keys). A plugin failure fails the records it could not place.
  assignMany(pds) {
    const cur = this.current();
    const keyed = pds.filter((pd) => pd.key !== null);
    let parts = null;
    try {
      parts = keyed.length > 1 ? this.part.partitionMany(keyed.map((pd) => pd.key), cur.partitions) : null;
    } catch {
      parts = null; // fall back to one call per key, so that only the failing keys fail
    }
    let j = 0;
    for (const pd of pds) {
      try {
        if (pd.key === null) this.assign(pd);
        else this.assign(pd, parts ? parts[j++] : undefined);
      } catch (e) {
        this.finish(pd, null, e);
      }
    }
  }

  // The stored size of a record (spec/protocol.md §5.3): its header block, protocol and
  // application headers, plus its value; refused before sending when the stream could not take
  // it (JetStream would answer 10054) or the server could not carry it (max_payload).
  checkSize(pseq, key, value, hdrs, time, tomb) {
    const seq = String(pseq);
    let lines = Buffer.byteLength(this.id) * 2 + seq.length * 2 + 'Pctl-Producer: \r\n'.length + 'Pctl-Seq: \r\n'.length + 'Nats-Msg-Id: --\r\n'.length + 32;
    if (key) lines += 'Pctl-Key: b64:\r\n'.length + 4 * Math.ceil(key.length / 3);
    if (time !== null) lines += `${TIME_HEADER}: \r\n`.length + time.length;
    if (tomb) lines += 'Pctl-Tombstone: true\r\nNats-TTL: \r\n'.length + 20;
    lines += hdrs.bytes;
    const size = headerBlockBytes(lines) + value.length;
    const payload = this.client.nc.info?.max_payload ?? Infinity;
    const limit = Math.min(this.maxRecord > 0 ? this.maxRecord : Infinity, payload);
    if (size > limit) {
      const which = limit === payload && !(this.maxRecord > 0 && this.maxRecord <= payload) ? `the server's max_payload (${payload} bytes)` : `partition streams of ${this.topic} store messages of at most ${this.maxRecord} bytes (max_msg_size)`;
      throw new BadRequestError(`record ${pseq} of ${size} bytes (value ${value.length}, key ${key?.length ?? 0}, headers ${headerBlockBytes(lines)}, of which application headers ${hdrs.bytes}) is too large: ${which}; make the value smaller or split the record`);
    }
  }

  // Settles one record: result {partition, epoch, seq, duplicate}, or err.
  finish(pd, result, err) {
    if (pd.settled) return;
    pd.settled = true;
    pd.key = null; // free memory early; the record's fate is known
    pd.value = null;
    pd.headers = null;
    pd.hdr = null;
    this.unsettled--;
    if (err) pd.reject(err);
    else pd.resolve({ pseq: pd.pseq, ...result });
    if (this.waiters.length) this.wake();
  }

  wake() {
    const keep = [];
    for (const w of this.waiters) {
      if (this.fatal || (w.ready ? this.unsettled < this.maxBuffered : this.unsettled === 0)) w.resolve();
      else keep.push(w);
    }
    this.waiters = keep;
  }

  /** Resolves when fewer than maxBuffered records are unsettled (backpressure for send loops). */
  ready() {
    if (this.fatal || this.unsettled < this.maxBuffered) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ ready: true, resolve }));
  }

  /**
   * Resolves when every record sent so far is settled (acknowledged or failed). Rejects with the
   * producer's fatal error if it has one (a permission refusal, a deleted topic).
   */
  async flush() {
    if (this.unsettled > 0 && !this.fatal) await new Promise((resolve) => this.waiters.push({ ready: false, resolve }));
    if (this.fatal) throw this.fatal;
  }

  /** Flushes, then stops the producer (the client stays open). */
  async close() {
    try {
      await this.flush();
    } finally {
      if (!this.closed) {
        this.closed = true;
        const err = new UnavailableError('producer closed before the record was acknowledged');
        for (const s of this.sinks.values()) s.abort(err);
        for (const pd of this.held) this.finish(pd, null, err);
        this.held = [];
        this.stopViolation?.();
        this.stopStatus?.();
        if (this.timer !== null) clearInterval(this.timer);
        this.timer = null;
        try {
          this.replySub?.unsubscribe();
          this.eventSub?.unsubscribe();
        } catch {
          // the connection is closed already
        }
      }
    }
  }

  // Makes the producer unusable and fails every record not yet acknowledged.
  fail(err) {
    if (!this.fatal) {
      this.fatal = err;
      this.log(err.message);
    }
    const held = this.held;
    this.held = [];
    for (const pd of held) this.finish(pd, null, err);
    for (const s of this.sinks.values()) s.abort(err);
    this.wake();
  }

  // Routes a fast-batch reply to the sink whose batch it names. Replies to batches no longer open
  // are dropped (the sink settled them already).
  onReply(m) {
    const f = parseReplySubject(this.inbox, m.subject);
    if (!f) return;
    const s = this.batches.get(f.batch);
    if (!s) return;
    s.reply(parseReply(m, f.batch, f.seq, f.op));
  }

  // Starts the sweep of open batches (acknowledgement timeout, stall check) if it is not running.
  watch() {
    if (this.timer !== null || this.closed) return;
    const every = Math.max(1, Math.min(50, this.ackTimeout, Math.floor(this.stallTimeout / 2)));
    this.timer = setInterval(() => {
      if (this.batches.size === 0) {
        clearInterval(this.timer);
        this.timer = null;
        return;
      }
      const now = Date.now();
      for (const s of new Set(this.batches.values())) s.tick(now);
    }, every);
    this.timer.unref?.();
  }

  /** Asks the producer to re-read the descriptor (coalesced). */
  requestCheck() {
    this.checkWanted = true;
    this.runControl();
  }

  // A sink found its epoch fenced by desc (it waits, sending nothing, until it is stopped).
  sinkFenced(desc) {
    if (!this.fencedDesc || current(desc).epoch > current(this.fencedDesc).epoch) this.fencedDesc = desc;
    this.runControl();
  }

  // Re-reads the descriptor when asked and repartitions when the epoch moved on. One at a time.
  async runControl() {
    if (this.controlling) return;
    this.controlling = true;
    try {
      while (!this.closed && !this.fatal && (this.checkWanted || this.fencedDesc)) {
        let desc = this.fencedDesc;
        this.fencedDesc = null;
        if (this.checkWanted) {
          this.checkWanted = false;
          try {
            const d = await this.fetch({ timeout: this.ackTimeout });
            if (!desc || current(d).epoch > current(desc).epoch) desc = d;
          } catch (e) {
            if (e?.code === 'not_found' || e?.code === 'permission') {
              this.fail(e);
              break;
            }
            // The broker is unreachable for now: the sinks' own timeouts settle their batches.
          }
        }
        if (desc && current(desc).epoch > this.epoch) {
          this.log(`epoch ${current(desc).epoch} of topic ${this.topic} is current: settling partitions of epoch ${this.epoch}`);
          await this.repartition(desc);
        }
      }
    } catch (e) {
      this.fail(e instanceof PctlError ? e : new PctlError('internal', `producer control loop: ${e?.message ?? e}`, { cause: e }));
    } finally {
      this.controlling = false;
    }
  }

  // Moves every unacknowledged record to the new epoch, in the original send order. Every old
  // sink settles its open batch first (so nothing it sent can still be stored), then hands back
  // its records; they are re-sent before any record sent later (spec/protocol.md §5.1.2).
  async repartition(desc) {
    this.switching = true;
    const old = [...this.sinks.values()];
    const evs = await Promise.all(old.map((s) => s.fence(desc)));
    let left = [];
    for (const ev of evs) {
      left.push(...ev.left);
      if (ev.fenced && current(ev.fenced).epoch > current(desc).epoch) desc = ev.fenced;
    }
    if (this.fatal || this.closed) {
      this.switching = false;
      const err = this.fatal ?? new UnavailableError('producer closed before the record was acknowledged');
      for (const pd of left.concat(this.held)) this.finish(pd, null, err);
      this.held = [];
      return;
    }
    try {
      await this.install(desc);
    } catch (e) {
      this.switching = false;
      for (const pd of left) this.finish(pd, null, e);
      this.fail(e);
      return;
    }
    left.push(...this.held);
    this.held = [];
    left = left.filter((pd) => !pd.settled);
    left = rules.resendOrder(left.map((pd) => pd.pseq)).map((i) => left[i]); // spec/protocol.md §5.1.2 step 4
    this.resent += left.length;
    this.switching = false;
    this.assignMany(left);
  }

  /** Test hook and building block: the sequence of this producer's record pseq in partition q of
   * a fenced epoch (0: not stored there), searched from sequence `from` up to the epoch's
   * boundary by its Pctl-Producer and Pctl-Seq headers. */
  async findStored(desc, pd, from = 1) {
    const e = desc.epochs.find((x) => x.epoch === pd.epoch);
    const to = e?.boundaries?.[pd.partition] ?? 0;
    const stream = `PCTL_${this.topic}_${pd.partition}`;
    for (let seq = Math.max(from ?? 1, 1); seq <= to; seq++) {
      const m = await directGet(this.client.nc, stream, { seq }, { timeout: this.client.opts.timeout });
      if (m && m.headers.get('Pctl-Producer') === this.id && m.headers.get('Pctl-Seq') === String(pd.pseq)) return seq;
    }
    return 0;
  }
}

// Refuses what a tombstone or a compacted topic cannot carry (spec/protocol.md §10), worded as
// the Go client words it: a keyless record on a compacted topic, a keyless tombstone, a tombstone
// with a value.
function checkCompaction(topic, compact, backfill, key, value, tomb) {
  if (compact && key === null) throw new BadRequestError(`topic ${topic} is compacted: every record needs a key (a keyless record cannot be compacted)`);
  if (backfill && key === null) throw new BadRequestError(`topic ${topic} backfills at epoch changes: a keyless record cannot be backfilled: give it a key, or create the topic without --backfill`);
  if (tomb && key === null) throw new BadRequestError('a tombstone deletes a key: it needs one');
  if (tomb && value.length > 0) throw new BadRequestError(`a tombstone has no value (${value.length} bytes given)`);
}

// The partition streams' max_msg_size (the broker creates them alike; -1 or 0: no limit of its
// own), read from partition 0's stream; the spec's default when it cannot be read.
async function maxRecordBytes(client, topic) {
  try {
    const info = await streamInfo(client.nc, `PCTL_${topic}_0`, { timeout: 5000 });
    const m = info?.config?.max_msg_size;
    return Number.isInteger(m) && m > 0 ? m : 0;
  } catch {
    return DEFAULT_MAX_RECORD_BYTES;
  }
}
