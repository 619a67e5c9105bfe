// A group whose recorded assignor this SDK does not implement (spec/protocol.md §6.1) is refused
// with the error of code `unsupported` (§3), as its own class (UnsupportedError), against a real
// broker (tests/broker.js): the group's g.assignor key names "round-robin" before any member
// joins (then g.created, as its creator writes it: a group without g.created is being created, and
// a member may still write its own assignor, §6.1). It is written with the official JetStream client (@nats-io/jetstream), not the SDK.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { jetstream } from '@nats-io/jetstream';
import { connect, UnsupportedError } from '../src/index.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

describe('a group with an assignor this SDK does not implement', { skip, timeout: 120_000 }, () => {
  let broker;
  let admin;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
  });

  after(async () => {
    await admin?.close();
    await broker?.stop();
  });

  test('is refused as unsupported', async () => {
    await broker.admin(['topic', 'create', 'rr', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    const { topic: desc } = await admin.topic('rr');
    assert.ok(desc.id, 'the topic has an id');
    const js = jetstream(admin.connection);
    await js.publish(`$KV.pctl-groups.${desc.id}.rr.g.assignor`, JSON.stringify({ assignor: 'round-robin' }));
    await js.publish(`$KV.pctl-groups.${desc.id}.rr.g.created`, 'now');
    const c = await admin.consumer('rr', { group: 'rr', member: 'a' });
    await assert.rejects(c.start(), (e) => {
      assert.ok(e instanceof UnsupportedError, `${e?.name}: ${e?.message}`);
      assert.equal(e.code, 'unsupported');
      assert.match(e.message, /round-robin.*another group/);
      return true;
    });
    await c.close();
  });
});
