// A sink sends one partition's records of one epoch as a series of JetStream fast batches
// (spec/protocol.md §5.1.2): one batch open at a time, many records in flight inside it,
// committed when the queue runs empty or the batch is full. After any anomaly it stops sending,
// settles the open batch (learns which prefix of it is stored) and re-sends the rest in a new
// batch; when its epoch was fenced it hands the rest back to the producer instead. The Go
// reference is client/sink.go; this is the same state machine on the event loop: replies are
// applied as they arrive, and the slow steps (reading the stream's info, settling, confirming a
// batch on a cluster) run one at a time as async tasks (`busy`), during which nothing is sent.

import { OP, ERR, KIND, replySubject, randomHex, sameRecord, leaderGet, leaderLast, leaderNext } from './fastbatch.js';
import { streamInfo, directGet, JsApiError, JS } from './jsapi.js';
import { BadRequestError, ConflictError, NotFoundError, UnavailableError, PctlError } from './errors.js';
import * as rules from './rules.js';
import { inProcessError } from './inprocess.js';
import { recordSubject, batchEndSubject, supersededInBatch, keySubjects } from './compact.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const current = (desc) => desc.epochs[desc.epochs.length - 1];

/** The partition streams' deduplication window (spec/protocol.md §2), milliseconds. */
const DEDUP_WINDOW = 120_000;
/** On a cluster, a batch's count stands only under a stream leader elected this long before. */
const LEADER_SETTLED = 5_000;
/** How many EOBs of a batch being settled may go unanswered (each for the acknowledgement
 * timeout) before the sink reads the partition back (spec/protocol.md §5.1.2, settle 1). */
const SILENT_EOBS = 3;
// The least time an EOB's answer is awaited while settling, in ms (spec/protocol.md §5.1.2).
const EOB_WAIT = 1000;

// A back-off before retry number attempt: 50 ms doubling up to 1 s.
function pause(attempt) { return Math.min(50 * 2 ** Math.min(attempt, 5), 1000); }

class Batch {
  constructor(id) {
    this.id = id;
    this.recs = []; // recs[i] was sent with batch seq i+1
    this.keys = null; // Pctl-Key values in the batch (the per-key rule on replicated streams)
    this.acked = 0; // records 1..acked are persisted and finished
    this.flowed = 0; // records 1..flowed are persisted says a flow ack (the window's base)
    this.commit = 0; // batch seq of the commit message once sent (n for op 2, n+1 for an EOB)
    this.anomaly = ''; // why the batch must be settled; '' while clean
    this.ended = false; // the server ended the batch (gap or error): a PubAck is on its way
    this.unknown = false; // the server no longer knows the batch (refusal 10208)
    this.never = false; // the first message was refused: nothing of the batch is stored
    this.noResp = false; // no responders: no stream on the subject (fenced?)
    this.pubAck = null;
    this.progress = Date.now(); // last reply
    this.checked = this.progress; // last stall check
    this.transient = false; // the anomaly calls for a pause before re-sending
    this.confirming = false; // a clean PubAck is being confirmed on a cluster
  }
}

export class Sink {
  constructor(p, epoch, partition) {
    this.p = p;
    this.epoch = epoch;
    this.partition = partition;
    this.compact = !!p.desc?.compact; // a record superseded in its batch counts as stored (spec §10.1)
    this.keys = keySubjects(p.desc); // records go to their keys' subjects (compacted or backfilled, spec/protocol.md §10.1)
    this.subject = batchEndSubject(p.topic, epoch, partition, this.keys); // EOBs (and records of a plain topic)
    this.stream = `PCTL_${p.topic}_${partition}`;
    this.queue = []; // records not yet sent, in order, from index qi
    this.qi = 0;
    this.b = null;
    this.floor = 0; // every record this sink stores is above this stream sequence
    this.floorKnown = false;
    // verify: the stream is on a cluster. nats-server 2.15.2 counts, in flow acks and a batch's
    // PubAck, batch messages whose raft proposals a leader's term change dropped (the stored
    // messages are then not a prefix of the batch). So on a cluster records finish only when
    // their batch is confirmed (confirm).
    this.verify = false;
    this.leader = '';
    this.leaderSince = '';
    this.replicas = 0;
    this.fenceDesc = null; // the producer says this descriptor ended the sink's epoch
    this.fencedSelf = null; // the sink found its epoch fenced and waits to be stopped
    this.aborted = null;
    this.connLost = false;
    this.busy = false;
    this.scheduled = false;
    this.exited = false;
    this.waiters = [];
    this.backoff = 0;
    this.holes = 0;
    this.exitEvent = new Promise((r) => { this.resolveExit = r; });
  }

  get queued() { return this.queue.length - this.qi; }

  // The per-key rule (spec/protocol.md §5.1.2): on a cluster a batch never holds two records of
  // the same key (keyless records are free). A record the server counted but did not store (a
  // hole) is then the only one of its key in its batch, and its re-send goes first in the next
  // batch, which starts only once this one is confirmed. Every stream on a cluster, R1 included:
  // a live replica change gives an R1 stream a raft group before the producer can know it.
  get perKey() { return this.verify && !this.p.test.noKeyRule; }

  push(pd) {
    this.queue.push(pd);
    this.kick();
  }

  front() { return this.queue[this.qi]; }

  shift() {
    const pd = this.queue[this.qi];
    this.queue[this.qi++] = undefined;
    if (this.qi >= 4096 && this.qi * 2 >= this.queue.length) {
      this.queue = this.queue.slice(this.qi);
      this.qi = 0;
    }
    return pd;
  }

  requeue(pds) {
    if (pds.length === 0) return;
    this.queue = pds.concat(this.queue.slice(this.qi));
    this.qi = 0;
  }

  log(msg) { this.p.log(`partition ${this.partition} of epoch ${this.epoch}: ${msg}`); }

  kick() {
    if (this.scheduled || this.exited) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.step();
    });
  }

  // Tells the sink that desc ended its epoch: it settles its open batch and stops, handing back
  // its records (the promise of its exit event).
  fence(desc) {
    this.fenceDesc = desc;
    this.kick();
    return this.exitEvent;
  }

  // Fails every record of the sink at once and stops it (a refused publish gets no answer at all,
  // so records in flight fail now too; answers that still come are ignored).
  abort(err) {
    if (this.aborted) return;
    this.aborted = err;
    this.failAll(err);
    this.notify();
    this.kick();
  }

  connChanged(connected) {
    if (!connected) this.connLost = true;
    this.notify();
    this.kick();
  }

  exit(ev) {
    if (this.exited) return;
    this.exited = true;
    if (this.b) this.p.batches.delete(this.b.id);
    this.resolveExit({ s: this, left: [], fenced: null, ...ev });
  }

  // Every record not acknowledged, the open batch's first, in order.
  takeQueue() {
    const left = [];
    if (this.b) {
      for (let i = this.b.acked; i < this.b.recs.length; i++) left.push(this.b.recs[i]);
      this.p.batches.delete(this.b.id);
      this.b = null;
    }
    for (let i = this.qi; i < this.queue.length; i++) left.push(this.queue[i]);
    this.queue = [];
    this.qi = 0;
    return left;
  }

  failAll(err) {
    for (const pd of this.takeQueue()) this.p.finish(pd, null, err);
  }

  // One step of the state machine: settle an anomaly, read the floor, or send.
  step() {
    if (this.busy || this.exited) return;
    if (this.aborted) {
      this.failAll(this.aborted);
      this.exit({ final: true });
      return;
    }
    if (this.fencedSelf && !this.fenceDesc) return; // fenced: wait for the producer to stop us
    const connLost = this.connLost;
    this.connLost = false;
    const b = this.b;
    if (b) {
      if (connLost && !b.anomaly && (b.recs.length > b.acked || b.commit > 0)) b.anomaly = 'the connection was lost with records in flight';
      if (this.fenceDesc && !b.anomaly) b.anomaly = `epoch ${current(this.fenceDesc).epoch} is current`;
      if (b.anomaly) {
        this.run(() => this.settleStep());
        return;
      }
      if (b.confirming) return;
    } else if (this.fenceDesc) {
      this.exit({ left: this.takeQueue(), fenced: this.fenceDesc, final: true });
      return;
    }
    if (!this.b && !this.floorKnown && this.queued > 0) {
      this.run(() => this.readFloor());
      return;
    }
    this.fill();
  }

  // Runs an async step; nothing is sent meanwhile. An error makes the producer unusable.
  run(fn) {
    this.busy = true;
    fn().catch((e) => {
      if (!this.aborted && !this.p.closed) this.p.fail(e instanceof PctlError ? e : new UnavailableError(`partition ${this.partition} of ${this.p.topic}: ${e?.message ?? e}`, { cause: e }));
    }).finally(() => {
      this.busy = false;
      this.kick();
    });
  }

  async settleStep() {
    const fenced = await this.settle(this.fenceDesc);
    if (fenced && !this.fenceDesc && !this.aborted) {
      this.fencedSelf = fenced;
      this.p.sinkFenced(fenced);
    }
  }

  // Reads the stream's last sequence before the sink's first batch, and checks that the stream
  // takes fast batches (allow_batched, JetStream API level 4).
  async readFloor() {
    for (let attempt = 0; ; attempt++) {
      let info;
      try {
        info = await streamInfo(this.p.client.nc, this.stream, { timeout: this.p.ackTimeout });
      } catch (e) {
        if (this.aborted) return;
        if (e instanceof JsApiError && e.errCode === JS.streamNotFound) {
          await this.p.fetch(); // a deleted topic says so
          throw new NotFoundError(`partition stream ${this.stream} of topic ${this.p.topic} does not exist`, { cause: e });
        }
        if (attempt % 10 === 9) this.log(`reading stream ${this.stream}: ${e.message}; retrying`);
        await sleep(pause(attempt));
        continue;
      }
      if (this.aborted) return;
      const level = Number(info?.config?.metadata?.['_nats.level'] ?? 0);
      if (info?.config?.allow_batched !== true) {
        throw new UnavailableError(`partition stream ${this.stream} does not allow fast batch publishing (allow_batched), which pctl's producer needs (spec/protocol.md §5.1); restart 'pctl serve' with this version: it updates the streams of existing topics`);
      }
      if (!(level >= 4)) {
        throw new UnavailableError(`partition stream ${this.stream} reports JetStream API level ${info?.config?.metadata?.['_nats.level'] ?? 'none'}; fast batches need level 4 (nats-server 2.14 or later on every node): upgrade the NATS servers`);
      }
      this.floor = info.state?.last_seq ?? 0;
      this.floorKnown = true;
      this.verify = !!info.cluster?.name || !!this.p.test.verify;
      this.noteLeader(info);
      return;
    }
  }

  // Opens a batch if there is none and records wait, sends records while the window allows, and
  // commits when the queue ran empty, the batch is full, or (perKey) the next record's key is in
  // the batch already.
  fill() {
    const p = this.p;
    if (!p.connected) return;
    if (!this.b) {
      if (this.queued === 0) return;
      this.b = new Batch(randomHex(16));
      p.batches.set(this.b.id, this);
      p.watch();
    }
    const b = this.b;
    if (b.anomaly || b.commit > 0 || b.confirming) return;
    const window = p.maxInFlight;
    const size = p.batchSize;
    const flow = Math.max(1, Math.floor(window / 4));
    const perKey = this.perKey;
    if (perKey && !b.keys) b.keys = new Set();
    const nc = p.client.nc;
    let clash = false;
    while (b.recs.length - Math.max(b.acked, b.flowed) < window && b.recs.length < size && this.queued > 0) {
      const next = this.front();
      if (!rules.admits(perKey, next.keyHdr === null, perKey && b.keys.has(next.keyHdr))) {
        clash = true;
        break;
      }
      const pd = this.shift();
      const seq = b.recs.length + 1;
      let op = OP.append;
      if (seq === 1) {
        op = OP.start;
        // No further record can join the batch now: a batch of one record is one message that
        // is stored and commits it.
        const after = this.front();
        if (this.queued === 0 || seq >= size || (perKey && after.keyHdr !== null && after.keyHdr === pd.keyHdr)) op = OP.commit;
      }
      try {
        nc.publish(this.keys ? recordSubject(p.topic, this.epoch, this.partition, true, pd.key) : this.subject, pd.value, { reply: replySubject(p.inbox, b.id, flow, seq, op), headers: p.headersOf(pd) });
      } catch (e) {
        if (/max_payload|payload size|too large/i.test(String(e?.message))) {
          p.finish(pd, null, new BadRequestError(`record ${pd.pseq} cannot be published: ${e.message}`, { cause: e }));
          continue;
        }
        // Not sent (connection closed): put it back and settle.
        this.requeue([pd]);
        b.anomaly = `publish failed: ${e?.message ?? e}`;
        b.transient = true;
        this.kick();
        return;
      }
      pd.sends++;
      pd.floors ??= new Map();
      if (!pd.floors.has(this.stream)) pd.floors.set(this.stream, this.floor);
      b.recs.push(pd);
      if (perKey && pd.keyHdr !== null) b.keys.add(pd.keyHdr);
      if (op === OP.commit) {
        b.commit = seq;
        return;
      }
    }
    if (b.recs.length > 0 && (b.recs.length >= size || this.queued === 0 || clash)) {
      const seq = b.recs.length + 1;
      try {
        nc.publish(this.subject, undefined, { reply: replySubject(p.inbox, b.id, flow, seq, OP.eob) });
      } catch (e) {
        b.anomaly = `publish failed: ${e?.message ?? e}`;
        b.transient = true;
        this.kick();
        return;
      }
      b.commit = seq;
    }
  }

  // The producer's sweep: the acknowledgement timeout and the stall check.
  tick(now) {
    const b = this.b;
    if (!b || this.busy || b.anomaly || b.confirming || this.exited) return;
    if (now - b.progress >= this.p.ackTimeout) {
      b.anomaly = `no reply within ${this.p.ackTimeout}ms`;
      this.kick();
    } else if (now - b.checked >= this.p.stallTimeout) {
      b.checked = now;
      this.p.requestCheck(); // a fenced subject on a cluster may answer nothing
    }
  }

  // A reply to one of this sink's batches (the producer routes them by batch id).
  reply(r) {
    if (this.exited || this.aborted) return;
    const b = this.b;
    if (!b || r.batch !== b.id) return;
    if (this.busy) {
      this.handleSettling(r);
      this.notify();
      return;
    }
    if (b.confirming) return;
    this.handle(r);
    this.kick();
  }

  // Applies one reply to the open batch.
  handle(r) {
    const b = this.b;
    b.progress = b.checked = Date.now();
    switch (r.kind) {
      case KIND.flowAck:
        if (r.ackSeq > b.recs.length) {
          b.anomaly = `flow acknowledgement of batch seq ${r.ackSeq}, only ${b.recs.length} sent`;
          return;
        }
        b.flowed = Math.max(b.flowed, r.ackSeq);
        if (!this.verify) this.ackUpTo(r.ackSeq);
        return;
      case KIND.gap:
        b.ended = true;
        b.anomaly ||= `gap: the server expected batch seq ${r.gapExpected}, got ${r.gapGot}`;
        return;
      case KIND.flowErr:
        b.ended = true;
        this.refused(r);
        b.anomaly ||= `batch seq ${r.gapGot} refused: ${r.errText} (${r.errCode})`;
        return;
      case KIND.refusal:
        this.refused(r);
        b.anomaly ||= `batch seq ${r.seq} refused: ${r.errText} (${r.errCode})`;
        return;
      case KIND.noResponders:
        b.noResp = true;
        b.anomaly ||= `no stream answers ${this.subject}`;
        this.p.requestCheck();
        return;
      case KIND.pubAck:
        b.pubAck = r;
        if (!b.anomaly && b.commit > 0 && r.ackBatch === b.id && !r.duplicate && r.count === b.recs.length) {
          if (this.verify) {
            b.confirming = true;
            this.run(() => this.confirmCommit(r));
            return;
          }
          this.committed(r); // clean
          return;
        }
        b.anomaly ||= `PubAck of ${r.count} records (batch ${JSON.stringify(r.ackBatch)}, duplicate ${r.duplicate}), ${b.recs.length} sent, commit sent: ${b.commit > 0}`;
        return;
      default:
        b.anomaly ||= `unexpected reply: ${r.errText}`;
    }
  }

  // On a cluster: a clean PubAck counts once the batch is confirmed.
  async confirmCommit(r) {
    const b = this.b;
    let res;
    try {
      if (this.p.test.holes && r.streamSeq >= b.recs.length) await this.p.test.holes(this.stream, r.streamSeq - b.recs.length + 1, r.streamSeq);
      res = await this.confirm(b.recs.length, r.streamSeq);
    } catch (e) {
      b.confirming = false;
      b.anomaly ||= `cannot confirm the batch on the cluster: ${e.message}`; // settle takes it up (the PubAck is kept)
      return;
    }
    b.confirming = false;
    if (this.aborted || this.b !== b) return;
    if (res.trusted) this.committed(r);
    else this.endConfirmed(res.found, r.streamSeq);
  }

  // What a refusal says about one message of the batch.
  refused(r) {
    const b = this.b;
    const seq = r.kind === KIND.flowErr ? r.gapGot : r.seq;
    if (seq >= 1 && seq <= b.recs.length) {
      const pd = b.recs[seq - 1];
      const was = pd.inProcess.stuck;
      if (pd.inProcess.note(r.errCode) && !was) {
        // Stuck (spec/protocol.md §5.1.5): a fast batch has no expected-sequence guard to renew
        // the id under, so settling fails the record unless it finds it stored.
        this.log(`record ${pd.pseq} (id ${pd.msgId}): JetStream answered 10158 ${pd.inProcess.count} times; failing it unless it is found stored`);
      }
    }
    switch (r.errCode) {
      case ERR.tooLarge:
        if (seq >= 1 && seq <= b.recs.length) {
          const pd = b.recs[seq - 1];
          pd.failed = new BadRequestError(`record ${pd.pseq} refused by partition ${this.partition}: ${r.errText} (JetStream error ${r.errCode}); a record must fit the stream's maximum message size`);
        }
        break;
      case ERR.unknownBatch:
        b.unknown = true;
        break;
      case ERR.batchDisabled:
      case ERR.badPattern:
      case ERR.badBatchId:
        this.p.fail(new UnavailableError(`partition stream ${this.stream} refused a fast batch: ${r.errText} (JetStream error ${r.errCode}); pctl's producer needs nats-server 2.14+ and streams with allow_batched (restart 'pctl serve' to update them)`));
        break;
      default: // 10211, 10071, 10158 (until the id is stuck, §5.1.5) and the rest: retried after a pause
        b.transient = true;
    }
    if (seq === 1 && r.kind === KIND.refusal && r.errCode !== ERR.unknownBatch) b.never = true; // nothing of the batch is stored
  }

  // Finishes the records of batch seqs acked+1..n: the server persisted them.
  ackUpTo(n) {
    const b = this.b;
    for (; b.acked < n; b.acked++) {
      const pd = b.recs[b.acked];
      if (pd.failed) continue; // cannot be: a refused message leaves a gap
      this.p.finish(pd, { partition: this.partition, epoch: this.epoch, seq: 0, duplicate: false });
    }
  }

  // Finishes a batch whose PubAck was clean.
  committed(r) {
    const b = this.b;
    const n = b.recs.length;
    const last = b.recs[n - 1];
    if (b.acked < n - 1) this.ackUpTo(n - 1);
    if (b.acked < n) {
      // Its first send, stored by this batch: the PubAck names it.
      const seq = last.sends === 1 && r.streamSeq > 0 ? r.streamSeq : 0;
      this.p.finish(last, { partition: this.partition, epoch: this.epoch, seq, duplicate: false });
      b.acked = n;
    }
    this.endBatch(r.streamSeq);
    this.backoff = 0;
  }

  endBatch(streamSeq) {
    if (streamSeq > this.floor) this.floor = streamSeq;
    this.p.batches.delete(this.b.id);
    this.b = null;
  }

  // Resolves when cond() holds, the acknowledgement timeout passes, or the sink is aborted.
  awaitCond(cond, ms = this.p.ackTimeout) {
    if (cond() || this.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const w = () => {
        if (!cond() && !this.aborted) return false;
        clearTimeout(t);
        resolve();
        return true;
      };
      const t = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        resolve();
      }, ms);
      this.waiters.push(w);
    });
  }

  notify() {
    if (this.waiters.length) this.waiters = this.waiters.filter((w) => !w());
  }

  checkAborted() {
    if (this.aborted) throw this.aborted;
  }

  // Learns which prefix of the open batch is stored, finishes it, and queues the rest again (in
  // the same epoch) or returns the descriptor that fenced the partition (the rest stays for
  // takeQueue). The batch is closed when settle returns: nothing more of it can be stored.
  async settle(fenceDesc) {
    const b = this.b;
    this.p.settled++;
    this.log(`settling batch ${b.id} (${b.recs.length} records sent, ${b.acked} acknowledged): ${b.anomaly}`);
    const st = { desc: fenceDesc, fenced: fenceDesc && current(fenceDesc).epoch > this.epoch ? fenceDesc : null };
    let n = b.acked; // records 1..n are persisted
    const exact = new Map();
    if (!b.never) n = Math.max(n, await this.learn(st, exact));
    this.checkAborted();
    // Records 1..n are persisted (a prefix); the rest are not, and never will be. On a cluster
    // the server's word is checked first (confirm).
    let stored = new Map();
    for (let i = b.acked; i < n; i++) stored.set(i, exact.get(i) ?? 0);
    if (this.verify && n > b.acked) {
      for (let attempt = 0; ; attempt++) {
        try {
          const res = await this.confirm(n, b.pubAck?.streamSeq ?? 0);
          if (!res.trusted) stored = res.found;
          break;
        } catch (e) {
          this.checkAborted();
          if (e instanceof NotFoundError) throw e;
          this.log(`confirming batch ${b.id}: ${e.message}; retrying`);
          await sleep(pause(attempt));
        }
      }
    }
    this.checkAborted();
    const before = b.acked;
    const rest = this.finishStored(stored);
    this.p.recovered += b.recs.length - before - rest.length - b.recs.slice(before).filter((pd) => pd.failed).length;
    const transient = b.transient;
    this.p.batches.delete(b.id);
    this.b = null;
    this.log(`batch ${b.id}: ${b.recs.length - rest.length} of ${b.recs.length} records stored or failed; ${rest.length} to send again`);
    this.requeue(rest);
    if (st.fenced) return st.fenced;
    if (transient) {
      this.backoff = Math.min(Math.max(2 * this.backoff, 50), 1000);
      await sleep(this.backoff);
    }
    return null;
  }

  // How many records of the open batch are persisted (settle's core): from the batch's PubAck,
  // by closing the batch with an EOB, or by reading the partition back.
  async learn(st, exact) {
    const b = this.b;
    const p = this.p;
    let waited = false;
    let search = false;
    let silent = 0; // EOBs that got no answer
    for (let attempt = 0; ; attempt++) {
      this.checkAborted();
      const fd = this.fenceDesc;
      if (fd && (!st.desc || current(fd).epoch > current(st.desc).epoch)) st.desc = fd; // the producer knows a newer descriptor
      if (b.pubAck) {
        const { k, at, ok } = await this.checkPubAck(b.pubAck);
        if (ok) {
          if (at >= 0) exact.set(at, b.pubAck.streamSeq);
          if (b.pubAck.streamSeq > this.floor && k > b.acked) this.floor = b.pubAck.streamSeq;
          return k;
        }
        b.pubAck = null; // not provably about these records: read the partition back
        search = true;
      }
      if (b.ended && !waited) {
        // The server ended the batch (a gap or an error): its PubAck is on its way.
        waited = true;
        await this.awaitCond(() => b.pubAck !== null);
        continue;
      }
      if (search || b.unknown) {
        const { k, at } = await this.search(st.fenced);
        if (k > b.acked && at > 0) {
          exact.set(k - 1, at);
          this.floor = Math.max(this.floor, at);
        }
        return k;
      }
      // Close the batch ourselves: an EOB above everything sent, on the stream's current subject
      // (after a fence the batch lives on under the stream's new subject).
      await this.waitConnected();
      if (b.noResp || attempt > 0) {
        try {
          st.desc = await p.fetch({ timeout: p.ackTimeout });
        } catch (e) {
          if (e?.code === 'not_found' || e?.code === 'permission') throw e;
          this.log(`reading the descriptor: ${e.message}; closing the batch on ${this.subject}`);
        }
      }
      let subject = this.subject;
      const d = st.desc;
      if (d && current(d).epoch > this.epoch) {
        st.fenced = d;
        const cur = current(d);
        subject = batchEndSubject(p.topic, cur.epoch, this.partition, this.keys);
        if (this.partition >= cur.partitions) {
          // Shrunk away: the retired subject takes no publishes (not even an EOB), and nothing
          // more of the batch can be stored: read the partition back.
          search = true;
          continue;
        }
      } else if (d && d.change && b.noResp) {
        // Fenced but the new epoch is not active yet: wait for it before closing.
        if (attempt % 20 === 0) this.log(`epoch change to ${d.change.to} in progress (${d.change.state}); waiting for it`);
        await sleep(Math.min(pause(attempt), 100));
        continue;
      }
      b.noResp = false;
      const gen = p.disconnects;
      try {
        p.client.nc.publish(subject, undefined, { reply: replySubject(p.inbox, b.id, 1, b.recs.length + 1, OP.eob) });
      } catch (e) {
        this.log(`closing batch ${b.id}: ${e.message}`);
      }
      // A connection lost meanwhile lost the answer too: close again once connected.
      // Awaited for the acknowledgement timeout but at least EOB_WAIT ms (spec §5.1.2, settle 1):
      // with a timeout of a few milliseconds a late answer is not silence.
      await this.awaitCond(() => b.pubAck !== null || b.unknown || b.noResp || p.disconnects !== gen, Math.max(p.ackTimeout, EOB_WAIT));
      if (b.pubAck === null && !b.unknown && !b.noResp && p.disconnects === gen && ++silent >= SILENT_EOBS) {
        // No answer at all to the EOB. nats-server 2.15.2 keeps a fast batch whose commit waits
        // for proposals a replica or placement change dropped "committing" for good (its cleanup
        // timer stops at the commit) and skips every later message of it without a reply, while
        // the stream takes new batches: read the partition back (spec/protocol.md §5.1.2,
        // settle 1) instead of closing it forever.
        this.log(`batch ${b.id}: ${silent} EOBs on ${subject} had no answer within ${Math.max(p.ackTimeout, EOB_WAIT)} ms each; reading the partition back`);
        search = true;
        continue;
      }
      if (b.pubAck === null && !b.unknown && p.disconnects === gen) await sleep(pause(attempt));
    }
  }

  // Applies a reply while the batch is being settled: flow acks still confirm persisted records;
  // a PubAck, refusal or no responders say how the batch ended.
  handleSettling(r) {
    const b = this.b;
    switch (r.kind) {
      case KIND.flowAck:
        if (r.ackSeq <= b.recs.length && !this.verify) this.ackUpTo(r.ackSeq);
        break;
      case KIND.gap:
        b.ended = true;
        break;
      case KIND.flowErr:
      case KIND.refusal:
        this.refused(r);
        if (r.kind === KIND.flowErr) b.ended = true;
        break;
      case KIND.noResponders:
        if (r.op === OP.eob) b.noResp = true; // only our EOB's: the records' own 503s are old news by now
        break;
      case KIND.pubAck:
        b.pubAck = r;
        break;
      default:
    }
  }

  async waitConnected() {
    while (!this.p.connected) {
      if (this.p.client.nc.isClosed()) throw new UnavailableError('the connection is closed');
      this.checkAborted();
      await sleep(20);
    }
  }

  // Finishes the open batch's records not yet finished: those in stored (index -> stream
  // sequence, 0 if unknown) are acknowledged, refused ones fail, those whose id is stuck "in
  // process" fail (spec/protocol.md §5.1.5: not re-sent with the same id until the duplicate
  // window ends, nor under a new id without a guard), and the others are returned, in order, to be
  // sent again.
  finishStored(stored) {
    const b = this.b;
    const rest = [];
    for (let i = b.acked; i < b.recs.length; i++) {
      const pd = b.recs[i];
      if (pd.failed) this.p.finish(pd, null, pd.failed);
      else if (stored.has(i)) this.p.finish(pd, { partition: this.partition, epoch: this.epoch, seq: stored.get(i), duplicate: false });
      else if (pd.inProcess.stuck) {
        pd.failed = inProcessError(pd.pseq, pd.msgId, this.partition, pd.inProcess.count); // failed, not recovered
        this.p.finish(pd, null, pd.failed);
      }
      else rest.push(pd);
    }
    b.acked = b.recs.length;
    return rest;
  }

  // Ends a committed batch that confirm had to read back: records found are acknowledged, the
  // others (the server counted them but did not store them) go out again in a new batch, after
  // records sent later that it did store.
  endConfirmed(found, streamSeq) {
    const b = this.b;
    const rest = this.finishStored(found);
    if (rest.length > 0) {
      this.holes += rest.length;
      this.p.holes += rest.length;
      this.log(`SERVER FAULT: batch ${b.id} was committed with ${b.recs.length} records but ${rest.length} of them are not stored (nats-server counted raft proposals a leader's term change dropped); sending them again after later records: per-key order may be broken for their keys`);
    }
    this.endBatch(streamSeq);
    this.requeue(rest);
  }

  // The lowest stream sequence above which a copy of any of the open batch's records from index
  // from on can be stored: the sink's floor, or lower for records sent to this stream before.
  lowFloor(from, to) {
    const first = [];
    for (let i = from; i < to; i++) {
      const f = this.b.recs[i].floors?.get(this.stream);
      if (f !== undefined) first.push(f);
    }
    return rules.searchFloor(this.floor, first);
  }

  // Notes the stream's leader, its election time and its replicas, and reports whether any of
  // them changed since the last note.
  noteLeader(info) {
    const c = info?.cluster;
    if (!c) return true;
    const since = c.leader_since ?? '';
    const replicas = info.config?.num_replicas ?? 0;
    const changed = (c.leader ?? '') !== this.leader || since !== this.leaderSince || replicas !== this.replicas;
    this.leader = c.leader ?? '';
    this.leaderSince = since;
    this.replicas = replicas;
    return changed;
  }

  // On a cluster, checks records acked..k-1 of the open batch that the server counted as
  // persisted. When the stream's leader is the one noted before the batch and was elected more
  // than 5 s ago, the count is trusted. Otherwise the stream is read back (readBack) and each
  // record of the batch looked for: found maps the index of each record found to its stream
  // sequence. Records not found get a new deduplication id before they are sent again: the
  // server may still hold their old ids as "being stored". That gives up deduplication, which is
  // safe only because readBack reads up to the stream leader's end (spec/protocol.md §5.1.2,
  // "the read-back's end").
  async confirm(k, upTo) {
    const b = this.b;
    const p = this.p;
    const info = await streamInfo(p.client.nc, this.stream, { timeout: p.ackTimeout });
    const changed = this.noteLeader(info);
    // No leader_since: a stream without a raft group (R1), which has no elections (a replica
    // change that gives it one changes its replicas, which counts as a change).
    const age = this.leaderSince === '' ? Infinity : Date.now() - Date.parse(this.leaderSince);
    if (!changed && age > LEADER_SETTLED && !p.test.verify) return { trusted: true, found: null };
    const { found, low, top } = await this.readBack(Math.max(info.state?.last_seq ?? 0, upTo));
    // A hole's new token is not a renewal on 10158 (spec/protocol.md §5.1.5): a hole is re-sent
    // under it, stuck old id or not, and the new id's 10158 answers are counted afresh.
    for (let i = b.acked; i < b.recs.length; i++) if (!found.has(i)) p.renew(b.recs[i]);
    if (found.size < k - b.acked) this.log(`read back ${low + 1}..${top} after a leader change: ${found.size} of ${b.recs.length - b.acked} records of batch ${b.id} found (${k - b.acked} counted by the server)`);
    return { trusted: false, found };
  }

  // Reads the stream back from the stream leader, from the lowest floor of the open batch's
  // records not yet finished to the stream's end as the leader sees it, and returns {found:
  // index -> stream sequence of each of those records found, low, top: the range read}. known is
  // the highest sequence the caller knows of (the stream info's last sequence, the PubAck's).
  //
  // The stream info is no end: while the stream has no leader, every member answers STREAM.INFO
  // with its own state, and one that lags names a last sequence below records already stored; a
  // read that stopped there would not find them and confirm would give them new ids: stored
  // twice. The end is the leader's last message (STREAM.MSG.GET, which only a stream leader
  // answers; nats-server makes a node the leader only once it applied every entry of earlier
  // terms its log holds): every copy of the batch's records proposed before that answer is at or
  // below it. When the last message is gone (or the stream is empty), the read goes on message by
  // message (next_by_subj) until the leader says there is none after it.
  async readBack(known) {
    const b = this.b;
    const p = this.p;
    const want = new Map();
    for (let i = b.acked; i < b.recs.length; i++) want.set(b.recs[i].msgId, i);
    const found = new Map();
    const look = (seq, m) => {
      const i = want.get(m.headers.get('Nats-Msg-Id'));
      if (i !== undefined && sameRecord(m, b.recs[i])) found.set(i, seq);
    };
    const last = await this.retryLeader('the last message', () => leaderLast(p.client.nc, this.stream, p.ackTimeout));
    let top = last ? Math.max(known, last.seq) : known;
    const low = this.lowFloor(b.acked, b.recs.length);
    await this.readRange(low + 1, top, look);
    if (!last) {
      for (let from = Math.max(top, low) + 1; ;) {
        const m = await this.retryLeader(`the first message from ${from}`, () => leaderNext(p.client.nc, this.stream, from, p.ackTimeout));
        if (!m || m.seq < from) break;
        look(m.seq, m);
        top = m.seq;
        from = m.seq + 1;
      }
    }
    // A record whose id another producer instance may have used (a content token) may be stored
    // further down, as long ago as the deduplication window reaches.
    let foreign = false;
    for (let i = b.acked; i < b.recs.length; i++) if (!found.has(i) && p.contentTokens) foreign = true;
    if (foreign && low > 0) {
      const from = await this.seqAt(Date.now() - DEDUP_WINDOW - 10_000);
      if (from <= low) await this.readRange(from, low, look);
    }
    if (this.compact) supersededInBatch(b.recs.map((pd) => pd.keyHdr), b.acked, found);
    if (top > known) {
      let above = 0;
      for (const seq of found.values()) if (seq > known) above++;
      if (above > 0) this.log(`read back past the stream info's last sequence ${known} to the leader's end ${top}: ${above} records of batch ${b.id} are stored above ${known} (a read that stopped there would have sent them again under new ids)`);
    }
    return { found, low, top };
  }

  // The sequence of the stream's first message stored at or after unix ms t (Infinity if none).
  async seqAt(t) {
    const m = await directGet(this.p.client.nc, this.stream, { start_time: new Date(t).toISOString() }, { timeout: this.p.ackTimeout });
    return m ? m.seq : Infinity;
  }

  // Reads stream messages first..last from the stream leader, 64 at a time, and calls f for each.
  async readRange(first, last, f) {
    for (let lo = first; lo <= last; lo += 64) {
      const hi = Math.min(last, lo + 63);
      const msgs = await Promise.all(Array.from({ length: hi - lo + 1 }, (_, i) => this.getMsg(lo + i)));
      msgs.forEach((m, i) => { if (m) f(lo + i, m); });
    }
  }

  // One stored message from the stream leader (null when there is none), retrying transient
  // failures. Not a direct get: any replica may answer those, one that lags included.
  getMsg(seq) {
    return this.retryLeader(`message ${seq}`, () => leaderGet(this.p.client.nc, this.stream, seq, this.p.ackTimeout));
  }

  // Runs one STREAM.MSG.GET request (get; what names the message asked for) until it is
  // answered: the message, or null when there is none. A stream without a leader answers
  // "cluster not available" and one that is electing answers nothing; both are retried with the
  // back-off.
  async retryLeader(what, get) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await get();
      } catch (e) {
        if (e instanceof NotFoundError || e?.code === 'permission') throw e;
        this.checkAborted();
        if (this.p.client.nc.isClosed()) throw new UnavailableError(`reading ${what} of ${this.stream}: the connection is closed`, { cause: e });
        await sleep(pause(attempt));
      }
    }
  }

  // What a PubAck of a batch that had an anomaly proves. ok: records 1..k are persisted; at is
  // the index of the record found at the PubAck's stream sequence (-1: none). Not ok: the PubAck
  // is not provably about this producer's records (read the partition back).
  async checkPubAck(r) {
    const b = this.b;
    const n = b.recs.length;
    if (r.ackBatch !== b.id || r.count > n || r.count < b.acked) return { k: 0, at: -1, ok: false };
    const k = r.count;
    if (r.duplicate) {
      // A batch of one record whose id was stored already: it counts only if the stored message
      // is this record.
      if (n !== 1 || k !== 1) return { k: 0, at: -1, ok: false };
      // Its flow ack counted the duplicate as persisted and acknowledged the record already: the
      // PubAck adds nothing, and must not acknowledge it twice.
      if (b.acked === 1) return { k: 1, at: -1, ok: true };
      const m = await this.getMsg(r.streamSeq);
      const pd = b.recs[0];
      if (m && sameRecord(m, pd)) {
        this.p.finish(pd, { partition: this.partition, epoch: this.epoch, seq: r.streamSeq, duplicate: true });
        b.acked = 1;
        return { k: 1, at: -1, ok: true };
      }
      pd.failed = new ConflictError(`record ${pd.pseq} (id ${pd.msgId}) was acknowledged as a duplicate of stream sequence ${r.streamSeq} of partition ${this.partition}, which holds a different record: it is NOT stored; another client published with this record's deduplication id`);
      return { k: 1, at: -1, ok: true };
    }
    if (k === 0 || k === b.acked) return { k, at: -1, ok: true };
    if (r.streamSeq === 0) return { k: 0, at: -1, ok: false }; // stored nothing new: cannot be checked
    const m = await this.getMsg(r.streamSeq);
    for (let i = k - 1; i >= 0; i--) {
      if (m && sameRecord(m, b.recs[i])) return { k, at: i, ok: true };
      if (this.verify) break; // on a cluster only the last counted record proves the count
    }
    this.log(`the PubAck of batch ${b.id} names stream sequence ${r.streamSeq}, which holds none of its records`);
    return { k: 0, at: -1, ok: false };
  }

  // Reads the partition back from its top (the epoch's boundary when fenced) down to the lowest
  // floor, and returns how many records of the open batch are stored: the batch stores a prefix
  // of what was sent, so the highest of its records found says it (with its sequence).
  async search(fenced) {
    const b = this.b;
    let top = 0;
    if (fenced) {
      const e = fenced.epochs.find((x) => x.epoch === this.epoch);
      const b = e?.boundaries?.[this.partition];
      top = rules.searchTop(b !== undefined, b ?? 0).top;
    }
    if (top === 0) {
      for (let attempt = 0; ; attempt++) {
        try {
          const info = await streamInfo(this.p.client.nc, this.stream, { timeout: this.p.ackTimeout });
          top = info.state?.last_seq ?? 0;
          break;
        } catch (e) {
          if (e instanceof JsApiError && e.errCode === JS.streamNotFound) throw new NotFoundError(`partition stream ${this.stream} is gone`, { cause: e });
          this.checkAborted();
          await sleep(pause(attempt));
        }
      }
    }
    const want = new Map();
    for (let i = b.acked; i < b.recs.length; i++) want.set(b.recs[i].msgId, i);
    const low = this.lowFloor(b.acked, b.recs.length);
    for (let hi = top; hi > low;) {
      const lo = hi - low > 64 ? hi - 63 : low + 1;
      const msgs = await Promise.all(Array.from({ length: hi - lo + 1 }, (_, i) => this.getMsg(lo + i)));
      for (let i = msgs.length - 1; i >= 0; i--) {
        const m = msgs[i];
        if (!m) continue;
        const j = want.get(m.headers.get('Nats-Msg-Id'));
        if (j !== undefined && sameRecord(m, b.recs[j])) {
          this.log(`search: record ${j + 1} of batch ${b.id} is stored at ${lo + i}`);
          return { k: j + 1, at: lo + i };
        }
      }
      hi = lo - 1;
    }
    return { k: b.acked, at: 0 };
  }
}
