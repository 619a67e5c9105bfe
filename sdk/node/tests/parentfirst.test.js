// Parent-first order (spec/protocol.md §6.7): the same hand-written topic as the Go client's
// TestParentFirstOrder (client/parentfirst_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as rules from '../src/rules.js';

const topic = {
  epochs: [
    { epoch: 1, partitions: 2, boundaries: [10, 20] },
    { epoch: 2, partitions: 4, boundaries: [30, 40, 5, 0] },
    { epoch: 3, partitions: 4 },
  ],
};

test('readEpoch: the epoch of the record a partition reads next', () => {
  for (const [q, pos, want] of [[0, 0, 1], [0, 9, 1], [0, 10, 2], [0, 11, 2], [0, 30, 3], [0, 99, 3],
    [1, 19, 1], [1, 20, 2], [1, 40, 3], [2, 0, 2], [2, 5, 3], [3, 0, 3]]) {
    assert.equal(rules.readEpoch(topic, q, pos), want, `partition ${q} at ${pos}`);
  }
});

test('parentFirst: oldest epoch first, each group ascending', () => {
  const pos = { 0: 3, 1: 25, 2: 0, 3: 0 };
  assert.deepEqual(rules.parentFirst(topic, [3, 2, 1, 0], (q) => pos[q]), [[0], [1, 2], [3]]);
});
