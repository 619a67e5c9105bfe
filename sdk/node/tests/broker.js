// Test harness: a real pctl broker. Builds the Go binary once per test process
// (`go build -o <tmp>/pctl ./cmd/pctl` from the repository root), runs
// `pctl serve --data <tmp>/data --listen 127.0.0.1:0`, and parses its ready line:
//   pctl: broker ready at nats://127.0.0.1:PORT (data DIR; admin credentials DIR/admin.nk)

import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * Why integration tests cannot run here, or null. With PCTL_REQUIRE_TOOLCHAINS=1 (CI) a missing
 * toolchain is not a reason to skip: it throws, so that the test file fails instead.
 */
export function missingToolchain() {
  const r = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    const why = 'go is not installed: the broker (./cmd/pctl) cannot be built';
    if (process.env.PCTL_REQUIRE_TOOLCHAINS === '1') throw new Error(`${why} (PCTL_REQUIRE_TOOLCHAINS=1)`);
    return why;
  }
  return null;
}

function run(cmd, args, { input, cwd, timeout = 300_000 } = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    p.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeout);
    p.on('error', (e) => { clearTimeout(timer); reject(e); });
    p.on('close', (status, signal) => { clearTimeout(timer); resolve({ status, signal, stdout, stderr }); });
    p.stdin.on('error', () => {}); // a command that exits before reading all its input
    p.stdin.end(input ?? '');
  });
}

/**
 * Starts a broker. Returns {url, dir, creds: {admin, producer, consumer}, pctl(args, {input}),
 * stop()}. pctl() runs the built binary and resolves {status, stdout, stderr}.
 */
export async function startBroker() {
  const dir = mkdtempSync(join(tmpdir(), 'pctl-node-sdk-'));
  const bin = join(dir, 'pctl');
  const b = await run('go', ['build', '-o', bin, './cmd/pctl'], { cwd: root });
  if (b.status !== 0) throw new Error(`go build ./cmd/pctl failed: ${b.stderr}`);
  const data = join(dir, 'data');
  let log = '';
  const serve = async (listen) => {
    const server = spawn(bin, ['serve', '--data', data, '--listen', listen], { stdio: ['ignore', 'pipe', 'pipe'] });
    server.stderr.setEncoding('utf8').on('data', (d) => { log += d; });
    const url = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`pctl serve: no ready line in 60s; stderr: ${log}`)), 60_000);
      server.stdout.setEncoding('utf8').on('data', (d) => {
        out += d;
        const m = /broker ready at (\S+) \(data (.*); admin credentials (.*)\)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      server.on('exit', (code) => { clearTimeout(timer); reject(new Error(`pctl serve exited with ${code}: ${log}`)); });
    });
    return { server, url, exited: new Promise((r) => server.on('exit', r)) };
  };
  let { server, url, exited } = await serve('127.0.0.1:0');
  const creds = { admin: join(data, 'admin.nk'), producer: join(data, 'producer.nk'), consumer: join(data, 'consumer.nk') };
  return {
    url,
    dir,
    bin,
    creds,
    log: () => log,
    pctl: (args, opts = {}) => run(bin, args, opts),
    async admin(args) {
      const r = await run(bin, [...args, '--server', url, '--creds', creds.admin]);
      if (r.status !== 0) throw new Error(`pctl ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
      return r.stdout;
    },
    /** Stops the broker (SIGTERM) and starts it again on the same data directory and port. */
    async restart() {
      server.kill('SIGTERM');
      await exited;
      ({ server, exited } = await serve(url.replace('nats://', '')));
    },
    async stop() {
      server.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (server.exitCode === null) server.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `pctl partition --plugin NAME --partitions N` of many keys (one per line on stdin). */
export async function pctlPartitions(broker, keys, n, plugin = 'kafka-murmur2') {
  for (const k of keys) if (k.includes('\n')) throw new Error('keys with newlines need --hex');
  const r = await broker.pctl(['partition', '--plugin', plugin, '--partitions', String(n)], { input: keys.map((k) => `${k}\n`).join('') });
  if (r.status !== 0) throw new Error(`pctl partition: ${r.stderr}`);
  const parts = r.stdout.trimEnd().split('\n').map(Number);
  return new Map(keys.map((k, i) => [k, parts[i]]));
}

/** Every record of a topic through a fresh consumer group: `pctl consume --format jsonl`. */
export async function consumeAll(broker, topic, group) {
  const r = await broker.pctl(['consume', topic, '--group', group, '--from-beginning', '--format', 'jsonl', '--idle-exit', '2s',
    '--server', broker.url, '--creds', broker.creds.consumer]);
  if (r.status !== 0) throw new Error(`pctl consume: exit ${r.status}: ${r.stderr}`);
  return r.stdout.trimEnd().split('\n').filter(Boolean).map((l) => JSON.parse(l));
}
