// Classifies the errors of the NATS client (@nats-io/transport-node): they arrive wrapped
// (RequestError around NoRespondersError, JetStreamNotEnabled around that...), so each test walks
// the cause chain.

import { errors as natsErrors } from '@nats-io/transport-node';

/** Walks an error's cause chain for an instance of C. */
export function causeOf(err, C) {
  for (let e = err, i = 0; e && i < 8; e = e.cause, i++) if (e instanceof C) return e;
  return null;
}

/** The PermissionViolationError behind an error, if any. */
export function violationOf(err) { return causeOf(err, natsErrors.PermissionViolationError); }
/** Whether an error means "no responders" (nothing subscribed to the subject). */
export function isNoResponders(err) {
  return !!causeOf(err, natsErrors.NoRespondersError) || !!(causeOf(err, natsErrors.RequestError)?.isNoResponders?.());
}
/** Whether an error is a timeout waiting for a reply. */
export function isTimeout(err) { return !!causeOf(err, natsErrors.TimeoutError); }

