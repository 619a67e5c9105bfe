// Canonical config bytes (spec/abi-v1.md §2.5), checked against the rules of Go's
// partitioner.EncodeConfig.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeConfig, ConfigError } from '../../src/runtime/config.js';

const enc = (pairs) => Buffer.from(encodeConfig(pairs)).toString('utf8');

test('no pairs is the empty config', () => {
  assert.equal(encodeConfig([]).length, 0);
});

test('pairs become sorted K=V lines', () => {
  assert.equal(enc(['a=1']), 'a=1\n');
  assert.equal(enc(['b=2', 'a=1', 'B=0', '_=x', '-=y', '.=z', '0=9']), '-=y\n.=z\n0=9\nB=0\n_=x\na=1\nb=2\n');
  assert.equal(enc(['k=']), 'k=\n', 'empty value');
  assert.equal(enc(['k=a=b']), 'k=a=b\n', 'split at the first =');
  assert.equal(enc(['seed=ü€😀']), 'seed=ü€😀\n');
  assert.deepEqual([...encodeConfig(['x=é'])], [...Buffer.from('x=é\n', 'utf8')], 'UTF-8 bytes');
});

test('bytewise order, not locale order', () => {
  assert.equal(enc(['a=1', 'Z=2', 'aa=3', 'a.b=4']), 'Z=2\na=1\na.b=4\naa=3\n');
});

test('malformed pairs are refused like EncodeConfig', () => {
  const bad = [
    [['novalue'], /has no '='/],
    [['=v'], /must match/],
    [['a b=1'], /must match/],
    [['ü=1'], /must match/],
    [['a=1\n2'], /without newlines/],
    [['a=\ud800'], /UTF-8/],
    [['a=1', 'a=2'], /given twice/],
  ];
  for (const [pairs, re] of bad) {
    assert.throws(() => encodeConfig(pairs), (e) => e instanceof ConfigError && re.test(e.message) && e.message.startsWith('bad partitioner config'), JSON.stringify(pairs));
  }
});
