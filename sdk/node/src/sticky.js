// The producer's sticky-ambiguity rule (spec/protocol.md §5.1.2) as an I/O-free state machine,
// the same as the Go core's proto.Sticky: events in (a record produced, records acknowledged, an
// anomaly on a sink, a sink's settling decided, records failed before transmit, a newer epoch,
// close), actions out
// ({send: [{seq, epoch, partition}], acked: [seq], failed: [seq]}). No I/O, no clock, no
// partitioner: f(epoch, key) gives a key's partition. tests/protocol.test.js replays
// spec/vectors/protocol/sticky-ambiguity.jsonl and sticky-permanent-failures.jsonl against it.
//
// The rule: an anomaly makes every record a sink has in flight ambiguous; while any is, the sink
// sends nothing more (of any key); other partitions' sinks of the epoch go on. Nothing a sink
// holds moves to another partition or epoch before the sink settled: after a newer epoch every
// old sink's records, and those produced since, are re-sent in send order once every old sink
// settled. A record settled as stored is acknowledged where it is; one not stored is re-sent,
// ahead of every later record; one failed for good (in settling, or before it is transmitted)
// fails where it is and is never sent again. Only settling ends an ambiguity; close fails what is
// left.

import { resendOrder } from './rules.js';

const none = () => ({ send: [], acked: [], failed: [] });

export class Sticky {
  /** @param {number} epoch the descriptor's current epoch @param {(epoch: number, key: string) => number} f */
  constructor(epoch, f) {
    this.epoch = epoch;
    this.next = 0; // a newer epoch waiting for the old sinks
    this.f = f;
    this.sinks = []; // {epoch, partition, recs: [{seq, key, sent, ambiguous}]} in creation order
    this.held = []; // produced while moving to epoch next
    this.closed = false;
  }

  _sink(epoch, partition) { return this.sinks.find((k) => k.epoch === epoch && k.partition === partition); }

  _ambiguous(k) { return k.recs.some((r) => r.ambiguous); }

  _place(r, a) {
    const q = this.f(this.epoch, r.key);
    let k = this._sink(this.epoch, q);
    if (!k) { k = { epoch: this.epoch, partition: q, recs: [] }; this.sinks.push(k); }
    k.recs.push(r);
    if (!this._ambiguous(k)) { r.sent = true; a.send.push({ seq: r.seq, epoch: k.epoch, partition: q }); }
  }

  /** The application sent record seq with key. */
  produce(seq, key) {
    const a = none();
    const r = { seq, key, sent: false, ambiguous: false };
    if (this.closed) a.failed.push(seq);
    else if (this.next !== 0) this.held.push(r);
    else this._place(r, a);
    return a;
  }

  /** A clean acknowledgement covers these records in flight (never an ambiguous one). */
  acked(seqs) {
    const a = none();
    for (const seq of seqs) {
      for (const k of this.sinks) {
        const i = k.recs.findIndex((r) => r.seq === seq && r.sent && !r.ambiguous);
        if (i >= 0) { k.recs.splice(i, 1); a.acked.push(seq); break; }
      }
    }
    return a;
  }

  /** The sink's open batch had an anomaly: its records in flight are ambiguous. Nothing moves. */
  anomaly({ epoch, partition }) {
    const k = this._sink(epoch, partition);
    if (k) for (const r of k.recs) if (r.sent) r.ambiguous = true;
    return none();
  }

  /**
   * Settling decided the sink's ambiguous records: those in stored are stored, those in failed
   * failed for good (never sent again; a record in both is stored), the rest not stored.
   */
  settled({ epoch, partition }, stored, failed = []) {
    const k = this._sink(epoch, partition);
    if (!k || !this._ambiguous(k)) throw new Error(`sink (epoch ${epoch}, partition ${partition}) has no ambiguous record to settle`);
    const a = none();
    const in_ = new Set(stored);
    const out = new Set(failed);
    k.recs = k.recs.filter((r) => {
      if (!r.ambiguous) return true;
      if (in_.has(r.seq)) { a.acked.push(r.seq); return false; }
      if (out.has(r.seq)) { a.failed.push(r.seq); return false; }
      r.ambiguous = false;
      r.sent = false;
      return true;
    });
    if (this.next !== 0) { this._regather(a); return a; }
    for (const r of k.recs) if (!r.sent) { r.sent = true; a.send.push({ seq: r.seq, epoch, partition }); }
    return a;
  }

  /**
   * The producer failed these records for good before transmitting them, wherever they wait
   * (told to be sent, behind an ambiguous record, held for a newer epoch): each one the machine
   * holds fails; nothing else changes. An ambiguous record is not failed this way: settling
   * decides it.
   */
  drop(seqs) {
    const a = none();
    for (const seq of seqs) {
      let gone = false;
      for (const k of this.sinks) {
        const i = k.recs.findIndex((r) => r.seq === seq);
        if (i >= 0) {
          if (!k.recs[i].ambiguous) { k.recs.splice(i, 1); gone = true; }
          break;
        }
      }
      const h = this.held.findIndex((r) => r.seq === seq);
      if (h >= 0) { this.held.splice(h, 1); gone = true; }
      if (gone) a.failed.push(seq);
    }
    return a;
  }

  /** The descriptor shows epoch current: old sinks' records in flight are ambiguous until settled. */
  newEpoch(current) {
    const a = none();
    if (current <= this.epoch || current <= this.next) return a;
    this.next = current;
    for (const k of this.sinks) for (const r of k.recs) if (r.sent) r.ambiguous = true;
    this._regather(a);
    return a;
  }

  _regather(a) {
    if (this.sinks.some((k) => this._ambiguous(k))) return;
    const left = this.sinks.flatMap((k) => k.recs).concat(this.held);
    this.sinks = [];
    this.held = [];
    this.epoch = this.next;
    this.next = 0;
    for (const i of resendOrder(left.map((r) => r.seq))) {
      const r = left[i];
      r.sent = false;
      r.ambiguous = false;
      this._place(r, a);
    }
  }

  /** The producer is closed: every unacknowledged record fails, in send order. */
  close() {
    const a = none();
    a.failed = this.sinks.flatMap((k) => k.recs).concat(this.held).map((r) => r.seq).sort((x, y) => x - y);
    this.sinks = [];
    this.held = [];
    this.closed = true;
    return a;
  }
}
