// The consumer-group bucket (KV pctl-groups, spec/protocol.md §6) spoken directly: a JetStream KV
// bucket is the stream KV_<bucket>, one subject $KV.<bucket>.<key> per key; a value is the last
// message of its subject; compare-and-set is a publish with Nats-Expected-Last-Subject-Sequence;
// a delete is a message with KV-Operation: DEL.

import { directGet, jsPublish, JsApiError, JS } from './jsapi.js';

export const GROUPS_BUCKET = 'pctl-groups';

/** A compare-and-set lost: the key changed since the revision given (or exists, for create). */
export class CasConflict extends Error {
  constructor(key, revision) {
    super(`group state ${key} changed since revision ${revision}`);
    this.name = 'CasConflict';
    this.key = key;
  }
}

function isWrongLast(e) { return e instanceof JsApiError && e.errCode === JS.wrongLastSequence; }

/** One KV bucket. `timeout` bounds every round trip (milliseconds). */
export class KV {
  constructor(nc, bucket, timeout) {
    this.nc = nc;
    this.bucket = bucket;
    this.stream = `KV_${bucket}`;
    this.prefix = `$KV.${bucket}.`;
    this.timeout = timeout;
  }

  subject(key) { return this.prefix + key; }

  /** The key's entry {value, revision, time (unix ms), deleted}, or null if it never existed. */
  async get(key) {
    const m = await directGet(this.nc, this.stream, null, { lastBySubject: this.subject(key), timeout: this.timeout });
    if (!m) return null;
    return { value: m.data, revision: m.seq, time: Date.parse(m.time), deleted: m.deleted };
  }

  /** Writes the key unconditionally; returns its revision. */
  async put(key, value) {
    return (await jsPublish(this.nc, this.subject(key), value, undefined, this.timeout)).seq;
  }

  /** Writes the key if its revision is still `revision`; throws CasConflict if not. */
  async update(key, value, revision) {
    try {
      return (await jsPublish(this.nc, this.subject(key), value, { 'Nats-Expected-Last-Subject-Sequence': revision }, this.timeout)).seq;
    } catch (e) {
      if (isWrongLast(e)) throw new CasConflict(key, revision);
      throw e;
    }
  }

  /** Creates the key (first writer wins; a deleted key counts as absent); throws CasConflict. */
  async create(key, value) {
    try {
      return await this.update(key, value, 0);
    } catch (e) {
      if (!(e instanceof CasConflict)) throw e;
    }
    const cur = await this.get(key);
    if (cur?.deleted) return this.update(key, value, cur.revision);
    throw new CasConflict(key, 0);
  }

  /** Deletes the key (a delete marker). */
  async delete(key) {
    await jsPublish(this.nc, this.subject(key), null, { 'KV-Operation': 'DEL' }, this.timeout);
  }
}
