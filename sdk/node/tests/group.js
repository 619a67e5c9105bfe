// Helpers of the consumer tests: group members as child processes (this SDK's `consume` command,
// or the Go `pctl consume --format jsonl --timestamps`), producer logs in the format `pctl verify
// --sent` reads, `pctl verify` itself (the independent checker: client/verify), waiting on
// conditions instead of sleeping, and a loopback TCP proxy that cuts connections.

import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer, connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const consumeCli = fileURLToPath(new URL('../consume', import.meta.url));

/** Polls cond() every 50 ms until it is true; throws with what() after ms. */
export async function waitFor(cond, ms, what = 'condition') {
  const until = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${ms}ms waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Starts a group member as a child process: kind 'node' (sdk/node/consume) or 'go' (pctl
 * consume). Returns {kind, member, lines (parsed output so far), raw (stdout text), err(),
 * exited (promise of {status, signal}), kill(signal)}.
 */
export function startMember(broker, kind, { topic, group, member, fromBeginning = true, heartbeat = '200ms', extra = [], env = {} }) {
  const args = kind === 'node'
    ? [consumeCli, '--server', broker.url, '--creds', broker.creds.consumer, '--topic', topic, '--group', group, '--member', member, '--heartbeat', heartbeat]
    : [broker.bin, 'consume', topic, '--group', group, '--member', member, '--format', 'jsonl', '--timestamps', '--heartbeat', heartbeat, '--server', broker.url, '--creds', broker.creds.consumer];
  if (fromBeginning) args.push('--from-beginning');
  args.push(...extra);
  const proc = spawn(args[0], args.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const m = { kind, member, proc, lines: [], raw: '', stderr: '' };
  let rest = '';
  proc.stdout.setEncoding('utf8').on('data', (d) => {
    m.raw += d;
    rest += d;
    const i = rest.lastIndexOf('\n');
    if (i < 0) return;
    for (const l of rest.slice(0, i).split('\n')) if (l) m.lines.push(JSON.parse(l));
    rest = rest.slice(i + 1);
  });
  proc.stderr.setEncoding('utf8').on('data', (d) => { m.stderr += d; });
  m.exited = new Promise((resolve) => proc.on('close', (status, signal) => resolve({ status, signal })));
  m.kill = (sig = 'SIGTERM') => { try { proc.kill(sig); } catch { /* gone */ } return m.exited; };
  m.err = () => m.stderr;
  return m;
}

/**
 * A producer log for `pctl verify --sent`: one line per record {producer, pseq, key (base64) or
 * nokey, acked}. add(producerId, pseq, key|null, acked).
 */
export class SentLog {
  constructor() { this.lines = []; }
  add(producer, pseq, key, acked) {
    const l = { producer, pseq, acked };
    if (key === null) l.nokey = true;
    else l.key = Buffer.from(key).toString('base64');
    this.lines.push(JSON.stringify(l));
  }
  write(path) { writeFileSync(path, this.lines.join('\n') + '\n'); return path; }
}

/**
 * Runs `pctl verify --json` over the sent log and the members' outputs (group=file for each,
 * lines as written by the members) and returns the parsed result with its exit status.
 */
export async function verify(broker, dir, sentPath, outputs, { group = 'g', extra = [] } = {}) {
  const args = ['verify', '--json', '--sent', sentPath, '--expect-group', group, ...extra];
  outputs.forEach((text, i) => {
    const p = join(dir, `delivered-${group}-${i}-${Date.now()}.jsonl`);
    writeFileSync(p, text);
    args.push('--delivered', `${group}=${p}`);
  });
  const r = await broker.pctl(args);
  let res;
  try {
    res = JSON.parse(r.stdout);
  } catch {
    throw new Error(`pctl verify: exit ${r.status}: ${r.stdout} ${r.stderr}`);
  }
  return { status: r.status, res, report: res.groups?.find((g) => g.group === group) };
}

/**
 * A loopback TCP proxy to `target` (host:port). cut() resets every open connection at once (new
 * ones are accepted right after), as when a network path fails. freeze() stops every connection's
 * bytes in both directions without closing anything (a paused process, a black-holed link) and
 * thaw() lets what was held through, in order. close() stops it.
 */
export async function startProxy(target) {
  const [host, port] = target.split(':');
  const socks = new Set();
  const server = createServer((c) => {
    const s = netConnect(Number(port), host);
    socks.add(c);
    socks.add(s);
    c.on('error', () => {}).on('close', () => { socks.delete(c); s.destroy(); });
    s.on('error', () => {}).on('close', () => { socks.delete(s); c.destroy(); });
    c.pipe(s);
    s.pipe(c);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  let cuts = 0;
  let frozen = false;
  return {
    freeze() {
      frozen = true;
      for (const s of socks) s.pause();
    },
    thaw() {
      frozen = false;
      for (const s of socks) s.resume();
    },
    get frozen() { return frozen; },
    url: `nats://127.0.0.1:${server.address().port}`,
    get cuts() { return cuts; },
    cut() {
      cuts++;
      for (const s of [...socks]) s.resetAndDestroy ? s.resetAndDestroy() : s.destroy();
    },
    close() {
      for (const s of [...socks]) s.destroy();
      return new Promise((r) => server.close(r));
    },
  };
}
