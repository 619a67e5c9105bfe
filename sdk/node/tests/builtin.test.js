// The built-in partitioners embedded in the package (builtin/, copies of plugins/builtin that
// plugins/sdk_copies_test.go keeps identical): Partitioner.builtin(name) works with no file, and
// gives what Kafka's Java client gives (spec/vectors/kafka-murmur2.json) and what the other
// built-ins' vectors say.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Partitioner, builtinNames, BadRequestError } from '../src/index.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const hex = (h) => new Uint8Array(Buffer.from(h, 'hex'));

test('builtinNames: the modules of plugins/builtin', () => {
  const want = readdirSync(`${root}plugins/builtin`).filter((f) => f.endsWith('.wasm')).map((f) => f.slice(0, -5)).sort();
  assert.deepEqual(builtinNames(), want);
});

test('Partitioner.builtin: each built-in against its spec/vectors file', () => {
  for (const name of builtinNames()) {
    const p = Partitioner.builtin(name);
    assert.equal(p.name, name);
    const file = `${root}spec/vectors/${name}.json`;
    let vectors;
    try { vectors = JSON.parse(readFileSync(file, 'utf8')); } catch { continue; }
    for (const c of vectors.cases) {
      assert.equal(p.partition(hex(c.key_hex), c.n), c.partition, `${name}: key ${c.key_hex} n=${c.n}: keys remap for existing users (source: ${vectors.source})`);
    }
  }
});

test('Partitioner.builtin: an unknown name is a BadRequestError naming the built-ins', () => {
  assert.throws(() => Partitioner.builtin('kafka'), (e) => e instanceof BadRequestError && /kafka-murmur2/.test(e.message));
  assert.throws(() => Partitioner.builtin('../package'), BadRequestError);
});
