#!/usr/bin/env node
// A runnable example: one member of consumer group "billing" reads a topic from the beginning,
// printing its partitions, every record (each key's records in the order they were produced,
// across epoch changes) and the key handovers of epoch changes; it stops after 5 s without a
// record and commits what it printed.
//
//   PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/consumer.nk node examples/consume.js orders

import { connect, PctlError } from '../src/index.js';

const topic = process.argv[2] ?? 'orders';

const client = await connect(); // server and creds from PCTL_SERVER and PCTL_CREDS
try {
  const consumer = await client.consumer(topic, {
    group: 'billing',
    fromBeginning: true, // a new group starts at the first record (default: after what is there)
    onAssigned: (partitions) => console.log(`assigned partitions ${partitions.join(', ')}`),
    onRevoked: (partitions) => console.log(`revoked partitions ${partitions.join(', ')}`),
    // KIP-253's key-level handover: the old owner is done with the keys leaving its partition,
    // the new owner gets them before their first new-epoch record.
    onKeysRevoked: (c) => console.log(`keys revoked: partition ${c.partition} (epoch ${c.fromEpoch} -> ${c.toEpoch})`),
    onKeysAssigned: (c) => console.log(`keys assigned: partition ${c.partition} from partition ${c.parent} (epoch ${c.fromEpoch} -> ${c.toEpoch})`),
  });
  let n = 0;
  let idle = setTimeout(() => consumer.close(), 5000);
  for await (const m of consumer) {
    clearTimeout(idle);
    n++;
    const key = m.key === null ? '(keyless)' : m.key.toString();
    console.log(`partition ${m.partition} epoch ${m.epoch} seq ${m.seq}: ${key} = ${m.value.toString()}`);
    idle = setTimeout(() => consumer.close(), 5000); // the loop ends when the consumer is closed
  }
  await consumer.close(); // (idempotent) waits until the positions are committed
  console.log(`${n} records; member ${consumer.member} left the group`);
} catch (e) {
  if (!(e instanceof PctlError)) throw e;
  console.error(`${e.code}: ${e.message}`);
  process.exitCode = 1;
} finally {
  await client.close();
}
