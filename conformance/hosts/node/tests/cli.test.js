// The vector runner's command line (conformance/hosts/README.md) over the SDK's runtime: the same
// partitions as spec/vectors, and the exit statuses of the convention.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const run = fileURLToPath(new URL('../run', import.meta.url));
const root = fileURLToPath(new URL('../../../../', import.meta.url));
const wasm = `${root}plugins/builtin/kafka-murmur2.wasm`;

const host = (args, input) => spawnSync(run, args, { input, encoding: 'utf8' });

test('run: kafka-murmur2 vectors at one n, in input order', () => {
  const { cases } = JSON.parse(readFileSync(`${root}spec/vectors/kafka-murmur2.json`, 'utf8'));
  const at = cases.filter((c) => c.n === 1000);
  assert.ok(at.length > 3);
  const r = host(['run', '--wasm', wasm, '--partitions', '1000'], at.map((c) => c.key_hex).join('\n') + '\n');
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(r.stdout.trimEnd().split('\n').map(Number), at.map((c) => c.partition));
});

test('run: usage errors and load refusals exit 2 with the class words', () => {
  let r = host(['--wasm', wasm], '');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--partitions N is required/);
  r = host(['--wasm', wasm, '--partitions', '0'], '');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /invalid partition count/);
  r = host(['--wasm', wasm, '--partitions', '3', '--config', 'a=1'], '00\n');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /plugin takes no configuration/);
  r = host(['--wasm', run, '--partitions', '3'], '00\n');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /not a WebAssembly module/);
});
