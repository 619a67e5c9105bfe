// Compiled (tsc --noEmit, strict) by tests/types.test.js: the declarations in src/index.d.ts
// describe the API as the README uses it. Not run.
import {
  connect, PctlError, MisplacedError, type Message, type KeyChange, type Reset, type ProduceResult,
} from '../../src/index.js';

export async function example(): Promise<void> {
  const client = await connect({ server: 'nats://127.0.0.1:4222', creds: 'consumer.nk', sharedInbox: false });
  const producer = await client.producer('orders', { id: 'p1', maxInFlight: 64 });
  const r: ProduceResult = await producer.send({ key: 'customer-42', value: 'v', headers: { trace: ['a', 'b'] }, timestamp: new Date() });
  console.log(r.partition, r.seq, r.pseq, producer.epoch);
  await producer.send({ value: new Uint8Array(3), headers: new Map([['a', 'b']]) });
  await producer.close();

  const consumer = await client.consumer('orders', {
    group: 'billing', fromBeginning: true, autoCommit: false, misplaced: 'deliver',
    onAssigned: (ps: number[]) => console.log(ps),
    onRevoked: async (ps, info) => { console.log(ps, info.lost); },
    onKeysRevoked: (c: KeyChange) => console.log(c.partition, c.moved(Buffer.from('k'))),
    onKeysAssigned: (c) => console.log(c.parent, c.fromEpoch, c.toEpoch),
    onReset: (reset: Reset) => console.log(reset.generation, reset.positions),
    onMisplaced: (m) => console.log(m.misplaced?.expected),
  });
  for await (const m of consumer) {
    const k: string | undefined = m.key?.toString();
    const h: string | undefined = m.header('trace');
    const ts: number = m.timestamp;
    const ns: bigint = m.storedNanos;
    console.log(k, h, ts, ns, m.headers.trace?.[0], m.value.length, m.epoch, m.seq, m.producer, m.pseq);
    m.ack();
    await m.commit();
    break;
  }
  const reset = await consumer.seek('beginning');
  await consumer.seek(new Date());
  await consumer.seek(Date.now() - 60_000);
  console.log(reset.to, consumer.generation, consumer.assignment, consumer.stats.gated, consumer.member);
  await consumer.commit();
  await consumer.run(async (m: Message) => { m.ack(); });
  await consumer.close();
  await client.resetGroup('orders', 'billing', 'end');
  try {
    await client.topic('nope');
  } catch (e) {
    if (e instanceof PctlError && e.code === 'not_found') console.log(e.message);
    if (e instanceof MisplacedError) console.log(e.misplacement.reason, e.partition);
  }
  const { topic } = await client.topic('orders');
  const cur = topic.epochs[topic.epochs.length - 1];
  const part = await client.partitioner(cur.partitioner);
  console.log(part.partition('customer-42', cur.partitions), part.name, cur.boundaries?.[0]);
  await client.close();
}
