// Replays the protocol trace vectors (spec/vectors/protocol/*.jsonl, spec/vectors/README.md)
// against this SDK's decisions (src/rules.js, which the consumer decides through): the same
// hand-written traces the Go core and the other SDKs replay.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as rules from '../src/rules.js';
import { Sticky } from '../src/sticky.js';

// The decisions replayed: the consumer and producer rules, and the producer's sticky-ambiguity
// machine (src/sticky.js).
const core = { ...rules, Sticky };

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'spec', 'vectors', 'protocol');
const FORMAT = 'pctl-protocol-trace/1';

/** Replays one file's text against impl (rules.js or a mutated copy): returns [mismatches, decisions]. */
export function replay(text, impl) {
  const lines = text.split('\n').filter((l) => l !== '');
  const hdr = JSON.parse(lines[0]);
  if (hdr.format !== FORMAT) throw new Error(`not a ${FORMAT} file: ${lines[0]}`);
  const bad = [];
  let n = 0;
  for (const line of lines.slice(1)) {
    const tr = JSON.parse(line);
    let topic = tr.topic;
    const pos = new Map();
    const leases = new Map();
    const revoked = new Set();
    let now = 0;
    const session = tr.session_ms ?? 0;
    const at = (q) => pos.get(q) ?? 0;
    const done = (q) => (e) => revoked.has(`${q}/${e}`);
    const run = (q, list) => { for (const e of list) revoked.add(`${q}/${e}`); };
    let sticky = null; // the producer's sticky machine, started at the first of its events
    const stickyStep = (kind, a) => {
      if (!sticky) {
        sticky = new impl.Sticky(topic.epochs[topic.epochs.length - 1].epoch, (epoch, key) => {
          const v = tr.f.find((x) => x.epoch === epoch && x.key_hex === key);
          if (!v) throw new Error(`${tr.trace}: no f for key ${key} in epoch ${epoch}`);
          return v.partition;
        });
      }
      try {
        switch (kind) {
          case 'produce':
            if (a.keyless) throw new Error('the sticky traces have keyed records only');
            return sticky.produce(a.seq, a.key_hex);
          case 'acked': return sticky.acked(a.seqs);
          case 'anomaly': return sticky.anomaly(a);
          case 'settled': return sticky.settled(a, a.stored, a.failed ?? []);
          case 'drop': return sticky.drop(a.seqs);
          case 'new_epoch': return sticky.newEpoch(a.epoch);
          default: return sticky.close();
        }
      } catch (err) {
        return { error: err.message }; // a core that refuses a valid event decides wrongly
      }
    };
    tr.steps.forEach((st, i) => {
      const ev = st.event;
      const kinds = Object.keys(ev);
      if (kinds.length !== 1) throw new Error(`${tr.trace} step ${i}: ${kinds.length} event kinds`);
      const kind = kinds[0];
      const a = ev[kind];
      let got;
      switch (kind) {
        case 'positions': for (const [q, p] of Object.entries(a)) pos.set(Number(q), p); return;
        case 'lease': leases.set(a.partition, a); return;
        case 'now': now = a; return;
        case 'descriptor': topic = a; return;
        case 'record': {
          const f = (ep) => {
            const v = tr.f.find((x) => x.epoch === ep.epoch && x.key_hex === a.key_hex);
            if (!v) throw new Error(`${tr.trace}: no f for key ${a.key_hex} in epoch ${ep.epoch}`);
            return v.partition;
          };
          got = impl.gateRecord(topic, impl.drainedThrough(topic, 0, at), a.epoch, a.partition, f, at);
          break;
        }
        case 'drained_through': got = { drained_through: impl.drainedThrough(topic, 0, at) }; break;
        case 'assignable': got = { assignable: impl.assignable(topic, at) }; break;
        case 'past_boundary': {
          const l = leases.get(a.partition);
          const live = !!l && impl.leaseLive(l.owner, l.lease_end, now, impl.maxClockSkew(session));
          got = { past: impl.pastBoundary(topic, a.partition, a.boundary, at, live) };
          break;
        }
        case 'max_skew': got = { max_skew_ms: impl.maxClockSkew(session) }; break;
        case 'acquire': got = { take: impl.mayAcquire(tr.member, a.owner, a.lease_end, now, impl.maxClockSkew(session)) }; break;
        case 'deliver': got = { deliver: impl.mayDeliver(a.lease_until, now, session) }; break;
        case 'marker': got = impl.fenceMarker(topic, a.partition, a.seq, a.fence, done(a.partition)); run(a.partition, got.revoke); break;
        case 'at': {
          const rv = impl.revokes(topic, a.partition, a.position, done(a.partition));
          run(a.partition, rv);
          got = { revoke: rv, commit: rv.length > 0 };
          break;
        }
        case 'acquired': {
          const p = impl.passed(topic, a.partition, a.position);
          run(a.partition, p);
          got = { passed: p };
          break;
        }
        case 'fence_resend': {
          const recs = a.records;
          const cur = topic.epochs[topic.epochs.length - 1];
          const order = impl.resendOrder(recs.map((r) => r.seq)).map((i) => recs[i]);
          const per = new Map();
          for (const r of order) {
            if (r.keyless) continue;
            const v = tr.f.find((x) => x.epoch === cur.epoch && x.key_hex === r.key_hex);
            if (!v) throw new Error(`${tr.trace}: no f for key ${r.key_hex} in epoch ${cur.epoch}`);
            if (!per.has(v.partition)) per.set(v.partition, []);
            per.get(v.partition).push(r.seq);
          }
          const partitions = [...per.keys()].sort((x, y) => x - y).map((q) => ({ partition: q, seqs: per.get(q) }));
          got = { order: order.map((r) => r.seq), partitions };
          break;
        }
        case 'search': {
          const t = impl.searchTop(a.fenced, a.boundary);
          got = { low: impl.searchFloor(a.sink_floor, a.first_sent), top: t.top, read_last: t.readLast };
          break;
        }
        case 'batches':
          got = { batches: impl.batches(a.records.map((r) => ({ key: r.key_hex, keyless: !!r.keyless })), a.per_key, a.size) };
          break;
        case 'produce': case 'acked': case 'anomaly': case 'settled': case 'drop': case 'new_epoch': case 'close':
          got = stickyStep(kind, a);
          break;
        default: throw new Error(`${tr.trace} step ${i}: unknown event kind ${kind}`);
      }
      n++;
      try {
        assert.deepStrictEqual(got, st.expect);
      } catch {
        bad.push(`${hdr.rule} / ${tr.trace} step ${i} ${JSON.stringify(ev)}: got ${JSON.stringify(got)}, want ${JSON.stringify(st.expect)}`);
      }
    });
  }
  return [bad, n];
}

// Every file of the vector directory, by rule (spec/vectors/README.md). A file this replay does
// not know fails (a new rule is replayed here, its events included, or the test says so), as does
// a known one missing.
const KNOWN = [
  'ambiguous-search-floor', 'epoch-gating', 'fence-markers', 'fence-resend-order', 'keys-assigned-past-boundary',
  'lease-expiry', 'per-key-batches', 'shrink-retirement', 'sticky-ambiguity', 'sticky-permanent-failures',
];

test('every file of the vector directory is a rule this replay knows, and checks decisions', () => {
  const files = readdirSync(dir).sort();
  assert.deepEqual(files, KNOWN.map((r) => `${r}.jsonl`).sort(), `the files of ${dir} (a file not in KNOWN: replay it here first)`);
  for (const f of files) {
    const text = readFileSync(path.join(dir, f), 'utf8');
    assert.equal(JSON.parse(text.split('\n')[0]).rule, f.slice(0, -'.jsonl'.length), `${f}: the header's rule`);
    const [, n] = replay(text, core);
    assert.ok(n > 0, `${f}: no decision checked`);
  }
});

function replayAll(impl) {
  const files = readdirSync(dir).filter((f) => f.endsWith('.jsonl')).sort();
  assert.ok(files.length >= 9, `vector files in ${dir}`);
  let bad = [];
  let n = 0;
  for (const f of files) {
    const [b, k] = replay(readFileSync(path.join(dir, f), 'utf8'), impl);
    bad = bad.concat(b);
    n += k;
  }
  return [bad, n];
}

test('the consumer and producer rules match every protocol trace vector', () => {
  const [bad, n] = replayAll(core);
  assert.deepEqual(bad, []);
  assert.ok(n >= 50, `only ${n} decisions checked`);
});

test('the replay fails on wrong rules', () => {
  const mutants = {
    'gate checks only epoch x-1': { gateRecord: (t, d, x, p, f, pos) => rules.gateRecord(t, x - 2, x, p, f, pos) },
    'lease expiry without the skew bound': { mayAcquire: (me, o, end, now) => rules.mayAcquire(me, o, end, now, 0) },
    'keys assigned at the boundary': { pastBoundary: (t, q, b, pos) => pos(q) >= b },
    'a marker passed without keys revoked': { fenceMarker: (...a) => ({ ...rules.fenceMarker(...a), revoke: [] }) },
    'retired partitions never leave': { assignable: (t) => [...Array(rules.maxPartitions(t)).keys()] },
    're-sent sink by sink': { resendOrder: (seqs) => seqs.map((_, i) => i) },
    'search down to the sink floor only': { searchFloor: (floor) => floor },
    'batches without the per-key rule': { batches: (recs, perKey, size) => rules.batches(recs, false, size) },
    // The sticky machine, each with one wrong decision.
    'an anomaly ignored: the ambiguous sink goes on sending': { Sticky: class extends Sticky { _ambiguous() { return false; } settled() { return { send: [], acked: [], failed: [] }; } } },
    'records moved before their sink settled': { Sticky: class extends Sticky { _regather(a) { for (const k of this.sinks) for (const r of k.recs) r.ambiguous = false; super._regather(a); } } },
    'a record settled as stored is re-sent': { Sticky: class extends Sticky { settled(id) { return super.settled(id, []); } } },
    'one ambiguous sink holds back every partition': { Sticky: class extends Sticky { _place(r, a) { const n = a.send.length; super._place(r, a); if (this.sinks.some((k) => this._ambiguous(k))) a.send.length = n; } } },
    'close drops unsettled records silently': { Sticky: class extends Sticky { close() { const a = super.close(); return { ...a, failed: [] }; } } },
  };
  for (const [name, m] of Object.entries(mutants)) {
    const [bad] = replayAll({ ...core, ...m });
    assert.ok(bad.length > 0, `the vectors did not catch: ${name}`);
    if (m.Sticky) assert.ok(bad.some((b) => b.startsWith('sticky-ambiguity / ')), `sticky-ambiguity did not catch: ${name}`);
  }
});

test('the replay fails on sticky machines wrong about permanent failures', () => {
  const mutants = {
    'a record failed in settling is re-sent': class extends Sticky { settled(id, stored) { return super.settled(id, stored, []); } },
    'a failure in settling holds back the records after it': class extends Sticky {
      settled(id, stored, failed) { const a = super.settled(id, stored, failed); if (a.failed.length) a.send = []; return a; }
    },
    'a permanent failure wins over stored': class extends Sticky {
      settled(id, stored, failed = []) { return super.settled(id, stored.filter((s) => !failed.includes(s)), failed); }
    },
    'a drop ignored': class extends Sticky { drop() { return { send: [], acked: [], failed: [] }; } },
    'an ambiguous record dropped': class extends Sticky {
      drop(seqs) { for (const k of this.sinks) for (const r of k.recs) if (seqs.includes(r.seq)) r.ambiguous = false; return super.drop(seqs); }
    },
    'a drop reports records already acknowledged or failed': class extends Sticky { drop(seqs) { super.drop(seqs); return { send: [], acked: [], failed: [...seqs] }; } },
  };
  for (const [name, S] of Object.entries(mutants)) {
    const [bad] = replayAll({ ...core, Sticky: S });
    assert.ok(bad.some((b) => b.startsWith('sticky-permanent-failures / ')), `sticky-permanent-failures did not catch: ${name}`);
  }
});
