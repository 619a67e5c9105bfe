// Replays the sticky assignor's golden vectors (spec/vectors/assign/sticky.json, written by hand
// from spec/protocol.md §6.2.1) against src/rules.js, which the consumer assigns through: the
// same file Go's client and the other SDKs replay.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as rules from '../src/rules.js';
import { Partitioner } from '../src/partitioner.js';

const file = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'spec', 'vectors', 'assign', 'sticky.json');
const vectors = JSON.parse(readFileSync(file, 'utf8'));

// The vectors' functions (their "functions" field): h is the integer a sample key spells.
function linear(h, n) {
  let b = 1;
  while (b * 2 <= n) b *= 2;
  const p = h % (2 * b);
  return p >= n ? p - b : p;
}
const fns = {
  'int-mod': (h, n) => h % n,
  'int-linear': linear,
  'int-range': (h, n) => Math.floor((h * n) / 4096),
};
const builtins = new Map();
function placer(epochs) {
  const memo = new Map();
  return (e) => {
    if (!memo.has(e)) {
      const { f, n } = epochs[e];
      let out;
      if (fns[f]) out = rules.STICKY_SAMPLE.map((k) => fns[f](Number(k), n));
      else {
        if (!builtins.has(f)) builtins.set(f, Partitioner.builtin(f));
        out = rules.STICKY_SAMPLE.map((k) => builtins.get(f).partition(k, n));
      }
      memo.set(e, out);
    }
    return memo.get(e);
  };
}
function range(p) {
  if (typeof p !== 'string') return p;
  const [a, b] = p.split('..').map(Number);
  return Array.from({ length: b - a + 1 }, (_, i) => a + i);
}
const frac = (f) => (f === null ? undefined : f[0] / f[1]);

/** Replays the vectors against impl (rules.js or a mutated copy): the names of the cases it fails. */
export function replay(impl) {
  const bad = [];
  for (const c of vectors.cases) {
    let got;
    let err;
    try {
      got = impl.nextAssignment(c.prev, c.members, range(c.partitions), c.epoch, placer(c.epochs), '2026-12-01T12:00:00Z');
      impl.encodeAssignment(got, 'g');
    } catch (e) {
      err = e;
    }
    if (c.want_error) {
      if (err?.code !== c.want_error) bad.push(`${c.name}: want error ${c.want_error}, got ${err ? err.code : 'none'}`);
      continue;
    }
    if (err) {
      bad.push(`${c.name}: ${err.message}`);
      continue;
    }
    const w = c.want;
    const have = { round: got.round, owners: got.owners, moved: got.moved, moved_modulo: got.moved_modulo, history_rounds: got.history.map((h) => h.round) };
    const want = { round: w.round, owners: w.owners, moved: frac(w.moved), moved_modulo: frac(w.moved_modulo), history_rounds: w.history_rounds };
    try {
      assert.deepStrictEqual(have, want);
    } catch {
      bad.push(`${c.name}: got ${JSON.stringify(have)}, want ${JSON.stringify(want)}`);
    }
  }
  for (const c of vectors.writes) {
    const got = impl.stickyWrites({ record: c.record, members: c.members, partitions: c.partitions, epoch: c.epoch, me: c.me, complete: c.complete, previousView: c.previous_view });
    if (got !== c.want) bad.push(`writes ${c.name}: got ${got}, want ${c.want}`);
  }
  for (const c of vectors.wants) {
    const got = impl.stickyWants(c.record, c.me, c.assignable);
    if (JSON.stringify(got) !== JSON.stringify(c.want)) bad.push(`wants ${c.name}: got ${JSON.stringify(got)}, want ${JSON.stringify(c.want)}`);
  }
  return bad;
}

test('the sticky assignor matches every vector of spec/vectors/assign/sticky.json', () => {
  assert.deepEqual(replay(rules), []);
  assert.ok(vectors.cases.length >= 10 && vectors.writes.length >= 8);
});

test('the record keeps Go field names and its history summaries', () => {
  const place = placer({ 1: { f: 'int-mod', n: 4 } });
  const first = rules.nextAssignment(null, ['a', 'b'], [0, 1, 2, 3], 1, place, '2026-12-01T12:00:00Z');
  assert.deepEqual(Object.keys(JSON.parse(rules.encodeAssignment(first))), ['assignor', 'round', 'epoch', 'members', 'partitions', 'owners', 'at', 'history']);
  const second = rules.nextAssignment(first, ['a', 'b', 'c'], [0, 1, 2, 3], 1, place, '2026-12-01T12:00:01Z');
  assert.deepEqual(Object.keys(second), ['assignor', 'round', 'epoch', 'members', 'partitions', 'owners', 'moved', 'moved_modulo', 'at', 'history']);
  assert.deepEqual(second.history[1], { round: 2, epoch: 1, members: 3, partitions: 4, moved: 0.25, moved_modulo: 0.5, at: '2026-12-01T12:00:01Z' });
});

test('a wrong assignor fails the vectors', () => {
  const mutants = {
    // Step 4's member tie-break flipped: the members renamed so that they sort in reverse.
    'tie-break on the highest member index': {
      nextAssignment(prev, members, partitions, epoch, place, at) {
        const m = members.length;
        const alias = new Map(members.map((x, i) => [x, `~${String(m - 1 - i).padStart(4, '0')}`]));
        const name = (x) => alias.get(x) ?? `~~${x}`; // a member gone from the group keeps a name of its own
        const p = prev && { ...prev, members: prev.members.map(name) };
        const got = rules.nextAssignment(p, [...members].map(name).sort(), partitions, epoch, place, at);
        // Only the owners are the mutant's: moved and history as the real assignor has them.
        return { ...rules.nextAssignment(prev, members, partitions, epoch, place, at), owners: got.owners.map((o) => m - 1 - o) };
      },
    },
    'keeps nothing (modulo every time)': {
      nextAssignment(prev, members, partitions, epoch, place, at) {
        const got = rules.nextAssignment(null, members, partitions, epoch, place, at);
        return prev ? { ...rules.nextAssignment(prev, members, partitions, epoch, place, at), owners: got.owners } : got;
      },
    },
    'drops a missing member at once': { stickyWrites: (a) => rules.stickyWrites({ ...a, previousView: a.members }) },
  };
  for (const [name, m] of Object.entries(mutants)) {
    const bad = replay({ ...rules, ...m });
    assert.ok(bad.length > 0, `the mutant "${name}" passes every vector`);
    if (name.startsWith('tie-break')) assert.ok(bad.some((b) => b.startsWith('swap-mod-to-range-ties:')), `the tie-break mutant fails only ${bad}`);
  }
});
