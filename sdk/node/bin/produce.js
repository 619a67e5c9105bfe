// The common cross-language produce CLI (one Go test drives every SDK through it):
//
//   produce --server URL --creds FILE --topic T --producer-id ID < lines
//
// stdin: "key<TAB>value" lines (UTF-8); everything after the first tab is the value; a line
// without a tab is a keyless record whose value is the line; the final newline is not part of
// the record. Every record is sent with the SDK's producer (per-key order). With --producer-id the
// records carry content tokens (as 'pctl produce --producer-id' does): a re-run of the same input
// under the same id stores nothing twice within the streams' 2-minute deduplication window.
// With --tombstone-marker M a line "key<TAB>M" sends a tombstone for key (spec/protocol.md §10.2)
// instead of the value M.
// stdout: one JSON line per record when its fate is known:
//   {"pseq": n, "acked": true, "partition": p, "epoch": e, "seq": s}
//   {"pseq": n, "acked": false, "error": "<code>: <message>"}
// (pseq is the record's Pctl-Seq, 1-based in stdin order; code is a spec/protocol.md §3 code).
// Exit 0 when every record was acknowledged; 1 when one was not; 2 for bad flags, an unknown
// topic or a bad producer id (then no record is sent).

import { StringDecoder } from 'node:string_decoder';
import { connect } from '../src/index.js';

const USAGE = 'usage: produce --server URL --creds FILE --topic T --producer-id ID [--tombstone-marker M] < key<TAB>value lines';

function parseArgs(argv) {
  const a = { server: '', creds: '', topic: '', producerId: '', tombstoneMarker: null };
  const names = { '--server': 'server', '--creds': 'creds', '--topic': 'topic', '--producer-id': 'producerId', '--tombstone-marker': 'tombstoneMarker' };
  for (let i = argv[0] === 'produce' ? 1 : 0; i < argv.length; i++) {
    let flag = argv[i];
    let val;
    const eq = flag.indexOf('=');
    if (flag.startsWith('--') && eq > 0) {
      val = flag.slice(eq + 1);
      flag = flag.slice(0, eq);
    }
    if (flag === '-h' || flag === '--help') return { help: true };
    const name = names[flag];
    if (!name) throw new Error(`unknown argument ${JSON.stringify(flag)}`);
    if (val === undefined) {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      val = argv[++i];
    }
    a[name] = val;
  }
  if (!a.topic) throw new Error('--topic T is required');
  return a;
}

// Yields the complete lines of each chunk of input as one array, so that a chunk's records are
// sent in one synchronous run (nats.js then writes them to the socket together).
async function* lineBatches(stream) {
  const dec = new StringDecoder('utf8');
  let rest = '';
  for await (const chunk of stream) {
    rest += dec.write(chunk);
    const i = rest.lastIndexOf('\n');
    if (i < 0) continue;
    const batch = rest.slice(0, i).split('\n');
    rest = rest.slice(i + 1);
    yield batch;
  }
  rest += dec.end();
  if (rest !== '') yield [rest];
}

// Output lines are gathered for the rest of the event-loop turn and written together (one write
// per turn rather than one per record); a record's line is out as soon as the turn ends.
let out = [];
function write(obj) {
  if (out.length === 0) setImmediate(flushOut);
  out.push(JSON.stringify(obj));
}
function flushOut() {
  if (out.length === 0) return;
  process.stdout.write(out.join('\n') + '\n');
  out = [];
}

async function main(argv) {
  let a;
  try {
    a = parseArgs(argv);
  } catch (e) {
    process.stderr.write(`produce: ${e.message}\n${USAGE}\n`);
    return 2;
  }
  if (a.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  let client;
  let producer;
  try {
    client = await connect({ server: a.server || undefined, creds: a.creds || undefined, name: 'pctl-node-produce' });
    // PCTL_PRODUCE_LOG=1: the producer's decisions after failures (settle, re-send, repartition)
    // on stderr, as the cross-language failover test asks for.
    const onLog = process.env.PCTL_PRODUCE_LOG === '1' ? (l) => process.stderr.write(`produce: ${l}\n`) : undefined;
    producer = await client.producer(a.topic, { id: a.producerId || undefined, contentTokens: !!a.producerId, onLog });
  } catch (e) {
    process.stderr.write(`produce: ${e.message}\n`);
    await client?.close();
    return ['bad_request', 'not_found'].includes(e.code) ? 2 : 1;
  }
  let failed = 0;
  let acked = 0;
  const all = [];
  const ok = (r) => { acked++; write({ pseq: r.pseq, acked: true, partition: r.partition, epoch: r.epoch, seq: r.seq }); };
  for await (const batch of lineBatches(process.stdin)) {
    for (const line of batch) {
      const tab = line.indexOf('\t');
      let rec = tab < 0 ? { key: null, value: line } : { key: line.slice(0, tab), value: line.slice(tab + 1) };
      if (tab >= 0 && a.tombstoneMarker !== null && rec.value === a.tombstoneMarker) rec = { key: rec.key, tombstone: true };
      const pseq = producer.seq + 1; // send() numbers records in call order
      all.push(producer.send(rec).then(ok, (e) => {
        failed++;
        write({ pseq, acked: false, error: `${e.code ?? 'internal'}: ${e.message}` });
      }));
    }
    await producer.ready();
  }
  await Promise.all(all);
  flushOut();
  await producer.close().catch(() => {});
  await client.close();
  process.stderr.write(`produce: ${acked} acknowledged, ${failed} failed, ${producer.resent} re-sent after an epoch change\n`);
  return failed > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (e) => { process.stderr.write(`produce: ${e?.stack ?? e}\n`); process.exitCode = 1; },
);
