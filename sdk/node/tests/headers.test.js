// The consumer's fast header and acknowledgement-subject parsing (src/headers.js) against nats.js's
// own parser (MsgHdrsImpl.decode) and a plain split of the subject: same values, same status.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RawHeaders, ackInfo } from '../src/headers.js';
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';

const blocks = [
  'NATS/1.0\r\nPctl-Key: b64:a2V5\r\nPctl-Producer: p1\r\nPctl-Seq: 17\r\nNats-Msg-Id: p1-17\r\n\r\n',
  'NATS/1.0\r\nPctl-Fence: 2\r\nNats-Msg-Id: pctl-fence-x-2-0\r\n\r\n',
  'NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\nNats-Last-Stream: 9\r\n\r\n',
  'NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 12\r\nNats-Pending-Bytes: 0\r\n\r\n',
  'NATS/1.0 409 Consumer Deleted\r\n\r\n',
  'NATS/1.0 503\r\n\r\n',
  'NATS/1.0\r\nk: x\r\nk: y\r\nk:\r\ntrace.id:   é ü\r\nx_multi-Value: 1\r\n\r\n',
];

test('RawHeaders reads what nats.js parses (code, description, values by exact name)', () => {
  const enc = new TextEncoder();
  for (const b of blocks) {
    const ours = new RawHeaders(b);
    const theirs = MsgHdrsImpl.decode(enc.encode(b));
    assert.equal(ours.code, theirs.code, b);
    assert.equal(ours.description, theirs.description, b);
    assert.deepEqual(ours.keys(), theirs.keys(), b);
    for (const k of theirs.keys()) {
      assert.deepEqual(ours.values(k), theirs.values(k), `${b}: ${k}`);
      assert.equal(ours.get(k), theirs.get(k));
      assert.ok(ours.has(k));
    }
    assert.equal(ours.get('Absent'), '');
    assert.equal(ours.has('absent'), false);
  }
});

test('ackInfo reads both JetStream acknowledgement subject forms from bytes', () => {
  const enc = new TextEncoder();
  const name = enc.encode('pctl_abc_1_2');
  const v1 = '$JS.ACK.PCTL_t_0.pctl_abc_1_2.1.4217.4216.1796112345678901234.55';
  const v2 = '$JS.ACK._.ACCHASH.PCTL_t_0.pctl_abc_1_2.1.4217.4216.1796112345678901234.55.tok';
  for (const reply of [v1, v2]) {
    const viaBytes = ackInfo({ _msg: { reply: enc.encode(reply) } }, name);
    const viaString = ackInfo({ reply }, name);
    const want = { seq: 4217, cseq: 4216, tsMs: 1796112345678, tsRest: 901234, pending: 55 };
    assert.deepEqual(viaBytes, want, reply);
    assert.deepEqual(viaString, want, reply);
    assert.equal(ackInfo({ _msg: { reply: enc.encode(reply) } }, enc.encode('pctl_abc_1_3')), false, 'another consumer');
  }
  assert.equal(ackInfo({ _msg: { reply: enc.encode('_INBOX.x.1') } }, name), null);
});
