// The rewriting must produce exactly the Go host's bytes (runtime/internal/wasmbin), so that V8
// charges the same fuel at the same points as wazero (spec/abi-v1.md §7.2): every module of the
// corpus, rewritten with the hosts' default limits, must hash to what
// runtime/internal/wasmbin/testdata/instrumented.txt records from Go (or be refused with the
// same class).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { instrument, WasmbinError } from '../../src/runtime/wasmbin.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
const ABI = ['pctl_abi_version', 'pctl_key_buffer', 'pctl_partition', 'pctl_configure', 'pctl_metadata', 'pctl_partition_batch', 'pctl_ancestry'];
const limits = {
  initialFuel: 1n << 33n,
  maxDepth: 1000,
  exportFuel: new Map([['_initialize', 1n << 33n], ...ABI.map((n) => [n, 1n << 31n])]),
  maxMemoryPages: 512,
  maxTableElements: 131072,
  moveStart: true,
};

test('the rewritten corpus is byte-identical to the Go host\'s (instrumented.txt)', () => {
  const golden = readFileSync(path.join(root, 'runtime/internal/wasmbin/testdata/instrumented.txt'), 'utf8');
  const lines = golden.split('\n').filter((l) => l && !l.startsWith('#'));
  assert.ok(lines.length > 40, 'the corpus is listed');
  const wrong = [];
  for (const line of lines) {
    const [want, file] = line.split(' ');
    let got;
    try {
      const { bytes } = instrument(new Uint8Array(readFileSync(path.join(root, file))), limits);
      got = createHash('sha256').update(bytes).digest('hex');
    } catch (e) {
      if (!(e instanceof WasmbinError)) throw e;
      got = e.kind === 'unsupported' ? 'unsupported' : 'malformed';
    }
    if (got !== want) wrong.push(`${file}: ${got}, Go: ${want}`);
  }
  assert.deepEqual(wrong, []);
});
