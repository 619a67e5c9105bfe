// An example stateful processor (spec/protocol.md §6.9): a per-key running total, kept in a local
// store (a Map), made durable in a NATS KV bucket (one entry per key), and handed over between
// the members of its consumer group with the consumer's `state` option. tests/state.test.js runs
// it against a real broker (two members, a third joins, the topic grows 4 -> 8, a member crashes).
//
// Every input record's value is a decimal amount; the processor adds it to its key's total. For
// each record it applies it writes the key's new state to the bucket (and waits for the
// acknowledgement) before the record is acknowledged, so the bucket always holds every applied
// record's effect. The state carries the input record that last changed it (partition and stream
// sequence): a record delivered again after a member crash is recognised and not counted twice
// (a key's records are redelivered only from their own partition, after the ones of that
// partition already applied). load() installs the bucket's state of the key; flush() only drops
// keys from the local store, since the bucket already has them.
//
//   const store = new KV(client.connection, 'totals', 5000);       // a bucket that exists
//   const rt = new RunningTotal(store);
//   const c = await client.consumer('payments', { group: 'totals', assignor: 'sticky', state: rt });
//   await c.run((m) => rt.handle(m));

import { KV } from '../src/kv.js';

export { KV };

/** One member's running totals: state handler ({load, flush}) and record handler (handle). */
export class RunningTotal {
  /** store: {get(key) -> {value}|null, put(key, bytes)} (this SDK's KV over a bucket). */
  constructor(store, { loads = true } = {}) {
    this.store = store;
    this.local = new Map(); // the keys this member holds: key -> {total, count, partition, seq}
    this.loads = loads; // false: a wrong processor that does not load on arrival (tests)
    this.stats = { applied: 0, duplicates: 0, loads: 0, flushes: 0 };
  }

  // A key as a bucket key (a subject token): its bytes in hex.
  static token(key) { return `k${Buffer.from(key).toString('hex')}`; }

  async handle(m) {
    if (m.key === null) return;
    const amount = Number(m.value.toString());
    if (!Number.isSafeInteger(amount)) throw new Error(`record ${m.topic}/${m.partition} seq ${m.seq}: value ${JSON.stringify(m.value.toString())} is not a decimal amount`);
    const k = m.key.toString('latin1');
    const st = this.local.get(k);
    if (st && st.partition === m.partition && m.seq <= st.seq) {
      this.stats.duplicates++;
      return; // applied before a crash, delivered again
    }
    const next = { total: (st?.total ?? 0) + amount, count: (st?.count ?? 0) + 1, partition: m.partition, seq: m.seq };
    await this.store.put(RunningTotal.token(m.key), Buffer.from(JSON.stringify(next)));
    this.local.set(k, next);
    this.stats.applied++;
  }

  /** Installs the bucket's state of the keys (a key the bucket does not have starts at zero). */
  async load(ks) {
    this.stats.loads++;
    for (const key of ks.keys) {
      const k = key.toString('latin1');
      this.local.delete(k);
      if (!this.loads) continue;
      const e = await this.store.get(RunningTotal.token(key));
      if (e && !e.deleted && e.value.length) this.local.set(k, JSON.parse(Buffer.from(e.value).toString()));
    }
  }

  /** Drops the keys: the bucket already holds their state, written before each acknowledgement. */
  async flush(ks) {
    this.stats.flushes++;
    for (const key of ks.keys) this.local.delete(key.toString('latin1'));
  }
}
