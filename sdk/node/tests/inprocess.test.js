// The rule for JetStream 10158, "duplicate message id is in process" (spec/protocol.md §5.1.5):
// a sender counts, per message id, its 10158 answers; at 4 the id is stuck; other answers in
// between (a wrong last sequence, no answer) do not start the count again. The expected decisions
// are written out by hand from the spec's text, not computed with the rule. A stuck record fails
// with MsgIdInProcessError, an UnavailableError (code `unavailable`) whose message says what to do.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcess, IN_PROCESS_LIMIT, inProcessError } from '../src/inprocess.js';
import { MsgIdInProcessError, UnavailableError, PctlError, errorFromCode } from '../src/index.js';

const inProc = 10158;
const wrongLast = 10071;
const none = 0;
const F = false;
const T = true;

const cases = [
  ['four in a row', [inProc, inProc, inProc, inProc], [F, F, F, T]],
  ['by turns with a wrong last sequence', [inProc, wrongLast, inProc, wrongLast, inProc, wrongLast, inProc], [F, F, F, F, F, F, T]],
  ['with no answer between', [inProc, none, inProc, none, inProc, inProc], [F, F, F, F, F, T]],
  ['three, then other answers', [inProc, inProc, inProc, wrongLast, none], [F, F, F, F, F]],
  ['stays stuck', [inProc, inProc, inProc, inProc, inProc, wrongLast], [F, F, F, T, T, T]],
  ['other answers never count', [wrongLast, none, 10211, 10054, wrongLast], [F, F, F, F, F]],
];

test('an id is stuck at its fourth 10158 answer, whatever came between (spec §5.1.5)', () => {
  assert.equal(IN_PROCESS_LIMIT, 4);
  for (const [name, answers, stuck] of cases) {
    const c = new InProcess();
    const got = answers.map((code) => c.note(code));
    assert.deepEqual(got, stuck, name);
    assert.equal(c.stuck, stuck[stuck.length - 1], `${name}: stuck`);
  }
});

test('a renewed id starts a count of its own (the rule counts per message id)', () => {
  const c = new InProcess();
  for (let i = 0; i < 3; i++) c.note(inProc);
  c.renewed();
  assert.equal(c.count, 0);
  assert.deepEqual([inProc, inProc, inProc, inProc].map((code) => c.note(code)), [F, F, F, T]);
});

test('a record failed by the rule is unavailable, typed, and says what to do', () => {
  const e = inProcessError(7, 'p-7-abc', 2, 4);
  assert.ok(e instanceof MsgIdInProcessError && e instanceof UnavailableError && e instanceof PctlError);
  assert.equal(e.code, 'unavailable');
  assert.equal(e.name, 'MsgIdInProcessError');
  assert.equal(e.msgId, 'p-7-abc');
  assert.equal(e.partition, 2);
  assert.equal(e.answers, 4);
  for (const want of ['10158', 'record 7', 'p-7-abc', 'refused 4 times by partition 2', 'fate is unknown', 'read partition 2']) {
    assert.ok(e.message.includes(want), `${e.message} does not say ${want}`);
  }
  // Across the wire (the produce service) the code is unavailable: it maps back to an UnavailableError.
  assert.ok(errorFromCode(e.code, e.message, { remote: true }) instanceof UnavailableError);
});
