// The client-side-partitioning producer of spec/protocol.md §5.1: partition with the epoch's
// module, publish to pctl.data.<topic>.<epoch>.<partition> with the record headers, pipeline with
// per-partition order, and survive epoch changes (fencing) and lost acknowledgements without
// losing, reordering or duplicating a record.
//
// Structure (like the Go client's client/producer.go): one Sink per partition of the current
// epoch publishes that partition's records in order with up to maxInFlight unacknowledged; a
// sink whose publish fails pauses and hands itself to the control loop, which re-reads the
// descriptor and either retries the sink's records in place (same epoch) or repartitions every
// unacknowledged record of every sink under the new epoch, in the original send order
// (the epoch was fenced). Everything runs on the event loop: no locks.

import { headers as natsHeaders } from '@nats-io/transport-node';
import { keyBytes } from './partitioner.js';
import { violationOf } from './natserrors.js';
import { AckPublisher, AckTimeoutError, StreamError } from './publisher.js';
import { BadRequestError, ConflictError, PctlError, UnavailableError, permissionError } from './errors.js';
import { headerPairs, timeHeader, headerBlockBytes, TIME_HEADER, DEFAULT_MAX_RECORD_BYTES } from './records.js';
import { streamInfo } from './jsapi.js';

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
const encoder = new TextEncoder();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Defaults of Producer options. */
export const PRODUCER_DEFAULTS = Object.freeze({ maxInFlight: 1024, maxBuffered: 65536 });

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

// A publish error that no retry can fix: the stream refused the message itself (too large).
function permanent(err) {
  if (err instanceof StreamError) return err.code === 10054 || /maximum message size|exceeds/i.test(err.message);
  return /max_payload|payload size/i.test(String(err?.message));
}

/**
 * A producer of one topic. Make it with `client.producer(topic, opts)`.
 *
 * `send(record)` returns a promise of the record's Result, `{pseq, partition, epoch, seq,
 * duplicate}`, once the broker acknowledged it (it is stored and will be delivered to every
 * consumer group), or rejects with a PctlError whose `code` says why (spec/protocol.md §3).
 *
 * Order: records with the same key are stored, and delivered to every consumer group, in the
 * order send() was called, across epoch changes. Keyless records (key null or undefined) are
 * spread round-robin and promise no order; an empty key ('') is a key like any other.
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
    const p = new Producer(client, topic, id, opts);
    const desc = await p.fetch();
    await p.install(desc);
    p.maxRecord = await maxRecordBytes(client, topic);
    p.pub = new AckPublisher(client.nc, client.opts.ackTimeout);
    p.stopViolation = client.onViolation((subject, v) => {
      if (subject.startsWith(`pctl.data.${topic}.`)) p.fail(permissionError(subject, v));
    });
    return p;
  }

  constructor(client, topic, id, opts) {
    this.client = client;
    this.topic = topic;
    this.id = id;
    this.maxInFlight = opts.maxInFlight > 0 ? opts.maxInFlight : PRODUCER_DEFAULTS.maxInFlight;
    this.maxBuffered = opts.maxBuffered > 0 ? opts.maxBuffered : PRODUCER_DEFAULTS.maxBuffered;
    this.desc = null;
    this.part = null;
    this.sinks = new Map();
    this.held = []; // records sent while repartitioning
    this.switching = false;
    this.seq = 0;
    this.unsettled = 0;
    this.rr = 0;
    this.fatal = null;
    this.closed = false;
    this.events = [];
    this.controlling = false;
    this.waiters = []; // {ready: bool, resolve}
    this.resent = 0; // records re-sent under a new epoch
    this.recovered = 0; // records whose lost acknowledgement was found in a fenced partition
  }

  /** The epoch records are produced to now. */
  get epoch() { return this.current().epoch; }

  current() { return this.desc.epochs[this.desc.epochs.length - 1]; }

  async fetch() {
    for (let i = 0; ; i++) {
      try {
        const { topic } = await this.client.topic(this.topic);
        if (topic.deleting) throw new UnavailableError(`topic ${this.topic} is being deleted`);
        return topic;
      } catch (e) {
        // A topic being created answers "unavailable ... being created": wait for it (20 s).
        if (e?.code === 'unavailable' && /being created/.test(e.message) && i < 400) {
          await sleep(50);
          continue;
        }
        throw e;
      }
    }
  }

  async install(desc) {
    const cur = desc.epochs[desc.epochs.length - 1];
    this.part = await this.client.partitioner(cur.partitioner);
    this.desc = desc;
    this.sinks = new Map();
  }

  /**
   * Sends a record: `{key, value, headers, timestamp}`, key a string (UTF-8) or Uint8Array, or
   * null/undefined for a keyless record; value a string or Uint8Array; headers (optional) the
   * application headers {name: value or [values]} (or a Map, or [name, value] pairs) and
   * timestamp (optional) the record time, a Date or unix milliseconds (spec/protocol.md §5.3).
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
    const pseq = this.seq + 1;
    try {
      if (record === null || typeof record !== 'object') throw new BadRequestError('a record is an object {key, value}');
      if (record.key !== undefined && record.key !== null) key = keyBytes(record.key);
      value = valueBytes(record.value);
      if (key && key.length > 65536) throw new BadRequestError(`key of ${key.length} bytes; keys are at most 65536 bytes (spec/abi-v1.md §1.1)`);
      hdrs = headerPairs(record.headers);
      time = timeHeader(record.timestamp);
      this.checkSize(pseq, key, value, hdrs, time);
    } catch (e) {
      return Promise.reject(e);
    }
    this.seq = pseq;
    const pd = { pseq, key, value, epoch: 0, partition: -1, ambiguous: false, tries: 0, headers: hdrs.pairs, time };
    const promise = new Promise((resolve, reject) => { pd.resolve = resolve; pd.reject = reject; });
    this.unsettled++;
    if (this.switching) {
      this.held.push(pd);
    } else {
      try {
        this.assign(pd);
      } catch (e) {
        this.settle(pd, null, e);
      }
    }
    return promise;
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
    pd.ambiguous = false; // a new partition and epoch (resolveAmbiguous ran before a repartition)
    pd.floor = undefined;
    pd.subject = `pctl.data.${this.topic}.${cur.epoch}.${part}`;
    let s = this.sinks.get(part);
    if (!s) {
      s = new Sink(this, cur.epoch, part);
      // Everything stored under this epoch is above the previous epoch's boundary.
      const prev = this.desc.epochs[this.desc.epochs.length - 2];
      s.lastAcked = prev?.boundaries?.[part] ?? 0;
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
        this.settle(pd, null, e);
      }
    }
  }

  // The stored size of a record (spec/protocol.md §5.3): its header block, protocol and
  // application headers, plus its value; refused before sending when the stream could not take
  // it (JetStream would answer 10054) or the server could not carry it (max_payload).
  checkSize(pseq, key, value, hdrs, time) {
    const seq = String(pseq);
    let lines = Buffer.byteLength(this.id) * 2 + seq.length * 2 + 'Pctl-Producer: \r\n'.length + 'Pctl-Seq: \r\n'.length + 'Nats-Msg-Id: -\r\n'.length;
    if (key) lines += 'Pctl-Key: b64:\r\n'.length + 4 * Math.ceil(key.length / 3);
    if (time !== null) lines += `${TIME_HEADER}: \r\n`.length + time.length;
    lines += hdrs.bytes;
    const size = headerBlockBytes(lines) + value.length;
    const payload = this.client.nc.info?.max_payload ?? Infinity;
    const limit = Math.min(this.maxRecord > 0 ? this.maxRecord : Infinity, payload);
    if (size > limit) {
      const which = limit === payload && !(this.maxRecord > 0 && this.maxRecord <= payload) ? `the server's max_payload (${payload} bytes)` : `partition streams of ${this.topic} store messages of at most ${this.maxRecord} bytes (max_msg_size)`;
      throw new BadRequestError(`record ${pseq} of ${size} bytes (value ${value.length}, key ${key?.length ?? 0}, headers ${headerBlockBytes(lines)}, of which application headers ${hdrs.bytes}) is too large: ${which}; make the value smaller or split the record`);
    }
  }

  // Message headers of spec/protocol.md §5.1 and §5.3.
  message(pd) {
    const h = natsHeaders();
    if (pd.headers) for (const [k, v] of pd.headers) h.append(k, v);
    if (pd.time !== null && pd.time !== undefined) h.set(TIME_HEADER, pd.time);
    if (pd.key !== null) h.set('Pctl-Key', `b64:${Buffer.from(pd.key.buffer, pd.key.byteOffset, pd.key.length).toString('base64')}`);
    const seq = String(pd.pseq);
    h.set('Pctl-Producer', this.id);
    h.set('Pctl-Seq', seq);
    h.set('Nats-Msg-Id', `${this.id}-${seq}`);
    return h;
  }

  settle(pd, result, err) {
    if (pd.settled) return;
    pd.settled = true;
    pd.key = null; // free memory early; the record's fate is known
    pd.value = null;
    pd.headers = null;
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
      this.closed = true;
      this.stopViolation?.();
      this.pub.close();
    }
  }

  // Makes the producer unusable and fails every record not yet acknowledged.
  fail(err) {
    if (!this.fatal) this.fatal = err;
    const held = this.held;
    this.held = [];
    for (const pd of held) this.settle(pd, null, err);
    for (const s of this.sinks.values()) s.abort(err);
    this.wake();
  }

  // A sink paused after a failure: the control loop decides what to do.
  control(sink) {
    this.events.push(sink);
    if (!this.controlling) this.runControl();
  }

  async runControl() {
    this.controlling = true;
    try {
      while (this.events.length > 0) {
        const s = this.events.shift();
        if (s.closed || s.aborted || !s.paused || this.fatal) continue;
        if (this.client.nc.isClosed()) {
          this.fail(new UnavailableError(`the connection to ${this.client.opts.server} is closed with ${this.unsettled} records of topic ${this.topic} not acknowledged; close producers before their client`));
          continue;
        }
        let desc = null;
        try {
          desc = await this.fetch();
        } catch (e) {
          if (e?.code === 'not_found' || e?.code === 'permission') {
            this.fail(e);
            continue;
          }
          // The broker is unreachable for now: retry in place below.
        }
        if (desc && desc.id !== this.desc.id) {
          this.fail(new ConflictError(`topic ${this.topic} was deleted and created again while records were in flight (id ${this.desc.id} is now ${desc.id}); the records not acknowledged are not sent to the new topic`));
          continue;
        }
        if (desc && desc.epochs[desc.epochs.length - 1].epoch > s.epoch) {
          await this.repartition(desc);
          continue;
        }
        // Same epoch: the stream is briefly unavailable, or an epoch change is between fencing
        // and activation. Retry the same records, in order, on the same subject, same msg ids.
        await sleep(s.backoff);
        s.backoff = Math.min(s.backoff * 2, 1000);
        if (!s.closed && !s.aborted) s.resume();
      }
    } catch (e) {
      this.fail(e instanceof PctlError ? e : new PctlError('internal', `producer control loop: ${e?.message ?? e}`, { cause: e }));
    } finally {
      this.controlling = false;
    }
  }

  // The epoch was fenced: wait for every publish in flight, take every record not acknowledged
  // (in any partition), and re-send them in their original order under the new epoch, before any
  // record sent later (spec/protocol.md §5.1).
  async repartition(desc) {
    this.switching = true;
    const old = this.sinks;
    for (const s of old.values()) s.stopping = true;
    await Promise.all([...old.values()].map((s) => s.idle()));
    let left = [];
    for (const s of old.values()) {
      left.push(...s.takeLeft());
      s.closed = true;
    }
    if (this.fatal) {
      for (const pd of left) this.settle(pd, null, this.fatal);
      this.switching = false;
      return;
    }
    try {
      left = await this.resolveAmbiguous(desc, left);
    } catch (e) {
      // Re-sending a record that may be stored would store it twice: fail them all instead.
      this.switching = false;
      for (const pd of left) this.settle(pd, null, e);
      this.fail(e);
      return;
    }
    try {
      await this.install(desc);
    } catch (e) {
      this.switching = false;
      for (const pd of left) this.settle(pd, null, e);
      this.fail(e);
      return;
    }
    left.push(...this.held);
    this.held = [];
    left.sort((a, b) => a.pseq - b.pseq);
    this.resent += left.length;
    this.switching = false;
    this.assignMany(left);
  }

  // A record whose acknowledgement was lost may be stored in the fenced partition: look for its
  // msg id there, above the last sequence acknowledged before its first publish to it (a record
  // published later cannot be stored before one acknowledged earlier) and up to the epoch's
  // boundary, with JetStream direct gets; one scan per partition. Found: the record is
  // acknowledged there; not found: it is re-sent under the new epoch.
  async resolveAmbiguous(desc, left) {
    const byPart = new Map();
    for (const pd of left) {
      if (pd.ambiguous) byPart.set(pd.partition, [...(byPart.get(pd.partition) ?? []), pd]);
    }
    if (byPart.size === 0) return left;
    const found = new Set();
    for (const [q, pds] of byPart) {
      const e = desc.epochs.find((x) => x.epoch === pds[0].epoch);
      const boundary = e?.boundaries?.[q] ?? 0;
      const want = new Map(pds.map((pd) => [`${this.id}-${pd.pseq}`, pd]));
      const from = Math.min(...pds.map((pd) => pd.floor ?? 0)) + 1;
      for await (const [seq, id] of this.scan(q, from, boundary)) {
        const pd = want.get(id);
        if (!pd || pd.floor >= seq) continue;
        want.delete(id);
        found.add(pd);
        this.recovered++;
        this.settle(pd, { partition: q, epoch: pd.epoch, seq, duplicate: true });
        if (want.size === 0) break;
      }
    }
    return left.filter((pd) => !found.has(pd));
  }

  /** Test hook and building block: the sequence of this producer's record pseq in partition q of
   * a fenced epoch (0: not stored there), searched from sequence `from`. */
  async findStored(desc, pd, from = 1) {
    const e = desc.epochs.find((x) => x.epoch === pd.epoch);
    const id = `${this.id}-${pd.pseq}`;
    for await (const [seq, mid] of this.scan(pd.partition, from, e?.boundaries?.[pd.partition] ?? 0)) {
      if (mid === id) return seq;
    }
    return 0;
  }

  // Yields [seq, Nats-Msg-Id] of partition q's stream for from <= seq <= to (direct gets).
  async* scan(q, from, to) {
    const subject = `$JS.API.DIRECT.GET.PCTL_${this.topic}_${q}`;
    for (let seq = Math.max(from, 1); seq <= to; seq++) {
      for (let attempt = 0; ; attempt++) {
        try {
          const m = await this.client.nc.request(subject, encoder.encode(JSON.stringify({ seq })), { timeout: this.client.opts.timeout });
          if (m.headers?.code === 0 || m.headers?.code === undefined || m.headers?.code === 200) {
            yield [seq, m.headers?.get('Nats-Msg-Id') ?? ''];
          }
          break; // a stored message, or a deleted sequence (404)
        } catch (err) {
          if (violationOf(err) || attempt >= 5) {
            throw new UnavailableError(`cannot read partition ${q} of ${this.topic} at sequence ${seq} to find out whether records whose acknowledgement was lost are stored there: ${err.message}`, { cause: err });
          }
          await sleep(100 * (attempt + 1));
        }
      }
    }
  }
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

/** One partition's records of one epoch, published in order with up to maxInFlight in flight. */
class Sink {
  constructor(producer, epoch, partition) {
    this.p = producer;
    this.epoch = epoch;
    this.partition = partition;
    this.queue = []; // not yet published, in order
    this.inflight = 0;
    this.flying = new Set(); // the records of inflight
    this.failed = []; // failed this round: to retry or repartition
    this.cause = null;
    this.paused = false; // waiting for the control loop
    this.stopping = false; // a repartition takes its records
    this.closed = false;
    this.aborted = null;
    this.lastAcked = 0;
    this.idlers = [];
    this.backoff = 50;
  }

  push(pd) {
    this.queue.push(pd);
    this.pump();
  }

  pump() {
    const max = this.p.maxInFlight;
    while (!this.paused && !this.stopping && !this.closed && !this.aborted && this.cause === null && this.inflight < max && this.queue.length > 0) {
      this.publish(this.queue.shift());
    }
    this.check();
  }

  publish(pd) {
    pd.tries++;
    if (pd.floor === undefined) pd.floor = this.lastAcked;
    this.inflight++;
    this.flying.add(pd);
    this.p.pub.publish(pd.subject, pd.value, this.p.message(pd), (err, ack) => {
      this.flying.delete(pd);
      if (err) this.onErr(pd, err);
      else this.onAck(pd, ack);
    });
  }

  onAck(pd, ack) {
    this.inflight--;
    if (ack.seq > this.lastAcked) this.lastAcked = ack.seq;
    this.backoff = 50;
    this.p.settle(pd, { partition: this.partition, epoch: this.epoch, seq: ack.seq, duplicate: !!ack.duplicate });
    this.pump();
  }

  onErr(pd, err) {
    this.inflight--;
    if (pd.settled) return this.check();
    const v = violationOf(err);
    if (v) {
      this.p.fail(permissionError(v.subject || pd.subject, err));
      this.p.settle(pd, null, this.p.fatal);
      return this.check();
    }
    if (permanent(err)) {
      this.p.settle(pd, null, new BadRequestError(`record ${pd.pseq} refused by partition ${this.partition}: ${err.message}`, { cause: err }));
      return this.pump();
    }
    if (this.aborted) {
      this.p.settle(pd, null, this.aborted);
      return this.check();
    }
    // Sticky: once an attempt's answer was lost the record may be stored here, whatever later
    // attempts say (a later "no responders" says nothing about the earlier attempt).
    if (err instanceof AckTimeoutError) pd.ambiguous = true;
    this.failed.push(pd);
    if (this.cause === null) this.cause = err;
    this.check();
  }

  // Once nothing is in flight: a stopping sink is idle; a failed one hands itself to control.
  check() {
    if (this.inflight > 0) return;
    if (this.stopping) {
      const w = this.idlers;
      this.idlers = [];
      for (const r of w) r();
      return;
    }
    if (this.cause !== null && !this.paused && !this.closed && !this.aborted) {
      this.paused = true;
      this.p.control(this);
    }
  }

  idle() {
    if (this.inflight === 0) return Promise.resolve();
    return new Promise((r) => this.idlers.push(r));
  }

  // Everything not acknowledged, in send order (for a repartition).
  takeLeft() {
    const left = this.failed.concat(this.queue);
    this.failed = [];
    this.queue = [];
    return left.sort((a, b) => a.pseq - b.pseq);
  }

  // Retry after a transient failure: the failed records first, in order, then the rest.
  resume() {
    this.queue = this.failed.sort((a, b) => a.pseq - b.pseq).concat(this.queue);
    this.failed = [];
    this.cause = null;
    this.paused = false;
    this.pump();
  }

  abort(err) {
    if (this.aborted) return;
    this.aborted = err;
    const left = this.failed.concat(this.queue);
    this.failed = [];
    this.queue = [];
    for (const pd of left) this.p.settle(pd, null, err);
    // Records in flight fail now: the producer is unusable, and a refused publish (permission)
    // gets no answer at all. Their answers, if any come, are ignored.
    for (const pd of this.flying) this.p.settle(pd, null, err);
    this.check();
  }
}
