// A record whose Nats-Msg-Id is stuck "in process" (spec/protocol.md §5.1.5) is answered by the
// produce service with code `unavailable` and the detail {"in_process": true, "partition",
// "epoch", "msg_id"} (§3), as an error reply or as a record's `error` in a batched reply (§5.2).
// A thin client MUST NOT re-send it under the same identity and fails it with its in-process
// error (§5.2 step 5): here the SDK's request path (client.requestMsg, what a thin client written
// on the SDK sends produce requests with) and errorFromCode (what decodes a batched result's
// error) must give a MsgIdInProcessError. The replies come from a peer implementation of the
// produce service's wire on a real broker's NATS: a responder on the produce subject of a broker
// id of its own (pctl.produce.<topic>.<B>, which only broker B serves) sending the spec's reply
// bytes, written here by hand. Mutant shown failing: errorFromCode ignoring the detail (an
// UnavailableError, which a thin client retries).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { headers } from '@nats-io/transport-node';
import { connect, MsgIdInProcessError, UnavailableError, errorFromCode } from '../src/index.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

const enc = new TextEncoder();
const detail = { in_process: true, partition: 2, epoch: 1, msg_id: 'p-7-00112233445566778899aabbccddeeff' };
const errorObj = {
  code: 'unavailable',
  message: "record 7 (id p-7-00112233445566778899aabbccddeeff) refused 4 times by partition 2 as 'in process' (10158)",
  detail,
};

function checkStuck(e, what) {
  assert.ok(e instanceof MsgIdInProcessError, `${what}: ${e?.constructor?.name} ${e?.message}: want MsgIdInProcessError (§5.2 step 5)`);
  assert.ok(e instanceof UnavailableError, `${what}: not an UnavailableError`);
  assert.equal(e.code, 'unavailable');
  assert.equal(e.partition, 2);
  assert.equal(e.msgId, detail.msg_id);
  assert.deepEqual(e.detail, detail);
  assert.match(e.message, /read partition 2/);
  assert.match(e.message, /before producing it again/);
}

describe('a stuck record from the produce service', { skip, timeout: 180_000 }, () => {
  let broker;
  let peer;
  let prod;

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    peer = await connect({ server: broker.url, creds: broker.creds.admin });
    prod = await connect({ server: broker.url, creds: broker.creds.producer });
    // Broker PEER1's produce subject for topic t: a single request's error reply (§3), and a
    // batched request's results with record 2 of 3 stuck (§5.2).
    const sub = peer.nc.subscribe('pctl.produce.t.PEER1');
    (async () => {
      for await (const m of sub) {
        const h = headers();
        h.set('Pctl-Broker', 'PEER1');
        let body;
        if (m.headers?.get('Pctl-Batch')) {
          body = {
            results: [
              { partition: 2, epoch: 1, seq: 5, duplicate: false },
              { error: errorObj },
              { partition: 2, epoch: 1, seq: 6, duplicate: false },
            ],
            broker: 'PEER1',
          };
        } else {
          h.set('Pctl-Error', 'unavailable');
          body = errorObj;
        }
        m.respond(enc.encode(JSON.stringify(body)), { headers: h });
      }
    })();
    await peer.nc.flush();
  });

  after(async () => {
    await prod?.close();
    await peer?.close();
    await broker?.stop();
  });

  test('an error reply becomes a MsgIdInProcessError', async () => {
    await assert.rejects(prod.requestMsg('pctl.produce.t.PEER1', enc.encode('v')), (e) => {
      checkStuck(e, 'error reply');
      assert.equal(e.remote, true);
      return true;
    });
  });

  test("a batched reply's record error becomes a MsgIdInProcessError", async () => {
    const h = headers();
    h.set('Pctl-Batch', '3');
    h.set('Pctl-Producer', 'p');
    const m = await prod.nc.request('pctl.produce.t.PEER1', enc.encode('body'), { timeout: 10_000, headers: h });
    const rep = JSON.parse(new TextDecoder().decode(m.data));
    assert.equal(rep.results.length, 3);
    const errs = rep.results.map((r) => (r.error ? errorFromCode(r.error.code, r.error.message, { detail: r.error.detail, remote: true }) : null));
    assert.equal(errs[0], null);
    assert.equal(errs[2], null);
    checkStuck(errs[1], 'batched result');
  });

  test('an unavailable without the detail stays a plain (retryable) UnavailableError', () => {
    const e = errorFromCode('unavailable', 'no stream', { detail: { in_process: false } });
    assert.equal(e.constructor, UnavailableError);
  });
});
