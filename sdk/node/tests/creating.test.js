// A topic whose creation has not finished is answered `unavailable` with the detail
// `{"creating": true, "topic": T}` (spec/protocol.md §3), and the SDK waits for such a topic by
// that detail, never by the message's words. The unfinished creation is a real descriptor with
// `creating` set, written into the topics bucket with the official JetStream client, as a broker
// that died half way leaves it; the real broker (tests/broker.js) finishes it with its retry loop
// (every 2 s), and a producer started meanwhile waits, then produces. Mutant shown failing: the
// producer's fetch not waiting on isTopicCreating (the producer fails with unavailable).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { jetstream } from '@nats-io/jetstream';
import { connect, UnavailableError } from '../src/index.js';
import { isTopicCreating } from '../src/errors.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const enc = new TextEncoder();
const dec = new TextDecoder();

describe('a topic being created', { skip, timeout: 120_000 }, () => {
  let broker;
  let admin;
  let producer;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    producer = await connect({ server: broker.url, creds: broker.creds.producer });
    await broker.admin(['topic', 'create', 'done', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
  });

  after(async () => {
    await producer?.close();
    await admin?.close();
    await broker?.stop();
  });

  test('is unavailable with the creating detail, and a producer waits for it', async () => {
    const m = await admin.connection.request('pctl.api.topic.get', enc.encode(JSON.stringify({ topic: 'done' })), { timeout: 5000 });
    const done = JSON.parse(dec.decode(m.data)).topic;
    const js = jetstream(admin.connection);
    // The broker's retry loop may finish a creation between the write and the read: try again
    // under another name then.
    let name;
    for (let i = 0; i < 5 && !name; i++) {
      const n = `half${i}`;
      await js.publish(`$KV.pctl-topics.${n}`, JSON.stringify({ ...done, name: n, id: `${done.id}h${i}`, creating: true }));
      try {
        await admin.topic(n);
      } catch (e) {
        assert.ok(e instanceof UnavailableError, `topic.get of a topic being created: ${e}`);
        assert.deepEqual(e.detail, { creating: true, topic: n }, 'the creating detail of spec/protocol.md §3');
        assert.ok(isTopicCreating(e));
        name = n;
      }
    }
    assert.ok(name, 'the topic was never seen being created');
    // Not by the words: an unavailable error that only says so is not a topic being created.
    assert.equal(isTopicCreating(new UnavailableError(`topic ${name} is being created; retry in a moment`)), false);
    const p = await producer.producer(name, { id: 'node-creating' });
    const r = await p.send({ key: 'k', value: 'v' });
    await p.close();
    assert.equal(r.epoch, 1);
  });
});
