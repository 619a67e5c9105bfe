// The common cross-language consume CLI (one test drives a group of members in any mix of
// languages through it):
//
//   consume --server URL --creds FILE --topic T --group G [--from-beginning] [--from now|beginning|current-epoch] [--idle-exit D]
//           [--max N] [--member ID] [--heartbeat D] [--reset-to earliest|latest|TIME|DURATION]
//           [--misplaced stop|deliver|skip] [--assignor modulo|sticky]
//
// Runs one member of consumer group G on topic T with the SDK's consumer and prints each record
// it is given exactly as `pctl consume T --group G --format jsonl --timestamps` does (src/jsonl.js):
// a record is acknowledged only once its line is written to standard output, so what is
// committed was printed, even if the process is killed. It runs until SIGINT/SIGTERM (it commits
// and leaves the group), --max N records were printed, or --idle-exit D passed without a new
// record; exit 0 then. A record outside its key's partition (spec/protocol.md §6.8) is reported on
// standard error and, by --misplaced: stop (default: exit 1 before it), deliver (printed with
// "misplaced", "expected_partition", "misplaced_reason", as pctl consume does) or skip. Exit 2: bad flags, unknown topic, bad group or member; 1: refused,
// broker unreachable, failed. Durations are Go's: 500ms, 2s, 1m30s.

import { connect } from '../src/index.js';
import { recordLine } from '../src/jsonl.js';

const USAGE = 'usage: consume --server URL --creds FILE --topic T --group G [--from-beginning] [--from now|beginning|current-epoch] [--idle-exit D] [--max N] [--member ID] [--heartbeat D] [--reset-to earliest|latest|TIME|DURATION] [--misplaced stop|deliver|skip] [--assignor modulo|sticky]';

const UNIT = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A Go duration (time.ParseDuration) in milliseconds. */
export function parseDuration(s) {
  if (s === '0') return 0;
  const re = /([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let ms = 0;
  let at = 0;
  let m;
  while ((m = re.exec(s)) !== null) {
    ms += Number(m[1]) * UNIT[m[2]];
    at = re.lastIndex;
  }
  if (at !== s.length || s.length === 0) throw new Error(`bad duration ${JSON.stringify(s)}: give a duration such as 500ms, 2s or 1m30s`);
  return ms;
}

function parseArgs(argv) {
  const a = { server: '', creds: '', topic: '', group: '', member: undefined, fromBeginning: false, idle: 0, max: 0, heartbeat: undefined, resetTo: undefined };
  const takes = { '--server': 'server', '--creds': 'creds', '--topic': 'topic', '--group': 'group', '--member': 'member', '--idle-exit': 'idle', '--max': 'max', '--heartbeat': 'heartbeat', '--reset-to': 'resetTo', '--format': 'format', '--misplaced': 'misplaced', '--from': 'from', '--assignor': 'assignor' };
  for (let i = argv[0] === 'consume' ? 1 : 0; i < argv.length; i++) {
    let flag = argv[i];
    let val;
    const eq = flag.indexOf('=');
    if (flag.startsWith('--') && eq > 0) {
      val = flag.slice(eq + 1);
      flag = flag.slice(0, eq);
    }
    if (flag === '-h' || flag === '--help') return { help: true };
    if (flag === '--from-beginning' || flag === '--timestamps') {
      if (val !== undefined && val !== 'true' && val !== 'false') throw new Error(`${flag}=${val}: true or false`);
      if (flag === '--from-beginning') a.fromBeginning = val !== 'false';
      continue;
    }
    const name = takes[flag];
    if (!name) throw new Error(`unknown argument ${JSON.stringify(flag)}`);
    if (val === undefined) {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      val = argv[++i];
    }
    a[name] = val;
  }
  if (a.format !== undefined && a.format !== 'jsonl') throw new Error(`--format ${a.format}: this command prints jsonl only`);
  a.misplaced ??= 'stop';
  if (a.resetTo !== undefined && /^[0-9.]+(ns|us|µs|μs|ms|s|m|h)/.test(a.resetTo)) {
    a.resetTo = Date.now() - parseDuration(a.resetTo); // a duration ago, as pctl's --reset-to
  } else if (a.resetTo !== undefined && !['beginning', 'earliest', 'end', 'latest'].includes(a.resetTo) && Number.isNaN(Date.parse(a.resetTo))) {
    throw new Error(`--reset-to ${JSON.stringify(a.resetTo)}: give earliest, latest, an RFC 3339 time (2026-11-30T07:00:00Z) or a duration ago (10m)`);
  }
  if (a.from !== undefined && !['now', 'beginning', 'current-epoch'].includes(a.from)) throw new Error(`--from ${JSON.stringify(a.from)}: give now, beginning or current-epoch`);
  if (!['stop', 'deliver', 'skip'].includes(a.misplaced)) throw new Error(`--misplaced ${JSON.stringify(a.misplaced)}: give stop, deliver or skip`);
  if (a.assignor !== undefined && !['modulo', 'sticky'].includes(a.assignor)) throw new Error(`--assignor ${JSON.stringify(a.assignor)}: give modulo or sticky (a new group's assignor; an existing group keeps its own)`);
  if (!a.topic) throw new Error('--topic T is required');
  if (!a.group) throw new Error('--group G is required: the consumer group this member joins');
  a.idle = typeof a.idle === 'string' ? parseDuration(a.idle) : 0;
  if (a.heartbeat !== undefined) {
    a.heartbeat = parseDuration(a.heartbeat);
    if (!(a.heartbeat > 0)) throw new Error('--heartbeat: give a positive duration');
  }
  if (typeof a.max === 'string') {
    if (!/^[0-9]+$/.test(a.max)) throw new Error(`--max ${a.max}: give a positive count, or 0 for no limit`);
    a.max = Number(a.max);
  }
  return a;
}

async function main(argv) {
  let a;
  try {
    a = parseArgs(argv);
  } catch (e) {
    process.stderr.write(`consume: ${e.message}\n${USAGE}\n`);
    return 2;
  }
  if (a.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const start = Date.now();
  let client;
  let consumer;
  let settle;
  const settled = new Promise((r) => { settle = r; });
  try {
    client = await connect({ server: a.server || undefined, creds: a.creds || undefined, name: 'pctl-node-consume' });
    consumer = await client.consumer(a.topic, {
      group: a.group, member: a.member, fromBeginning: a.fromBeginning, from: a.from, heartbeat: a.heartbeat,
      resetTo: a.resetTo, autoCommit: false, onAssigned: () => settle(), misplaced: a.misplaced, assignor: a.assignor,
      onMisplaced: (m) => process.stderr.write(`consume: misplaced record: partition ${m.partition} seq ${m.seq} epoch ${m.epoch} key ${m.key === null ? '-' : JSON.stringify(m.key.toString())}: ${m.misplaced.reason} (--misplaced ${a.misplaced})\n`),
      onLog: process.env.PCTL_CONSUME_LOG ? (l) => process.stderr.write(`consume: ${l}\n`) : undefined,
    });
  } catch (e) {
    process.stderr.write(`consume: ${e.message}\n`);
    await client?.close();
    return ['bad_request', 'not_found'].includes(e.code) ? 2 : 1;
  }
  let why = 'interrupted';
  const stop = (reason) => {
    if (why === 'interrupted' || reason === 'failed') why = reason ?? why;
    consumer.close();
  };
  process.once('SIGINT', () => stop('interrupted'));
  process.once('SIGTERM', () => stop('interrupted'));

  // Lines are gathered for the rest of the event-loop turn and written together; the records are
  // acknowledged after the write (to a pipe it is synchronous on Linux: in the kernel then).
  let lines = [];
  let msgs = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (lines.length === 0) return;
    process.stdout.write(lines.join(''));
    for (const m of msgs) m.ack();
    lines = [];
    msgs = [];
  };
  let n = 0;
  let last = Date.now();
  let idleTimer = null;
  if (a.idle > 0) {
    idleTimer = setInterval(() => {
      if (Date.now() - last >= a.idle) {
        clearInterval(idleTimer);
        stop(`no new record for ${argv.find((x, i) => argv[i - 1] === '--idle-exit') ?? `${a.idle}ms`}`);
      }
    }, Math.max(1, Math.min(100, a.idle / 4)));
  }
  let failure = null;
  try {
    for await (const m of consumer) {
      lines.push(recordLine(m, consumer.nextTs()));
      msgs.push(m);
      n++;
      last = Date.now();
      if (a.max > 0 && n >= a.max) {
        flush();
        // The first rebalance must finish before stopping, or a partition being acquired could
        // stay leased to a member that is gone.
        await Promise.race([settled, new Promise((r) => setTimeout(r, 5000).unref())]);
        why = `--max ${a.max} reached`;
        break;
      }
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    }
  } catch (e) {
    failure = e;
  }
  flush();
  clearInterval(idleTimer);
  await consumer.close();
  await client.close();
  if (failure) why = 'failed';
  const mis = consumer.stats.misplaced > 0 ? `, ${consumer.stats.misplaced} misplaced (${a.misplaced})` : '';
  process.stderr.write(`consume: ${a.topic} group ${a.group}: ${n} records in ${Date.now() - start}ms (${why})${mis}\n`);
  if (failure) {
    process.stderr.write(`consume: ${failure.message}\n`);
    return ['bad_request', 'not_found'].includes(failure.code) ? 2 : 1;
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (e) => { process.stderr.write(`consume: ${e?.stack ?? e}\n`); process.exitCode = 1; },
);
