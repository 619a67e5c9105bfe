// The consumer-group bucket (KV pctl-groups, spec/protocol.md §6) spoken directly: a JetStream KV
// bucket is the stream KV_<bucket>, one subject $KV.<bucket>.<key> per key; a value is the last
// message of its subject; compare-and-set is a publish with Nats-Expected-Last-Subject-Sequence;
// a delete is a message with KV-Operation: DEL.

import { createInbox } from '@nats-io/transport-node';
import { directGet, jsPublish, jsRequest, JsApiError, JS } from './jsapi.js';
import { headersOf, ackInfo } from './headers.js';
import { UnavailableError } from './errors.js';

const encoder = new TextEncoder();
let watchSerial = 0;

export const GROUPS_BUCKET = 'pctl-groups';

/** A compare-and-set lost: the key changed since the revision given (or exists, for create). */
export class CasConflict extends Error {
  constructor(key, revision) {
    super(`group state ${key} changed since revision ${revision}`);
    this.name = 'CasConflict';
    this.key = key;
  }
}

function isWrongLast(e) {
  return e instanceof JsApiError && (e.errCode === JS.wrongLastSequence || e.errCode === JS.wrongLastSequenceConstant);
}

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

  /**
   * Writes the key only if `guard` (another key) has no message before this write in the stream's
   * order (Nats-Expected-Last-Subject-Sequence-Subject, nats-server 2.11+): true when stored, false
   * when refused with "wrong last sequence" (the guard exists, or a write of it is in flight).
   * Other failures throw. The leader checks it, and every replica again when it applies the write.
   */
  async putIfAbsent(key, value, guard) {
    try {
      await jsPublish(this.nc, this.subject(key), value, {
        'Nats-Expected-Last-Subject-Sequence': 0,
        'Nats-Expected-Last-Subject-Sequence-Subject': this.subject(guard),
      }, this.timeout);
      return true;
    } catch (e) {
      if (isWrongLast(e)) return false;
      throw e;
    }
  }

  /** Deletes the key (a delete marker). */
  async delete(key) {
    await jsPublish(this.nc, this.subject(key), null, { 'KV-Operation': 'DEL' }, this.timeout);
  }

  /**
   * The initial values of a watch of `pattern` (a key pattern, `*` and `>` allowed): the latest
   * entry of every matching key, deleted and purged keys left out, as a Map key -> {value,
   * revision}. They come from one server's state: an ephemeral consumer (deliver last per subject)
   * reads them from the one server that holds it, up to its pending count 0 (spec/protocol.md
   * §6.1, "Reading the group's keys at join"). Throws PctlError (unavailable, permission).
   */
  async initialValues(pattern) {
    const filter = this.subject(pattern);
    const name = `pctl_kvw_${process.pid}_${Date.now().toString(36)}_${++watchSerial}`;
    const config = {
      name, ack_policy: 'none', deliver_policy: 'last_per_subject', filter_subject: filter,
      mem_storage: true, num_replicas: 1, inactive_threshold: 5e9, max_waiting: 4,
    };
    const r = await jsRequest(this.nc, `$JS.API.CONSUMER.CREATE.${this.stream}.${name}.${filter}`, { stream_name: this.stream, config, action: 'create' }, this.timeout);
    const vals = new Map();
    if ((r.num_pending ?? 0) === 0) {
      this.dropConsumer(name);
      return vals;
    }
    const nameBytes = encoder.encode(name);
    const inbox = createInbox(this.nc.options?.inboxPrefix);
    let sub;
    try {
      await new Promise((resolve, reject) => {
        let timer = null;
        const done = (e) => {
          clearTimeout(timer);
          if (e) reject(e);
          else resolve();
        };
        const pull = () => {
          try {
            this.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${name}`, encoder.encode(JSON.stringify({ batch: 256, expires: Math.max(this.timeout - 100, 100) * 1e6 })), { reply: inbox });
          } catch (e) {
            done(new UnavailableError(`watch ${filter}: ${e?.message ?? e}`, { cause: e }));
          }
        };
        timer = setTimeout(() => done(new UnavailableError(`the initial values of ${filter} did not arrive within ${this.timeout}ms`)), this.timeout);
        sub = this.nc.subscribe(inbox, {
          callback: (err, msg) => {
            if (err) return done(new UnavailableError(`watch ${filter}: ${err.message}`, { cause: err }));
            const h = headersOf(msg);
            const code = h?.code ?? 0;
            if (code === 100) return; // a heartbeat
            if (code > 0) {
              // 408/409: the pull ended without the last initial value (a pull of 256 filled up,
              // or it expired): ask again; the timer bounds the whole read.
              if (code === 404 || code === 408 || code === 409) return pull();
              return done(new UnavailableError(`watch ${filter}: status ${code} ${h.description ?? ''}`));
            }
            const a = ackInfo(msg, nameBytes);
            if (!a) return;
            const op = h?.get('KV-Operation');
            const key = msg.subject.slice(this.prefix.length);
            if (op === 'DEL' || op === 'PURGE') vals.delete(key);
            else vals.set(key, { value: msg.data, revision: a.seq });
            if (a.pending === 0) done();
          },
        });
        pull();
      });
    } finally {
      try {
        sub?.unsubscribe();
      } catch {
        // the connection is closed
      }
      this.dropConsumer(name);
    }
    return vals;
  }

  dropConsumer(name) {
    jsRequest(this.nc, `$JS.API.CONSUMER.DELETE.${this.stream}.${name}`, undefined, 2000).catch(() => {});
  }
}
