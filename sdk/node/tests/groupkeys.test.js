// A member takes its group's g.start and g.assignor only from a state that holds g.created
// (spec/protocol.md §6.1, "Reading the group's keys at join"), against a real broker
// (tests/broker.js): while only g.start and g.assignor exist (a creator between its writes, or a
// replica that lags behind them) the read goes on; once g.created exists it returns both; a
// deleted key reads as absent; with no keys at all it gives up with unavailable. The keys are
// written with the official JetStream client (@nats-io/jetstream), not the SDK. The same three
// cases as the Go client's TestReadGroupKeysWaitsForTheMarker. The cluster failure this guards
// against (a lagging follower answering "not found" for a g.start that exists) needs a lagging
// replica at the right moment; the rule that prevents it is what is checked here.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { connect } from '../src/index.js';
import { KV, GROUPS_BUCKET } from '../src/kv.js';
import { readGroupKeys } from '../src/consumer.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const dec = new TextDecoder();

describe("reading the group's keys at join", { skip, timeout: 120_000 }, () => {
  let broker;
  let admin;
  let js;
  let kv;
  const tid = 'T1';
  const start = JSON.stringify({ from: 'current-epoch', epoch: 3 });
  const assignor = JSON.stringify({ assignor: 'sticky' });
  const put = (key, v) => js.publish(`$KV.${GROUPS_BUCKET}.${key}`, v);
  const del = (key) => {
    const h = headers();
    h.set('KV-Operation', 'DEL');
    return js.publish(`$KV.${GROUPS_BUCKET}.${key}`, '', { headers: h });
  };

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    js = jetstream(admin.connection);
    kv = new KV(admin.connection, GROUPS_BUCKET, 5000);
  });

  after(async () => {
    await admin?.close();
    await broker?.stop();
  });

  test('waits for g.created, then returns g.start and g.assignor', async () => {
    // A first read of a complete group (not timed): the connection and the code paths warm.
    await put(`${tid}.g0.g.created`, 'now');
    await readGroupKeys(kv, tid, 'g0', 30_000);
    await put(`${tid}.g1.g.start`, start);
    await put(`${tid}.g1.g.assignor`, assignor);
    let settled = null;
    let putCreated = false;
    let afterPut = null;
    const p = readGroupKeys(kv, tid, 'g1', 30_000).then((v) => { settled = { v }; afterPut = putCreated; return v; }, (e) => { settled = { e }; throw e; });
    await new Promise((r) => setTimeout(r, 300)); // several reads, each without g.created
    assert.equal(settled, null, `returned ${JSON.stringify(settled)} while g.created did not exist`);
    putCreated = true;
    await put(`${tid}.g1.g.created`, 'now');
    const gk = await p;
    assert.equal(afterPut, true, 'the read returned before g.created was written');
    assert.equal(gk.start && dec.decode(gk.start.value), start);
    assert.equal(gk.assignor && dec.decode(gk.assignor.value), assignor);
  });

  test('a deleted g.assignor and no g.start read as absent', async () => {
    await put(`${tid}.g2.g.assignor`, assignor);
    await del(`${tid}.g2.g.assignor`);
    await put(`${tid}.g2.g.created`, 'now');
    const gk = await readGroupKeys(kv, tid, 'g2', 30_000);
    assert.equal(gk.start, null);
    assert.equal(gk.assignor, null);
  });

  test('gives up with unavailable when g.created never shows', async () => {
    await assert.rejects(readGroupKeys(kv, tid, 'g3', 500), (e) => {
      assert.equal(e?.code, 'unavailable', `${e?.name}: ${e?.message}`);
      return true;
    });
  });
});
