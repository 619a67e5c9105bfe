// Asynchronous JetStream publishing on one reply subscription, the way nats.go's PublishAsync
// works: every publish carries a reply subject `<inbox>.<token>`, the stream's acknowledgement
// (a JSON PubAck) comes back there, and one timer sweeps the publishes whose acknowledgement is
// late. @nats-io/jetstream's js.publish() is a request per record (a timer, a promise and two
// Error objects each): a third of the producer's CPU time. The wire format is JetStream's:
//   ack:          {"stream": "...", "seq": N, "duplicate": true?}
//   stream error: {"error": {"code": 400, "err_code": 10054, "description": "..."}}
//   no stream bound to the subject: a status message 503 with an empty body (no responders).

import { createInbox } from '@nats-io/transport-node';

const decoder = new TextDecoder();

/** No stream took the publish (no responders): the subject's epoch was fenced, or no stream. */
export class NoStreamError extends Error {
  constructor(subject) {
    super(`no stream answers ${subject} (no responders)`);
    this.name = 'NoStreamError';
    this.subject = subject;
  }
}

/** The acknowledgement did not come in time: the record may or may not be stored (ambiguous). */
export class AckTimeoutError extends Error {
  constructor(subject, ms) {
    super(`no acknowledgement for a publish to ${subject} within ${ms}ms`);
    this.name = 'AckTimeoutError';
    this.subject = subject;
  }
}

/** The stream refused the message: `code` is JetStream's err_code (10054: message too large). */
export class StreamError extends Error {
  constructor(subject, e) {
    super(`${subject}: ${e.description ?? 'stream error'} (JetStream error ${e.err_code ?? e.code})`);
    this.name = 'StreamError';
    this.code = e.err_code;
    this.status = e.code;
  }
}

/**
 * Publishes to JetStream with many acknowledgements outstanding. `publish(subject, data, headers,
 * onDone)` calls `onDone(err, ack)` exactly once: ack = {stream, seq, duplicate} or err one of
 * the classes above (or what nc.publish threw, synchronously reported through onDone too).
 */
export class AckPublisher {
  constructor(nc, timeoutMs) {
    this.nc = nc;
    this.timeoutMs = timeoutMs;
    this.prefix = `${createInbox(nc.options?.inboxPrefix)}.`;
    this.pending = new Map(); // token -> {subject, deadline, onDone}; insertion order = deadline order
    this.next = 0;
    this.timer = null;
    this.sub = nc.subscribe(`${this.prefix}*`, { callback: (err, msg) => { if (!err) this.onReply(msg); } });
  }

  publish(subject, data, headers, onDone) {
    const token = (this.next++).toString(36);
    const entry = { subject, deadline: Date.now() + this.timeoutMs, onDone };
    try {
      this.nc.publish(subject, data, { reply: this.prefix + token, headers });
    } catch (e) {
      onDone(e);
      return;
    }
    this.pending.set(token, entry);
    if (this.timer === null) this.timer = setInterval(() => this.sweep(), Math.min(100, this.timeoutMs));
  }

  onReply(msg) {
    const token = msg.subject.slice(this.prefix.length);
    const entry = this.pending.get(token);
    if (!entry) return; // timed out already
    this.pending.delete(token);
    if (msg.data.length === 0 && msg.headers?.code === 503) return entry.onDone(new NoStreamError(entry.subject));
    let ack;
    try {
      ack = JSON.parse(decoder.decode(msg.data));
    } catch (e) {
      return entry.onDone(new Error(`bad acknowledgement for ${entry.subject}: ${e.message}`));
    }
    if (ack.error) return entry.onDone(new StreamError(entry.subject, ack.error));
    if (typeof ack.seq !== 'number') return entry.onDone(new Error(`bad acknowledgement for ${entry.subject}: ${decoder.decode(msg.data).slice(0, 200)}`));
    entry.onDone(null, { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate === true });
  }

  sweep() {
    const now = Date.now();
    for (const [token, entry] of this.pending) {
      if (entry.deadline > now) break;
      this.pending.delete(token);
      entry.onDone(new AckTimeoutError(entry.subject, this.timeoutMs));
    }
    if (this.pending.size === 0) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  /** Fails every outstanding publish at once with err (the connection is going away). */
  abort(err) {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const e of all) e.onDone(err);
  }

  close() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.sub.unsubscribe();
  }
}
