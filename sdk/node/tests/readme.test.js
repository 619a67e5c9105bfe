// The README's consumer quickstart runs as written against a real `pctl serve`: its shell block
// (the built pctl on PATH, the broker's address and data directory in place of the defaults, a
// fresh topic in place of "payments", run from the repository root) and its JavaScript block (run
// from the SDK's directory, where its import path points).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBroker, missingToolchain, root } from './broker.js';

const skipReason = missingToolchain();
const skip = skipReason && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? skipReason : false;
const sdk = fileURLToPath(new URL('..', import.meta.url));

function blocks(section) {
  const text = readFileSync(join(sdk, 'README.md'), 'utf8');
  let body = text.slice(text.indexOf(`## ${section}\n`));
  body = body.slice(0, body.indexOf('\n## ', 4));
  return { sh: /```sh\n([\s\S]*?)```/.exec(body)[1], js: /```js\n([\s\S]*?)```/.exec(body)[1] };
}

function run(cmd, args, opts) {
  return new Promise((resolve) => {
    const c = spawn(cmd, args, opts);
    let out = '';
    let err = '';
    c.stdout.setEncoding('utf8').on('data', (d) => { out += d; });
    c.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
    c.on('close', (status) => resolve({ status, out, err }));
  });
}

describe('README', { skip, timeout: 300_000 }, () => {
  let broker;
  before(async () => {
    if (skipReason) throw new Error(`PCTL_REQUIRE_TOOLCHAINS=1: ${skipReason}`);
    broker = await startBroker();
  });
  after(async () => broker?.stop());

  test('the consumer quickstart runs as written', async () => {
    const { sh, js } = blocks('Consumer quickstart');
    assert.ok(!sh.includes('pctl serve'), 'the quickstart starts from a running broker');
    const topic = `orders${Date.now()}`;
    const data = dirname(broker.creds.admin);
    const localize = (s) => s.replaceAll('nats://127.0.0.1:4222', broker.url).replaceAll('./pctl-data', data)
      .replaceAll("'payments'", `'${topic}'`).replace(/ payments\b/g, ` ${topic}`);
    const env = { ...process.env, PATH: `${dirname(broker.bin)}:${process.env.PATH}` };
    delete env.PCTL_SERVER;
    delete env.PCTL_CREDS;
    const r = await run('sh', ['-e', '-c', localize(sh)], { cwd: root, env });
    assert.equal(r.status, 0, r.err);
    const lines = r.out.trimEnd().split('\n');
    const recs = lines.filter((l) => /^partition \d+ epoch \d+ seq \d+: /.test(l));
    assert.equal(recs.length, 8, r.out);
    assert.deepEqual([...new Set(recs.map((l) => l.split(' ')[3]))].sort(), ['1', '2'], 'records of both epochs');
    const orders = recs.filter((l) => l.includes(': customer-42 = ')).map((l) => JSON.parse(l.split(' = ')[1]).order);
    assert.deepEqual(orders, [1, 3, 1, 3], 'customer-42: run 1 (orders 1, 3), then run 2 (1, 3), in order');
    assert.ok(lines.some((l) => l.startsWith('assigned partitions')), r.out);
    assert.ok(lines.some((l) => /^8 records; member \S+ left the group$/.test(l)), r.out);
    const jsonl = lines.filter((l) => l.startsWith('{'));
    assert.equal(jsonl.length, 8, 'the consume command printed the same records as jsonl');
    assert.ok(jsonl.every((l) => { const j = JSON.parse(l); return j.topic === topic && j.ts > 0 && j.pseq > 0; }));

    const file = join(sdk, `.readme-quickstart-${process.pid}.mjs`);
    writeFileSync(file, localize(js));
    try {
      const q = await run(process.execPath, [file], { cwd: sdk, env: { ...env, PCTL_SERVER: broker.url, PCTL_CREDS: broker.creds.consumer } });
      assert.equal(q.status, 0, q.err);
      assert.equal(q.out.trimEnd().split('\n').filter((l) => /^\d+ \d+ /.test(l)).length, 8, q.out);
    } finally {
      rmSync(file, { force: true });
    }
  });
});
