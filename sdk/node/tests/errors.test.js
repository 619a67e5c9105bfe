// Error mapping: every spec/protocol.md §3 code has its PctlError subclass, and the role hints of
// permission errors match the Go client's (broker/wire RoleHint).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CODES, PctlError, errorFromCode, BadRequestError, NotFoundError, PluginError, PermissionError, UnavailableError,
} from '../src/index.js';
import { permissionError, roleFor } from '../src/errors.js';

test('every code maps to a PctlError with that code', () => {
  assert.deepEqual(CODES, ['bad_request', 'not_found', 'exists', 'conflict', 'in_use', 'plugin_rejected', 'plugin_failed',
    'fenced', 'change_in_progress', 'permission', 'unavailable', 'internal']);
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
