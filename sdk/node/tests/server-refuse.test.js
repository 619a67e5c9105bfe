// A consumer refuses, before it writes any group key, a nats-server older than 2.14.0
// (spec/protocol.md §6.1, "The server version a consumer needs"), and so does the producer (§5.1):
// against a real broker (tests/broker.js), through a TCP proxy that rewrites the version of the
// server's INFO lines (nats-server cannot be told to report another version), the consumer and
// the producer reject with UnavailableError naming the proxy, the claimed version, the minimum and
// what to do, and the group has no key; the same proxy claiming 2.14.0 passes, and so does the
// real server directly. The keys are read back with the official JetStream client.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, UnavailableError } from '../src/index.js';
import { GROUPS_BUCKET } from '../src/kv.js';
import { startBroker, missingToolchain } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;

// A proxy to host:port that rewrites "version" in every INFO line the server sends to `claim`.
function versionProxy(host, port, claim) {
  const socks = new Set();
  const srv = net.createServer((c) => {
    const s = net.connect(port, host);
    socks.add(c).add(s);
    let pending = Buffer.alloc(0);
    s.on('data', (d) => {
      pending = Buffer.concat([pending, d]);
      let i;
      while ((i = pending.indexOf(0x0a)) >= 0) {
        let line = pending.subarray(0, i + 1);
        pending = pending.subarray(i + 1);
        if (line.subarray(0, 5).toString('latin1') === 'INFO ') {
          line = Buffer.from(line.toString('utf8').replace(/"version":"[^"]*"/, `"version":"${claim}"`));
        }
        c.write(line);
      }
    });
    c.on('data', (d) => s.write(d));
    const end = () => { c.destroy(); s.destroy(); };
    c.on('error', end).on('close', end);
    s.on('error', end).on('close', end);
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({
    url: `nats://127.0.0.1:${srv.address().port}`,
    close: () => { for (const x of socks) x.destroy(); srv.close(); },
  })));
}

describe('a consumer refuses a server older than 2.14.0', { skip, timeout: 180_000 }, () => {
  let broker;
  let admin;
  let official;
  let tid;
  const clients = [];
  const proxies = [];

  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
    admin = await connect({ server: broker.url, creds: broker.creds.admin });
    official = await jetstreamManager(admin.nc);
    await broker.admin(['topic', 'create', 't', '--partitions', '2', '--partitioner', 'kafka-murmur2']);
    tid = (await admin.topic('t')).topic.id;
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => {});
    for (const p of proxies) p.close();
    await admin?.close();
    await broker?.stop();
  });

  async function groupKeys(group) {
    const keys = [];
    const si = await official.streams.info(`KV_${GROUPS_BUCKET}`, { subjects_filter: `$KV.${GROUPS_BUCKET}.${tid}.${group}.>` });
    for (const k of Object.keys(si.state.subjects ?? {})) keys.push(k);
    return keys;
  }

  async function via(claim, role) {
    const [host, port] = broker.url.replace('nats://', '').split(':');
    const px = await versionProxy(host, Number(port), claim);
    proxies.push(px);
    const c = await connect({ server: px.url, creds: broker.creds[role] });
    clients.push(c);
    return { c, px };
  }

  for (const claim of ['2.10.22', '2.11.0-RC.1', '2.13.9']) {
    test(`nats-server ${claim}: consumer and producer refuse, no group key`, async () => {
      const group = `g${claim.replace(/[.-]/g, '_')}`;
      const { c, px } = await via(claim, 'consumer');
      assert.equal(c.nc.info.version, claim);
      await assert.rejects(c.consumer('t', { group }), (e) => {
        assert.ok(e instanceof UnavailableError, String(e));
        for (const part of [px.url, JSON.stringify(claim), "pctl's consumer needs nats-server 2.14.0 or later", '§6.1', 'upgrade the NATS servers']) {
          assert.ok(e.message.includes(part), `${JSON.stringify(e.message)} does not say ${part}`);
        }
        return true;
      });
      assert.deepEqual(await groupKeys(group), []);
      const { c: pc } = await via(claim, 'producer');
      await assert.rejects(pc.producer('t'), (e) => e instanceof UnavailableError && e.message.includes("pctl's producer needs nats-server 2.14.0 or later"));
      // A reset of a group that does not exist would create it (§6.6): refused before any key.
      await assert.rejects(c.resetGroup('t', `${group}_reset`, 'earliest'), (e) => e instanceof UnavailableError && e.message.includes("pctl's group reset needs nats-server 2.14.0 or later"));
      assert.deepEqual(await groupKeys(`${group}_reset`), []);
    });
  }

  test('nats-server 2.14.0 through the proxy, and the real server, pass', async () => {
    const { c } = await via('2.14.0', 'consumer');
    const cn = await c.consumer('t', { group: 'claims214' });
    await cn.start();
    await cn.close();
    await c.resetGroup('t', 'claims214_reset', 'earliest');
    const direct = await connect({ server: broker.url, creds: broker.creds.consumer });
    clients.push(direct);
    const cd = await direct.consumer('t', { group: 'real' });
    await cd.start();
    await cd.close();
    assert.ok((await groupKeys('real')).some((k) => k.endsWith('.g.created')), 'the real server\'s member created its group');
  });
});
