// The consumer group's decisions (spec/protocol.md §6.2 to §6.5) as pure functions of the
// descriptor, the group's positions, the leases and a time passed in: no I/O, no clock, no
// partitioner (a key's partition in an epoch is a function argument). consumer.js decides through
// them, and tests/protocol.test.js replays spec/vectors/protocol/*.jsonl against them, the same
// traces the Go core (internal/proto) and the other SDKs replay.

import { BadRequestError } from './errors.js';

/** Epoch number e of descriptor t, or null. */
export function epochOf(t, e) {
  const i = e - t.epochs[0].epoch;
  return i >= 0 && i < t.epochs.length ? t.epochs[i] : null;
}

/** Whether an epoch has ended: a boundary for each of its partitions. */
export function ended(ep) { return !!ep && Array.isArray(ep.boundaries) && ep.boundaries.length === ep.partitions; }

/**
 * The epoch of the record partition stream q holds after position pos: the oldest epoch in which
 * q exists whose boundary in q is past pos (the newest epoch once q is past them all). For the
 * parent-first order of spec/protocol.md §6.7 (a SHOULD): a hint, the gate decides.
 */
export function readEpoch(t, q, pos) {
  for (const ep of t.epochs) {
    if (q >= ep.partitions) continue;
    if (!ended(ep) || pos < ep.boundaries[q]) return ep.epoch;
  }
  return t.epochs[t.epochs.length - 1].epoch;
}

/** Partitions qs grouped by readEpoch, oldest epoch first, each group ascending (§6.7). */
export function parentFirst(t, qs, pos) {
  const by = new Map();
  for (const q of qs) {
    const e = readEpoch(t, q, pos(q));
    if (!by.has(e)) by.set(e, []);
    by.get(e).push(q);
  }
  return [...by.keys()].sort((a, b) => a - b).map((e) => by.get(e).sort((a, b) => a - b));
}

/** The number of partition streams the topic has ever had. */
export function maxPartitions(t) {
  let m = 0;
  for (const e of t.epochs) m = Math.max(m, e.partitions);
  if (t.change?.partitions > m) m = t.change.partitions;
  return m;
}

/** Partition q's boundary in the last ended epoch that had it (0 if none). */
export function finalBoundary(t, q) {
  let last = 0;
  for (const e of t.epochs.slice(0, -1)) if (q < (e.boundaries?.length ?? 0)) last = e.boundaries[q];
  return last;
}

/** The partitions the group must read (§6.2): the current epoch's, and those shrunk away below their final boundary. pos(q) is the group's position. */
export function assignable(t, pos) {
  const cur = t.epochs[t.epochs.length - 1];
  const out = [];
  for (let q = 0; q < maxPartitions(t); q++) {
    if (q < cur.partitions || pos(q) < finalBoundary(t, q)) out.push(q);
  }
  return out;
}

/** Partition q was shrunk away and is drained to its final boundary (no one reads it again). */
export function retired(t, q, pos) {
  return q >= t.epochs[t.epochs.length - 1].partitions && pos(q) >= finalBoundary(t, q);
}

/** The newest ended epoch through which every epoch's every partition is at its boundary, searching after `from` (a cached answer). */
export function drainedThrough(t, from, pos) {
  let d = Math.max(from, t.epochs[0].epoch - 1);
  for (let e = d + 1; ; e++) {
    const ep = epochOf(t, e);
    if (!ended(ep)) return d;
    for (let q = 0; q < ep.partitions; q++) if (pos(q) < ep.boundaries[q]) return d;
    d = e;
  }
}

/**
 * The gate of a keyed record of epoch x read from partition p (§6.5, §6.7): {refresh} when the
 * descriptor does not show epoch x-1 ended and epoch x; else {waits: [{epoch, partition,
 * boundary}] (unmet, newest epoch first), parent (the key's partition in x-1, -1 in the first
 * epoch), assigned (keys assigned's condition when parent != p, else null)}. f(ep) is the key's
 * partition in ep, or null when that partitioner is not loaded (then gateRecord returns null).
 */
export function gateRecord(t, drained, x, p, f, pos) {
  const out = { refresh: false, waits: [], parent: -1, assigned: null };
  if (x <= t.epochs[0].epoch) return out;
  const prev = epochOf(t, x - 1);
  if (!ended(prev) || !epochOf(t, x)) return { ...out, refresh: true };
  for (let e = x - 1; e >= t.epochs[0].epoch; e--) {
    if (e <= drained && e !== x - 1) break;
    const ep = epochOf(t, e);
    const q = f(ep);
    if (q === null || q === undefined) return null;
    if (e === x - 1) out.parent = q;
    if (e <= drained || q === p) continue;
    if (pos(q) < ep.boundaries[q]) out.waits.push({ epoch: e, partition: q, boundary: ep.boundaries[q] });
  }
  if (out.parent !== p) out.assigned = { epoch: x - 1, partition: out.parent, boundary: prev.boundaries[out.parent] };
  return out;
}

/** Keys assigned may go on (§6.5): q's position is past b, or at b while q is retired and no live lease holds it. */
export function pastBoundary(t, q, b, pos, leased) {
  const at = pos(q);
  if (at !== b) return at > b;
  return !leased && retired(t, q, pos);
}

/** The clock-skew bound of leases (§6.3): min(1 s, session / 6), whole milliseconds. */
export function maxClockSkew(sessionMs) { return Math.floor(Math.min(1000, sessionMs / 6)); }

/** A lease (owner, leaseEnd by its holder's clock) is live to another member at now (its clock): an owner and now < leaseEnd + skew. */
export function leaseLive(owner, leaseEnd, now, skew) { return !!owner && now < (leaseEnd ?? 0) + skew; }

/** Member me may take a partition whose key shows this lease (§6.3). */
export function mayAcquire(me, owner, leaseEnd, now, skew) { return !owner || owner === me || !leaseLive(owner, leaseEnd, now, skew); }

/** The holder of a lease ending at leaseUntil (its clock) may deliver at now: more than a quarter of the session is left. */
export function mayDeliver(leaseUntil, now, sessionMs) { return leaseUntil - now > sessionMs / 4; }

/** The ended epochs (with a successor) whose boundary in q is at or below pos and whose keys-revoked step has not run (done(e)), oldest first. */
export function revokes(t, q, pos, done) {
  const out = [];
  for (let i = 0; i + 1 < t.epochs.length; i++) {
    const e = t.epochs[i];
    if (q >= (e.boundaries?.length ?? 0) || pos < e.boundaries[q] || done(e.epoch)) continue;
    out.push(e.epoch);
  }
  return out;
}

/** The epochs whose boundary in q is below start: an owner that acquires q at start counts their keys-revoked steps as run. */
export function passed(t, q, start) {
  const out = [];
  for (const e of t.epochs) if (q < (e.boundaries?.length ?? 0) && e.boundaries[q] < start) out.push(e.epoch);
  return out;
}

/** A fence marker `Pctl-Fence: fence` must wait for a descriptor showing epoch fence-1 ended and epoch fence. */
export function markerNeedsDescriptor(t, fence) {
  return fence > 1 && !(ended(epochOf(t, fence - 1)) && epochOf(t, fence));
}

/** The decision for a fence marker at seq of q (§6.4): {refresh}, or keys revoked to run first, the new position, commit at once. */
export function fenceMarker(t, q, seq, fence, done) {
  if (markerNeedsDescriptor(t, fence)) return { refresh: true, revoke: [], position: 0, commit: false };
  const ran = new Set();
  const revoke = [];
  for (const at of [seq - 1, seq]) {
    for (const e of revokes(t, q, at, (x) => ran.has(x) || done(x))) {
      ran.add(e);
      revoke.push(e);
    }
  }
  return { refresh: false, revoke, position: seq, commit: true };
}

// ---- the producer's decisions (spec/protocol.md §5.1.2) ----

/** The order (indices into seqs) in which a fenced epoch's unacknowledged records are re-sent: their original send order. */
export function resendOrder(seqs) {
  return seqs.map((_, i) => i).sort((a, b) => seqs[a] - seqs[b] || a - b);
}

/** A search reads down to (exclusive) the sink's floor, or the lowest floor a record was first sent to this stream above. */
export function searchFloor(sinkFloor, firstSent) {
  let low = sinkFloor;
  for (const f of firstSent) if (f < low) low = f;
  return low;
}

/** Where a search starts: the epoch's boundary of a fenced partition (if > 0), else the stream's last sequence (readLast). */
export function searchTop(fenced, boundary) {
  return fenced && boundary > 0 ? { top: boundary, readLast: false } : { top: 0, readLast: true };
}

/** The per-key rule: a record may join the open batch unless the rule holds, it is keyed and its key is in the batch. */
export function admits(perKey, keyless, inBatch) { return !perKey || keyless || !inBatch; }

/** How a queue of records ({key, keyless}) is cut into batches by the per-key rule and the batch size: each batch's indices. */
export function batches(recs, perKey, size) {
  const out = [];
  let cur = [];
  let keys = new Set();
  recs.forEach((r, i) => {
    if (cur.length >= size || !admits(perKey, r.keyless, keys.has(r.key))) {
      out.push(cur);
      cur = [];
      keys = new Set();
    }
    cur.push(i);
    if (!r.keyless) keys.add(r.key);
  });
  if (cur.length) out.push(cur);
  return out;
}

// ---- the sticky assignor (spec/protocol.md §6.2.1, §6.2.2) ----
//
// Pure: the partitioners are a function argument, place(epoch) -> the partitions (an array of
// 4096 integers) of the key sample STICKY_SAMPLE under that epoch of the topic. Records are the
// plain objects of g.assignment, with Go's field names (client/assign.go, broker/wire).

/** The sticky assignor's key sample (§6.2.1 step 1): the ASCII decimal digits of 0..4095. */
export const STICKY_SAMPLE = Object.freeze(Array.from({ length: 4096 }, (_, i) => String(i)));

/** How many records' summaries a record's history keeps (§6.2.1). */
export const ASSIGNMENT_HISTORY = 16;

/** The largest record pctl's clients write (bytes of JSON): under the bucket's 64 KiB (§8.5) with room for its overhead. */
export const MAX_ASSIGNMENT_RECORD = 60 << 10;

/** The modulo assignor as a record (§6.2): the i-th partition to member i mod m. */
export function moduloAssignment(members, partitions, epoch) {
  return { assignor: 'modulo', epoch, members, partitions, owners: partitions.map((_, j) => j % members.length) };
}

function ownerMap(a) {
  const own = new Map();
  a.partitions.forEach((q, j) => {
    const o = a.owners?.[j];
    if (Number.isInteger(o) && o >= 0 && o < a.members.length) own.set(q, a.members[o]);
  });
  return own;
}

/** §6.2.2: the fraction of the sample whose owner differs between two records (keys either leaves out do not count). */
export function movedKeys(from, to, place) {
  const pf = place(from.epoch);
  const pt = place(to.epoch);
  const of = ownerMap(from);
  const ot = ownerMap(to);
  let moved = 0;
  let total = 0;
  for (let k = 0; k < STICKY_SAMPLE.length; k++) {
    const a = of.get(pf[k]);
    const b = ot.get(pt[k]);
    if (a === undefined || b === undefined) continue;
    total++;
    if (a !== b) moved++;
  }
  return total === 0 ? 0 : moved / total;
}

function sortedStrings(a) { for (let i = 1; i < a.length; i++) if (a[i - 1] >= a[i]) return false; return true; }
function sortedInts(a) { for (let i = 1; i < a.length; i++) if (a[i - 1] >= a[i]) return false; return true; }

/**
 * The sticky assignor's next record (§6.2.1) from the previous one (null for the first), the
 * sorted live members, the sorted assignable partitions and the current epoch; at is the RFC 3339
 * time it records. Throws BadRequestError for no member or unsorted input.
 */
export function nextAssignment(prev, members, partitions, epoch, place, at) {
  const m = members.length;
  const n = partitions.length;
  if (m === 0) throw new BadRequestError('an assignment needs at least one member');
  if (!sortedStrings(members) || !sortedInts(partitions)) throw new BadRequestError('members and partitions must be sorted, without duplicates');
  const next = { assignor: 'sticky', round: 1, epoch, members: [...members], partitions: [...partitions], owners: new Array(n).fill(0) };
  const index = new Map(members.map((x, i) => [x, i]));
  const slot = new Map(partitions.map((q, j) => [q, j]));
  const cands = []; // {j, x, num, den}: w(partitions[j], members[x]) = num/den > 0
  if (prev) {
    next.round = prev.round + 1;
    const prevOwner = new Map(); // partition -> index in members, live members only
    for (const [q, who] of ownerMap(prev)) if (index.has(who)) prevOwner.set(q, index.get(who));
    const direct = (j) => { if (prevOwner.has(partitions[j])) cands.push({ j, x: prevOwner.get(partitions[j]), num: 1, den: 1 }); };
    if (prev.epoch === epoch) {
      for (let j = 0; j < n; j++) direct(j);
    } else {
      const oldP = place(prev.epoch);
      const newP = place(epoch);
      const den = new Array(n).fill(0);
      const num = new Map(); // j * m + x -> count
      for (let k = 0; k < STICKY_SAMPLE.length; k++) {
        const j = slot.get(newP[k]);
        if (j === undefined) continue;
        den[j]++;
        const x = prevOwner.get(oldP[k]);
        if (x !== undefined) num.set(j * m + x, (num.get(j * m + x) ?? 0) + 1);
      }
      for (const [jx, c] of num) cands.push({ j: Math.floor(jx / m), x: jx % m, num: c, den: den[Math.floor(jx / m)] });
      for (let j = 0; j < n; j++) if (den[j] === 0) direct(j);
    }
  }
  // Weights compared exactly: a/b > c/d iff a*d > c*b (both products stay below 2^24).
  cands.sort((a, b) => (b.num * a.den - a.num * b.den) || (a.j - b.j) || (a.x - b.x));
  const base = Math.floor(n / m);
  const extra = n % m;
  const count = new Array(m).fill(0);
  let big = 0;
  const mayTake = (x) => count[x] < base || (count[x] === base && big < extra);
  const done = new Array(n).fill(false);
  const give = (j, x) => {
    next.owners[j] = x;
    done[j] = true;
    if (++count[x] === base + 1) big++;
  };
  for (const c of cands) if (!done[c.j] && mayTake(c.x)) give(c.j, c.x);
  for (let j = 0; j < n; j++) {
    if (done[j]) continue;
    let best = -1;
    for (let x = 0; x < m; x++) if (mayTake(x) && (best < 0 || count[x] < count[best])) best = x;
    give(j, best);
  }
  if (prev) {
    next.moved = movedKeys(prev, next, place);
    next.moved_modulo = movedKeys(moduloAssignment(prev.members, prev.partitions, prev.epoch), moduloAssignment(next.members, next.partitions, next.epoch), place);
  }
  if (at) next.at = at;
  const summary = { round: next.round, epoch, members: m, partitions: n };
  if (prev) Object.assign(summary, { moved: next.moved, moved_modulo: next.moved_modulo });
  if (at) summary.at = at;
  next.history = [...(prev?.history ?? []), summary].slice(-ASSIGNMENT_HISTORY);
  return next;
}

/** A record's JSON, or BadRequestError when it exceeds MAX_ASSIGNMENT_RECORD (§6.2.1: the group cannot use sticky on this topic). */
export function encodeAssignment(rec, group = '') {
  const body = JSON.stringify(rec);
  const size = Buffer.byteLength(body);
  if (size > MAX_ASSIGNMENT_RECORD) {
    throw new BadRequestError(`group ${group}: the sticky assignment of ${rec.partitions.length} partitions over ${rec.members.length} members takes ${size} bytes, more than the group bucket holds (${MAX_ASSIGNMENT_RECORD}): use the modulo assignor for this topic`);
  }
  return body;
}

function sameList(a, b) { return a.length === b.length && a.every((v, i) => v === b[i]); }

/** Whether a record no longer matches the group (§6.2.1, "Who writes"): none, or other members, partitions or epoch. */
export function needsAssignment(rec, members, partitions, epoch) {
  return !rec || rec.epoch !== epoch || !sameList(rec.members, members) || !sameList(rec.partitions, partitions);
}

/**
 * Whether this member writes the next record (§6.2.1): it is the leader (first of the sorted live
 * members), its view is complete (every member key read), the record no longer matches, and a
 * member the record has and the view lacks was missed by the previous rebalance's view too.
 */
export function stickyWrites({ record, members, partitions, epoch, me, complete, previousView }) {
  if (!complete || members.length === 0 || members[0] !== me || !needsAssignment(record, members, partitions, epoch)) return false;
  if (!record) return true;
  if ((record.epoch ?? 0) > epoch) return false; // a record newer than this view (one view per rebalance)
  const live = new Set(members);
  const drops = record.members.some((x) => !live.has(x));
  return !drops || (!!previousView && sameList(previousView, members));
}

/** The partitions a record gives member me among the assignable ones, sorted (none without a record). */
export function stickyWants(rec, me, assignable) {
  if (!rec) return [];
  const ok = new Set(assignable);
  const out = [];
  for (const [q, who] of ownerMap(rec)) if (who === me && ok.has(q)) out.push(q);
  return out.sort((a, b) => a - b);
}
