// Errors of the pctl SDK. Every error the SDK raises on purpose is a PctlError whose `code` is one
// of the wire codes of spec/protocol.md §3, so callers branch on `err.code` (or `instanceof` a
// subclass) whether the error came from the broker, from NATS or from the SDK itself.

/** The codes of spec/protocol.md §3. */
export const CODES = Object.freeze([
  'bad_request', 'not_found', 'exists', 'conflict', 'in_use', 'plugin_rejected', 'plugin_failed',
  'fenced', 'change_in_progress', 'permission', 'unavailable', 'out_of_sequence', 'unsupported',
  'internal',
]);

/**
 * Base class. `code` is a protocol.md §3 code; `detail` is the broker's optional JSON detail (for
 * plugin_rejected: the conformance report); `remote` is true when the broker answered with it.
 */
export class PctlError extends Error {
  constructor(code, message, { cause, detail, remote = false } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'PctlError';
    this.code = code;
    if (detail !== undefined) this.detail = detail;
    this.remote = remote;
  }
}

/** bad_request: the request (or record) is malformed and retrying will not help. */
export class BadRequestError extends PctlError {
  constructor(message, opts) { super('bad_request', message, opts); this.name = 'BadRequestError'; }
}

/** not_found: unknown topic, plugin or group. */
export class NotFoundError extends PctlError {
  constructor(message, opts) { super('not_found', message, opts); this.name = 'NotFoundError'; }
}

/** exists: the thing to create exists already. */
export class ExistsError extends PctlError {
  constructor(message, opts) { super('exists', message, opts); this.name = 'ExistsError'; }
}

/** conflict: a concurrent change won (compare-and-set lost), or the topic is being created/deleted. */
export class ConflictError extends PctlError {
  constructor(message, opts) { super('conflict', message, opts); this.name = 'ConflictError'; }
}

/** in_use: a plugin still used by a topic. */
export class InUseError extends PctlError {
  constructor(message, opts) { super('in_use', message, opts); this.name = 'InUseError'; }
}

/** plugin_rejected: the broker's conformance run refused an uploaded module (detail: the report). */
export class PluginRejectedError extends PctlError {
  constructor(message, opts) { super('plugin_rejected', message, opts); this.name = 'PluginRejectedError'; }
}

/**
 * plugin_failed: a partitioner module could not be loaded or failed a call. `plugin` is its
 * metadata name, `digest` its SHA-256 (hex), `failure` the failure class phrase of
 * conformance/hosts/README.md ("plugin trapped", "time limit exceeded", ...), and the message names
 * them all. The record that needed the partition is not produced.
 */
export class PluginError extends PctlError {
  constructor(message, { plugin = '', digest = '', failure = '', ...opts } = {}) {
    super('plugin_failed', message, opts);
    this.name = 'PluginError';
    this.plugin = plugin;
    this.digest = digest;
    this.failure = failure;
  }
}

/** fenced: the epoch a record was produced under has ended (the producer handles this itself). */
export class FencedError extends PctlError {
  constructor(message, opts) { super('fenced', message, opts); this.name = 'FencedError'; }
}

/** change_in_progress: another epoch change is under way. */
export class ChangeInProgressError extends PctlError {
  constructor(message, opts) { super('change_in_progress', message, opts); this.name = 'ChangeInProgressError'; }
}

/**
 * permission: the credentials' role may not do this. `subject` is the NATS subject refused (when
 * known) and `role` the role it needs ("producer", "consumer", "admin").
 */
export class PermissionError extends PctlError {
  constructor(message, { subject = '', role = '', ...opts } = {}) {
    super('permission', message, opts);
    this.name = 'PermissionError';
    this.subject = subject;
    this.role = role;
  }
}

/** unavailable: the broker (or a stream) did not answer, or the topic is being created. */
export class UnavailableError extends PctlError {
  constructor(message, opts) { super('unavailable', message, opts); this.name = 'UnavailableError'; }
}

/**
 * unavailable, for one record: JetStream kept refusing its message id as "duplicate message id is
 * in process" (API error 10158, spec/protocol.md §5.1.5), so the producer stopped re-sending it.
 * Its fate is unknown (it may be stored): read the partition before producing it again. `msgId`
 * is the record's Nats-Msg-Id, `partition` the partition that refused it, `answers` how many 10158
 * answers it got (0 when it came from the produce service, whose reply does not say). Its code is
 * `unavailable`, so it is also an UnavailableError; it crosses the wire, from the produce service,
 * as `unavailable` with the detail `in_process: true` (spec/protocol.md §3), which errorFromCode
 * maps back to this class. A thin client does not re-send such a record under the same identity
 * (§5.2 step 5).
 */
export class MsgIdInProcessError extends UnavailableError {
  constructor(message, { msgId = '', partition = -1, answers = 0, ...opts } = {}) {
    super(message, opts);
    this.name = 'MsgIdInProcessError';
    this.msgId = msgId;
    this.partition = partition;
    this.answers = answers;
  }
}

/**
 * out_of_sequence: the produce service refused a request because one before it (same producer)
 * never arrived, or because it does not know the producer on its own subject (spec/protocol.md
 * §5.2): re-send every unacknowledged record in order.
 */
export class OutOfSequenceError extends PctlError {
  constructor(message, opts) { super('out_of_sequence', message, opts); this.name = 'OutOfSequenceError'; }
}

/**
 * unsupported: the request or the group needs something this implementation lacks, for example a
 * consumer group whose assignor it does not implement (spec/protocol.md §6.1).
 */
export class UnsupportedError extends PctlError {
  constructor(message, opts) { super('unsupported', message, opts); this.name = 'UnsupportedError'; }
}

/** internal: a bug or an unexpected reply. */
export class InternalError extends PctlError {
  constructor(message, opts) { super('internal', message, opts); this.name = 'InternalError'; }
}

const BY_CODE = {
  bad_request: BadRequestError,
  not_found: NotFoundError,
  exists: ExistsError,
  conflict: ConflictError,
  in_use: InUseError,
  plugin_rejected: PluginRejectedError,
  plugin_failed: PluginError,
  fenced: FencedError,
  change_in_progress: ChangeInProgressError,
  permission: PermissionError,
  unavailable: UnavailableError,
  out_of_sequence: OutOfSequenceError,
  unsupported: UnsupportedError,
  internal: InternalError,
};

/**
 * The PctlError of a wire code (an unknown code becomes `internal`, keeping the message). An
 * `unavailable` error whose detail has `in_process: true` (spec/protocol.md §3: a record whose
 * Nats-Msg-Id is stuck, §5.1.5) becomes a MsgIdInProcessError carrying the detail's `msg_id` and
 * `partition` (its `answers` is 0: the wire does not say): a thin client MUST NOT re-send such a
 * record under the same identity (§5.2 step 5), and the message says to read the partition first.
 * This holds for an error reply and for a batched request's per-record `error` object alike.
 */
export function errorFromCode(code, message, opts = {}) {
  const d = opts.detail;
  if (code === 'unavailable' && d && typeof d === 'object' && d.in_process === true) {
    const partition = Number.isInteger(d.partition) ? d.partition : -1;
    const msgId = typeof d.msg_id === 'string' ? d.msg_id : '';
    return new MsgIdInProcessError(
      `${message} (not to be re-sent under the same identity, spec/protocol.md §5.2: the stream refuses its id ${msgId} for its duplicate window, 2 minutes; the record's fate is unknown: read partition ${partition} of epoch ${d.epoch} before producing it again, as a new record)`,
      { ...opts, msgId, partition },
    );
  }
  const C = BY_CODE[code];
  if (!C) return new InternalError(`${message} (unknown error code ${JSON.stringify(code)})`, opts);
  return new C(message, opts);
}

/**
 * Whether an error is the broker's answer for a topic whose creation has not finished:
 * `unavailable` with the detail `{"creating": true, "topic": T}` (spec/protocol.md §3). Clients
 * that wait for a new topic decide by the detail, never by the message's words.
 */
export function isTopicCreating(e) {
  return e?.code === 'unavailable' && e.detail !== null && typeof e.detail === 'object' && e.detail.creating === true;
}

/**
 * The role a refused subject needs, and a hint that says what to do, like the Go client's
 * wire.RoleHint (spec/protocol.md §8).
 */
export function roleFor(subject) {
  if (subject.startsWith('pctl.admin')) return ['admin', 'this needs the admin role (connect with the broker\'s admin.nk)'];
  if (subject.startsWith('pctl.data') || subject.startsWith('pctl.produce')) {
    return ['producer', 'producing needs the producer or admin role (producer.nk)'];
  }
  if (subject.startsWith('$KV.pctl-groups') || subject.startsWith('$JS.API.CONSUMER')) {
    return ['consumer', 'consuming needs the consumer or admin role (consumer.nk)'];
  }
  return ['', 'check the role of the credentials you connect with'];
}

/** The PermissionError for a subject the server refused to let this connection publish to. */
export function permissionError(subject, cause) {
  const [role, hint] = roleFor(subject);
  return new PermissionError(`permission denied: these credentials may not publish to ${subject}: ${hint}`, { subject, role, cause });
}
