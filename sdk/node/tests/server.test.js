// The nats-server version the producer and the consumer need (src/server.js, spec/protocol.md
// §5.1, §6.1), offline: the comparison against 2.14 on versions as nats-server releases print
// them in INFO, and the refusal's code and message. Expected values are the release order, not
// this code: 2.11.0-RC.1 and 2.10.22 are older than 2.14, 3.0.0 newer although its minor is 0,
// 1.99.0 older although its minor is 99. The same rows as internal/natsver's TestAtLeast.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { versionAtLeast, checkServer, MIN_SERVER_VERSION } from '../src/server.js';
import { UnavailableError } from '../src/errors.js';

test('versionAtLeast: nats-server 2.14 or later', () => {
  const rows = [
    ['2.14.0', true], ['2.14.0-RC.1', true], ['v2.15.2', true], ['2.15.2', true], ['v2.14.1-beta', true],
    ['2.20.0', true], ['3.0.0', true],
    ['2.13.9', false], ['2.11.0-RC.1', false], ['2.11.4', false], ['2.10.22', false], ['2.9.25', false],
    ['1.99.0', false], ['', false], ['2', false], ['x', false], ['garbage', false], ['x.14.0', false], [undefined, false],
  ];
  for (const [v, want] of rows) assert.equal(versionAtLeast(v, 2, 14), want, `version ${v}`);
  assert.equal(versionAtLeast(MIN_SERVER_VERSION, 2, 14), true);
  assert.equal(MIN_SERVER_VERSION, '2.14.0');
});

test('checkServer: unavailable, naming the server, its version, the minimum and what to do', () => {
  for (const v of ['2.14.0', 'v2.15.2', '2.14.0-RC.1']) checkServer(v, 'nats://127.0.0.1:4222', "pctl's consumer", 'spec/protocol.md §6.1');
  for (const v of ['2.10.22', '2.11.0-RC.1', '2.13.9', '']) {
    assert.throws(() => checkServer(v, 'nats://127.0.0.1:4222', "pctl's consumer", 'spec/protocol.md §6.1'), (e) => {
      assert.ok(e instanceof UnavailableError, `${v}: ${e}`);
      assert.equal(e.code, 'unavailable');
      for (const part of ['nats://127.0.0.1:4222', JSON.stringify(v), "pctl's consumer needs nats-server 2.14.0 or later", '§6.1', 'upgrade the NATS servers']) {
        assert.ok(e.message.includes(part), `${v}: ${JSON.stringify(e.message)} does not say ${part}`);
      }
      return true;
    });
  }
});
