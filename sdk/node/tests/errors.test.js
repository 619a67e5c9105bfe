// Error mapping: every spec/protocol.md §3 code has its PctlError subclass, and the role hints of
// permission errors match the Go client's (broker/wire RoleHint).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  CODES, PctlError, errorFromCode, BadRequestError, NotFoundError, ExistsError, ConflictError, InUseError,
  PluginRejectedError, PluginError, FencedError, ChangeInProgressError, PermissionError, UnavailableError,
  OutOfSequenceError, UnsupportedError, InternalError,
} from '../src/index.js';
import { permissionError, roleFor } from '../src/errors.js';

// The codes as spec/protocol.md §3 lists them: the backquoted words between "Codes:" and
// "Clients map", read from the spec itself so that a code added there fails this test until
// the SDK has it.
function specCodes() {
  const spec = readFileSync(new URL('../../../spec/protocol.md', import.meta.url), 'utf8');
  const m = spec.match(/\nCodes: ([\s\S]*?)Clients map codes/);
  assert.ok(m, 'spec/protocol.md §3 has no "Codes: ... Clients map codes" sentence any more: update this test');
  return [...m[1].replace(/\([^)]*\)/g, '').matchAll(/`([a-z_]+)`/g)].map((x) => x[1]);
}

// Each §3 code and the class it decodes to.
const CLASS_OF = {
  bad_request: BadRequestError, not_found: NotFoundError, exists: ExistsError, conflict: ConflictError,
  in_use: InUseError, plugin_rejected: PluginRejectedError, plugin_failed: PluginError, fenced: FencedError,
  change_in_progress: ChangeInProgressError, permission: PermissionError, unavailable: UnavailableError,
  out_of_sequence: OutOfSequenceError, unsupported: UnsupportedError, internal: InternalError,
};

test('every spec/protocol.md §3 code maps to its class and back', () => {
  const spec = specCodes();
  assert.equal(spec.length, 14, `spec/protocol.md §3 lists ${spec.length} codes: ${spec}`);
  assert.deepEqual(CODES, spec);
  assert.deepEqual(Object.keys(CLASS_OF).sort(), [...spec].sort());
  for (const code of spec) {
    const C = CLASS_OF[code];
    const e = errorFromCode(code, 'm');
    assert.equal(e.constructor, C, `code ${code} decodes to ${e.constructor.name}, want ${C.name}`);
    assert.equal(e.code, code);
    assert.equal(new C('m').code, code, `${C.name} has code ${new C('m').code}, want ${code}`);
  }
});

test('every code maps to a PctlError with that code', () => {
  for (const code of CODES) {
    const e = errorFromCode(code, 'm', { remote: true, detail: { x: 1 } });
    assert.ok(e instanceof PctlError && e instanceof Error, code);
    assert.equal(e.code, code);
    assert.equal(e.message, 'm');
    assert.equal(e.remote, true);
    assert.deepEqual(e.detail, { x: 1 });
  }
  assert.ok(errorFromCode('not_found', 'm') instanceof NotFoundError);
  assert.ok(errorFromCode('bad_request', 'm') instanceof BadRequestError);
  assert.ok(errorFromCode('plugin_failed', 'm') instanceof PluginError);
  assert.ok(errorFromCode('unavailable', 'm') instanceof UnavailableError);
  const odd = errorFromCode('no_such_code', 'm');
  assert.equal(odd.code, 'internal');
  assert.match(odd.message, /unknown error code "no_such_code"/);
});

test('permission errors name the subject and the role it needs', () => {
  const e = permissionError('pctl.data.orders.3.1');
  assert.ok(e instanceof PermissionError);
  assert.equal(e.code, 'permission');
  assert.equal(e.subject, 'pctl.data.orders.3.1');
  assert.equal(e.role, 'producer');
  assert.match(e.message, /may not publish to pctl\.data\.orders\.3\.1: producing needs the producer or admin role \(producer\.nk\)/);
  assert.equal(roleFor('pctl.produce.orders')[0], 'producer');
  assert.equal(roleFor('pctl.admin.topic.create')[0], 'admin');
  assert.equal(roleFor('$KV.pctl-groups.x')[0], 'consumer');
  assert.equal(roleFor('$JS.API.CONSUMER.CREATE.X')[0], 'consumer');
  assert.equal(roleFor('other')[0], '');
});
