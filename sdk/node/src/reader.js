// A stream reader that never stalls for good (spec/protocol.md §6.7): an ephemeral, in-memory,
// acknowledgement-free JetStream pull consumer of our own, spoken directly, with every way a read
// can be lost checked by a watchdog:
//
//   - a pull request (or its heartbeats) lost: nothing at all, no message and no heartbeat, for
//     two heartbeats while messages are requested -> the pull is re-issued, and the consumer
//     re-created if that happens twice in a row;
//   - messages lost: a consumer sequence that skips, or a heartbeat whose Nats-Last-Consumer is
//     above the last consumer sequence received -> the consumer is re-created from the last
//     stream sequence received + 1;
//   - the consumer gone (409 Consumer Deleted, 503 no responders to a pull, a server restart) or a
//     reconnect of the connection -> re-created;
//   - and the check that catches whatever the others miss: nothing received for idleCheck while
//     the stream's last sequence (or, for a filtered reader, the consumer's pending count) says
//     there is more -> re-created.
//
// Messages are handed out in stream order, each exactly once, by take(). Everything runs on the
// event loop.

import { createInbox } from '@nats-io/transport-node';
import { jsRequest, streamInfo, JsApiError, JS } from './jsapi.js';
import { headersOf, ackInfo } from './headers.js';

const encoder = new TextEncoder();
let readerSerial = 0;

/** One message handed out by take(). */
class Entry {
  constructor(msg, a, h) {
    this.msg = msg;
    this.seq = a.seq;
    this.cseq = a.cseq;
    this.pending = a.pending;
    this.tsMs = a.tsMs; // when the stream stored it: unix milliseconds
    this.tsRest = a.tsRest; // and the nanoseconds below the millisecond
    this.headers = h; // RawHeaders (or nats.js MsgHdrs), or null
    this.data = msg.data;
  }

  /** The message's subject (decoded on first use). */
  get subject() { return this.msg.subject; }
  /** When the stream stored it, unix nanoseconds as a decimal string. */
  get tsNanos() { return (BigInt(this.tsMs) * 1000000n + BigInt(this.tsRest)).toString(); }
}

function randomName() {
  const a = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => a[x % a.length]).join('');
}

/** Defaults of PullReader options (milliseconds and message counts). */
export const READER_DEFAULTS = Object.freeze({
  batch: 512, heartbeat: 1000, expires: 5000, idleCheck: 3000, inactiveThreshold: 30_000, maxBytes: 8 << 20,
});

/**
 * One reader of one stream. Options: `stream` (name), `startSeq` (first stream sequence wanted;
 * default 1), `filter` (a filter subject, sent in the consumer-create subject as scoped
 * credentials require, spec/protocol.md §8.2; default none), `lastPerSubject` (start with the last
 * message of every subject matching the filter, then everything after: a KV watch), `batch`,
 * `heartbeat`, `expires`, `idleCheck`, `onError(err)` (told of every failure it recovers from or
 * retries; it never gives up by itself), `onRecreate(reason)` (told when it re-creates its
 * consumer). `stats` counts pulls, re-pulls and re-creations by reason.
 */
export class PullReader {
  constructor(client, opts) {
    this.client = client;
    this.nc = client.nc;
    this.stream = opts.stream;
    this.filter = opts.filter ?? '';
    // What an idle reader asks to know whether it missed something: 'stream' (the stream's last
    // sequence: every message of the stream passes the filter) or 'consumer' (its pending count).
    this.probe = opts.probe ?? (this.filter ? 'consumer' : 'stream');
    this.lastPerSubject = !!opts.lastPerSubject;
    this.batch = opts.batch ?? READER_DEFAULTS.batch;
    this.maxBytes = opts.maxBytes ?? READER_DEFAULTS.maxBytes;
    this.hb = opts.heartbeat ?? READER_DEFAULTS.heartbeat;
    this.expires = Math.max(opts.expires ?? READER_DEFAULTS.expires, 2 * this.hb + 100);
    this.idleCheck = opts.idleCheck ?? READER_DEFAULTS.idleCheck;
    this.inactive = opts.inactiveThreshold ?? READER_DEFAULTS.inactiveThreshold;
    this.onError = opts.onError ?? (() => {});
    this.onRecreate = opts.onRecreate ?? (() => {});
    this.lastSeq = (opts.startSeq ?? 1) - 1; // last stream sequence received
    this.lastCseq = 0;
    this.started = false; // a consumer was created once (lastPerSubject applies only then)
    this.prefix = `pctl_${randomName()}_${++readerSerial}`;
    this.serial = 0;
    this.name = null; // the current consumer's name, null while (re-)creating
    this.creating = false;
    this.pending = 0; // messages requested and neither received nor ended by a status
    this.buf = [];
    this.head = 0;
    this.waiter = null;
    this.stopped = false;
    this.lastActivity = Date.now(); // any message or status from the current consumer
    this.lastData = Date.now();
    this.silentRounds = 0;
    this.checking = false;
    this.retryTimer = null;
    this.backoff = 100;
    this.caughtUp = false; // lastPerSubject: the initial snapshot has been received
    this.caughtUpWaiters = [];
    this.stats = { pulls: 0, repulls: 0, recreated: {} };
    this.inbox = `${createInbox(this.nc.options?.inboxPrefix)}.`;
    this.sub = this.nc.subscribe(`${this.inbox}*`, { callback: (err, msg) => { if (!err) this.onMsg(msg); } });
    this.stopStatus = client.onStatus?.((s) => {
      if (s.type === 'reconnect' && !this.stopped) this.recreate('reconnect');
    });
  }

  /** Starts reading (creates the consumer). */
  start() {
    this.timer = setInterval(() => this.watchdog(), Math.max(50, Math.min(this.hb, 1000)));
    this.create();
    return this;
  }

  /** Resolves once a lastPerSubject reader has received the snapshot present at its start. */
  whenCaughtUp() {
    if (this.caughtUp || this.stopped) return Promise.resolve();
    return new Promise((r) => this.caughtUpWaiters.push(r));
  }

  setCaughtUp() {
    if (this.caughtUp) return;
    this.caughtUp = true;
    const w = this.caughtUpWaiters;
    this.caughtUpWaiters = [];
    for (const r of w) r();
  }

  get buffered() { return this.buf.length - this.head; }

  /**
   * The next messages, in stream order (at least one, at most max), or [] once stopped. Each
   * entry: {seq, cseq, pending, tsMs, tsRest, tsNanos, subject, headers (get/has/values/keys, or
   * null), data (Uint8Array)}.
   */
  take(max = Infinity) {
    if (this.stopped) return Promise.resolve([]);
    if (this.buffered > 0) return Promise.resolve(this.drain(max));
    return new Promise((resolve) => { this.waiter = { resolve, max }; });
  }

  drain(max) {
    const n = Math.min(max, this.buffered);
    const out = this.buf.slice(this.head, this.head + n);
    this.head += n;
    if (this.head === this.buf.length) {
      this.buf = [];
      this.head = 0;
    } else if (this.head > 4096) {
      this.buf = this.buf.slice(this.head);
      this.head = 0;
    }
    this.pull();
    return out;
  }

  /** Stops reading: no more messages; the server-side consumer is deleted (best effort). */
  stop() {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.retryTimer);
    this.stopStatus?.();
    try {
      this.sub.unsubscribe();
    } catch {
      // the connection is closed
    }
    this.deleteConsumer(this.name);
    this.name = null;
    this.buf = [];
    this.head = 0;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve([]);
    }
    this.setCaughtUp();
  }

  deleteConsumer(name) {
    if (!name || this.nc.isClosed()) return;
    jsRequest(this.nc, `$JS.API.CONSUMER.DELETE.${this.stream}.${name}`, undefined, 2000).catch(() => {});
  }

  // (Re-)creates the server-side consumer from the last sequence received + 1.
  async create() {
    if (this.stopped || this.creating) return;
    this.creating = true;
    const old = this.name;
    this.name = null;
    this.pending = 0;
    this.lastCseq = 0;
    this.deleteConsumer(old);
    const name = `${this.prefix}_${++this.serial}`;
    const config = {
      name,
      ack_policy: 'none',
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: this.inactive * 1e6,
      max_waiting: 64,
    };
    if (this.filter) config.filter_subject = this.filter;
    if (this.lastPerSubject && !this.started) {
      config.deliver_policy = 'last_per_subject';
    } else {
      config.deliver_policy = 'by_start_sequence';
      config.opt_start_seq = this.lastSeq + 1;
    }
    try {
      const subject = `$JS.API.CONSUMER.CREATE.${this.stream}.${name}${this.filter ? `.${this.filter}` : ''}`;
      const r = await jsRequest(this.nc, subject, { stream_name: this.stream, config, action: 'create' });
      this.creating = false;
      if (this.stopped) {
        this.deleteConsumer(name);
        return;
      }
      this.started = true;
      this.name = name;
      this.nameBytes = encoder.encode(name);
      this.backoff = 100;
      this.lastActivity = Date.now();
      this.lastData = Date.now();
      this.silentRounds = 0;
      if ((r.num_pending ?? 0) === 0) this.setCaughtUp();
      this.pull();
    } catch (e) {
      this.creating = false;
      if (this.stopped) return;
      this.onError(e);
      if (this.nc.isClosed()) return; // nothing to retry on: the owner fails and stops us
      // Retry, waiting longer each time (the stream may be unavailable for a while: a restart,
      // a leader election), forever: the owner stops a reader it no longer wants.
      this.retryTimer = setTimeout(() => this.create(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 2000);
    }
  }

  recreate(reason) {
    if (this.stopped) return;
    this.stats.recreated[reason] = (this.stats.recreated[reason] ?? 0) + 1;
    this.onRecreate(reason);
    if (this.creating) return; // the consumer being created starts after the last received already
    this.create();
  }

  // Keeps up to two batches requested or buffered.
  pull() {
    if (!this.name || this.stopped) return;
    const room = 2 * this.batch - this.buffered - this.pending;
    if (room < this.batch) return;
    const n = Math.min(room, this.batch);
    this.pending += n;
    this.stats.pulls++;
    const req = { batch: n, expires: this.expires * 1e6, idle_heartbeat: this.hb * 1e6 };
    if (this.maxBytes) req.max_bytes = this.maxBytes;
    try {
      this.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${this.name}`, encoder.encode(JSON.stringify(req)), { reply: `${this.inbox}${this.serial}` });
    } catch (e) {
      this.pending -= n;
      this.onError(e);
    }
  }

  onMsg(msg) {
    if (this.stopped) return;
    const h = headersOf(msg);
    const code = h ? h.code : 0;
    if (code > 0) return this.onStatus(msg, h, code);
    if (!this.name) return;
    const a = ackInfo(msg, this.nameBytes);
    if (!a) return; // not a JetStream delivery, or one of an earlier consumer of ours
    const now = Date.now();
    this.lastActivity = now;
    this.lastData = now;
    this.silentRounds = 0;
    if (this.pending > 0) this.pending--;
    const seq = a.seq;
    const cseq = a.cseq;
    const left = a.pending;
    if (cseq !== this.lastCseq + 1) {
      if (cseq <= this.lastCseq) return; // seen already
      return this.recreate('consumer sequence gap');
    }
    this.lastCseq = cseq;
    if (seq <= this.lastSeq) return;
    this.lastSeq = seq;
    const entry = new Entry(msg, a, h);
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      this.buf.push(entry);
      w.resolve(this.drain(w.max));
    } else {
      this.buf.push(entry);
    }
    if (left === 0) this.setCaughtUp();
  }

  onStatus(msg, h, code) {
    // Status messages come to <inbox><serial>: ignore those of an earlier consumer.
    if (msg.subject !== `${this.inbox}${this.serial}` || !this.name) return;
    this.lastActivity = Date.now();
    this.silentRounds = 0;
    switch (code) {
      case 100: { // idle heartbeat (or flow control, which an ack-none pull consumer never asks)
        const last = Number(h.get('Nats-Last-Consumer') || 0);
        if (last > this.lastCseq) this.recreate('messages lost (heartbeat ahead)');
        return;
      }
      case 404: // no messages (no_wait)
      case 408: // request timeout / interest expired: the pull ended
      case 409: { // batch completed, max bytes, leadership change, consumer deleted, max waiting...
        const desc = h.description || '';
        if (code === 409 && /consumer deleted|consumer is push/i.test(desc)) return this.recreate('consumer deleted');
        const left = Number(h.get('Nats-Pending-Messages') || 0);
        this.pending = Math.max(0, this.pending - left);
        if (code === 409 && /leadership/i.test(desc)) this.pending = 0;
        this.pull();
        return;
      }
      case 503: // no responders: the consumer is gone (a restart) or not there yet
        return this.recreate('consumer gone (no responders)');
      default:
        this.onError(new JsApiError(`pull from ${this.stream}`, { code, description: h.description }));
        this.pending = 0;
        this.pull();
    }
  }

  watchdog() {
    if (this.stopped || !this.name) return;
    const now = Date.now();
    if (this.pending > 0 && now - this.lastActivity > 2 * this.hb + 200) {
      // Nothing at all from the server for two heartbeats: the pull (or the consumer) is lost.
      this.silentRounds++;
      this.lastActivity = now;
      if (this.silentRounds >= 2) return this.recreate('silent consumer');
      this.stats.repulls++;
      this.pending = 0;
      this.pull();
      return;
    }
    if (this.pending === 0 && this.buffered < this.batch) this.pull(); // in case a pull was refused
    if (!this.checking && now - this.lastData > this.idleCheck && this.buffered === 0) this.idleProbe();
  }

  // Nothing received for a while: ask the server whether there is something we should have.
  async idleProbe() {
    this.checking = true;
    const name = this.name;
    try {
      if (this.probe === 'consumer') {
        const info = await jsRequest(this.nc, `$JS.API.CONSUMER.INFO.${this.stream}.${name}`, undefined, 3000);
        if (this.name === name && info.num_pending > 0 && this.buffered === 0 && Date.now() - this.lastData > this.idleCheck) {
          this.recreate('stalled (consumer has pending messages)');
        }
      } else {
        const info = await streamInfo(this.nc, this.stream, { timeout: 3000 });
        if (this.name === name && info.state.last_seq > this.lastSeq && this.buffered === 0 && Date.now() - this.lastData > this.idleCheck) {
          this.recreate('stalled (stream has more)');
        }
      }
    } catch (e) {
      if (e instanceof JsApiError && e.errCode === JS.consumerNotFound && this.name === name) this.recreate('consumer not found');
      else this.onError(e);
    } finally {
      this.lastData = Math.max(this.lastData, Date.now() - this.idleCheck / 2); // probe again later, not at once
      this.checking = false;
    }
  }
}
