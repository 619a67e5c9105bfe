// Compacted topics (spec/protocol.md §10): the key token of a record subject, tombstone headers,
// backfilled copies' origins and the descriptor facts a consumer needs (the backfill running,
// retired epochs, where the current epoch starts in a stream). Pure functions.

import { createHash } from 'node:crypto';

/** The longest key encoded directly in a key token (§10.1); longer keys go by their SHA-256. */
export const MAX_DIRECT_KEY_TOKEN = 128;

/**
 * A compacted topic's subject token for a key (Uint8Array/Buffer): "k" + base64url without
 * padding of a key of at most 128 bytes, else "h" + base64url of its SHA-256 (§10.1).
 */
export function keyToken(key) {
  const b = Buffer.from(key.buffer, key.byteOffset, key.length);
  if (b.length <= MAX_DIRECT_KEY_TOKEN) return `k${b.toString('base64url')}`;
  return `h${createHash('sha256').update(b).digest('base64url')}`;
}

/**
 * Whether a topic's record subjects carry key tokens (spec/protocol.md §10.1): a compacted topic,
 * or a plain topic with backfill. Every subject decision asks this, never `compact` alone (Go:
 * wire.Topic.KeySubjects).
 */
export function keySubjects(desc) {
  return !!(desc?.compact || desc?.backfill);
}

/** The subject of a record of (topic, epoch, partition): with the key's token on a topic with key subjects. */
export function recordSubject(topic, epoch, partition, compact, key) {
  const s = `pctl.data.${topic}.${epoch}.${partition}`;
  return compact ? `${s}.${keyToken(key)}` : s;
}

/**
 * Where a fast batch's EOB goes (§10.1): the partition subject, or on a compacted topic (whose
 * streams take only six-token subjects) that subject with the token "end", which no key token
 * or fence marker's token is.
 */
export function batchEndSubject(topic, epoch, partition, compact) {
  const s = `pctl.data.${topic}.${epoch}.${partition}`;
  return compact ? `${s}.end` : s;
}

/** The Nats-TTL of a compacted topic's tombstone (§10.2): the delete retention in seconds, at least 1. */
export function tombstoneTTL(compact) {
  return String(Math.max(Math.floor((compact?.delete_retention_ms ?? 0) / 1000), 1));
}

/**
 * Parses a Pctl-Backfill value "<epoch>/<partition>/<seq>" (§10.3): {epoch, partition, seq}
 * (seq a Number), or null when it is not one (epoch > 0, partition >= 0, decimal integers).
 */
export function parseOrigin(v) {
  if (typeof v !== 'string') return null;
  const m = /^([0-9]+)\/([0-9]+)\/([0-9]+)$/.exec(v);
  if (!m) return null;
  const [e, q, s] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (!Number.isSafeInteger(e) || !Number.isSafeInteger(q) || !Number.isSafeInteger(s) || e < 1) return null;
  return { epoch: e, partition: q, seq: s };
}

/** The epoch whose backfill runs (its descriptor epoch object), or null (§10.3). */
export function backfilling(t) {
  for (const e of t.epochs) if (e.backfill?.state === 'running') return e;
  return null;
}

/**
 * Whether epoch e's records are retired or being retired (§10.7): a backfilled copy of one of
 * them is then delivered (§10.4).
 */
export function originRetired(t, e) {
  if (t.retiring && e <= t.retiring.through) return true;
  if (t.epochs.length > 0 && e < t.epochs[0].epoch) return true;
  const ep = t.epochs.find((x) => x.epoch === e);
  return !!ep?.retired;
}

/**
 * The position at which a group that reads the current epoch alone starts in stream q (§10.5):
 * the sequence of the last fence marker q has (max boundary + 1 over the ended epochs), 0 if none.
 */
export function currentEpochStart(t, q) {
  let pos = 0;
  for (const e of t.epochs) {
    const b = e.boundaries;
    if (Array.isArray(b) && q < b.length && b[q] + 1 > pos) pos = b[q] + 1;
  }
  return pos;
}

/**
 * A batch read back on a compacted topic (§10.1): a record not found counts as stored when a
 * later record of the same key in the batch was found (storing that one removed it). keys[i] is
 * record i's key as a string (null: keyless); found maps indices from `from` on to sequences and
 * gets the superseded ones (at sequence 0).
 */
export function supersededInBatch(keys, from, found) {
  const later = new Set();
  for (let i = keys.length - 1; i >= from; i--) {
    const k = keys[i];
    if (found.has(i)) {
      if (k !== null) later.add(k);
      continue;
    }
    if (k !== null && later.has(k)) found.set(i, 0);
  }
}
