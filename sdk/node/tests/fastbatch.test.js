// The fast-batch wire format (src/fastbatch.js, spec/protocol.md §5.1.1), offline: reply
// subjects, the server's replies as nats-server 2.15 writes them, record tokens against
// vectors computed independently with Python's hashlib (the same as client/fastbatch_test.go's),
// and the stored-record check refusing every look-alike.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { replySubject, parseReplySubject, parseReply, KIND, recordToken, newToken, sameRecord } from '../src/fastbatch.js';
import { RawHeaders } from '../src/headers.js';

const enc = new TextEncoder();
const msg = (body, code) => ({ data: enc.encode(body), headers: code ? { code } : undefined });

test('reply subjects: <inbox>.<batch>.<flow>.fail.<seq>.<op>.$FI, parsed back', () => {
  const s = replySubject('_INBOX_UABC.xyz', '0123abcd', 256, 17, 1);
  assert.equal(s, '_INBOX_UABC.xyz.0123abcd.256.fail.17.1.$FI');
  assert.deepEqual(parseReplySubject('_INBOX_UABC.xyz', s), { batch: '0123abcd', seq: 17, op: 1 });
  for (const bad of ['_INBOX_UABC.xyzz.0123abcd.256.fail.17.1.$FI', '_INBOX_UABC.xyz.0123abcd.256.ok.17.1.$FI',
    '_INBOX_UABC.xyz.0123abcd.256.fail.17.1', '_INBOX_UABC.xyz.0123abcd.fail.17.1.$FI', '_INBOX_UABC.xyz.b.256.fail.x.1.$FI']) {
    assert.equal(parseReplySubject('_INBOX_UABC.xyz', bad), null, bad);
  }
});

test('server replies: flow ack, gap, error, PubAck, duplicate, refusal, no responders, garbage', () => {
  const cases = [
    ['{"type":"ack","seq":256,"msgs":256}', undefined, { kind: KIND.flowAck, ackSeq: 256 }],
    ['{"type":"gap","last_seq":5,"seq":7}', undefined, { kind: KIND.gap, gapExpected: 5, gapGot: 7 }],
    ['{"type":"err","seq":3,"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}', undefined, { kind: KIND.flowErr, errCode: 10054, gapGot: 3 }],
    ['{"stream":"PCTL_t_0","seq":1024,"batch":"b1","count":1024}', undefined, { kind: KIND.pubAck, stream: 'PCTL_t_0', streamSeq: 1024, ackBatch: 'b1', count: 1024, duplicate: false }],
    ['{"stream":"PCTL_t_0","seq":9,"batch":"b1","count":1,"duplicate":true}', undefined, { kind: KIND.pubAck, streamSeq: 9, duplicate: true }],
    ['{"error":{"code":400,"err_code":10208,"description":"batch publish unknown batch"},"stream":"PCTL_t_0","seq":0}', undefined, { kind: KIND.refusal, errCode: 10208 }],
    ['', 503, { kind: KIND.noResponders }],
    ['{"type":"what"}', undefined, { kind: KIND.garbage }],
    ['not json', undefined, { kind: KIND.garbage }],
    ['{}', undefined, { kind: KIND.garbage }],
  ];
  for (const [body, code, want] of cases) {
    const r = parseReply(msg(body, code), 'b1', 3, 1);
    for (const [k, v] of Object.entries(want)) assert.equal(r[k], v, `${body}: ${k}`);
  }
});

test('record tokens: content tokens match independent vectors; random tokens are 32 hex digits', () => {
  assert.equal(recordToken(enc.encode('alice'), enc.encode('v1')), '59359d5a354d7ce89a22137b6ee2cafa');
  assert.equal(recordToken(new Uint8Array(0), new Uint8Array(0)), 'c217003a22d014711908da001aa75cbb');
  assert.equal(recordToken(null, new Uint8Array(0)), 'f629b1a44f92f94b00c943fcffdfb307');
  assert.equal(recordToken(new Uint8Array([0, 0xff]), enc.encode('hello world')), 'e979e3cda73cd2ba8b5c0d37802e8a7c');
  const seen = new Set();
  for (let i = 0; i < 1000; i++) {
    const t = newToken();
    assert.match(t, /^[0-9a-f]{32}$/);
    seen.add(t);
  }
  assert.equal(seen.size, 1000);
});

test('sameRecord: only the very record counts; each differing header or byte is refused', () => {
  const pd = { producer: 'p1', seqText: '7', msgId: 'p1-7-00112233445566778899aabbccddeeff', keyHdr: 'b64:YQ==', value: enc.encode('v') };
  const stored = (lines, data = 'v') => ({ headers: new RawHeaders(`NATS/1.0\r\n${lines.join('\r\n')}\r\n\r\n`), data: enc.encode(data) });
  const good = ['Pctl-Key: b64:YQ==', 'Pctl-Producer: p1', 'Pctl-Seq: 7', `Nats-Msg-Id: ${pd.msgId}`];
  assert.equal(sameRecord(stored(good), pd), true);
  const wrong = [
    [['Pctl-Key: b64:Yg==', ...good.slice(1)], 'v', 'another key'],
    [good.slice(1), 'v', 'no key'],
    [[...good, 'Pctl-Key: b64:YQ=='], 'v', 'two keys'],
    [[good[0], 'Pctl-Producer: p2', ...good.slice(2)], 'v', 'another producer'],
    [[good[0], good[1], 'Pctl-Seq: 8', good[3]], 'v', 'another sequence'],
    [[...good.slice(0, 3), 'Nats-Msg-Id: p1-7-ffffffffffffffffffffffffffffffff'], 'v', 'another token'],
    [good, 'w', 'another value'],
    [[...good, 'Pctl-Fence: 2'], 'v', 'a fence marker'],
  ];
  for (const [lines, data, why] of wrong) assert.equal(sameRecord(stored(lines, data), pd), false, why);
  assert.equal(sameRecord(stored(good.slice(1)), { ...pd, keyHdr: null }), true, 'keyless: no Pctl-Key at all');
});
