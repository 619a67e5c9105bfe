#!/usr/bin/env node
// A runnable example: produce a few keyed records (and one keyless) to a topic, print where each
// landed, and check one placement offline with the topic's own partitioner.
//
//   pctl serve --data ./pctl-data &                      # prints the URL and admin.nk's path
//   pctl topic create orders --partitions 6 --partitioner kafka-murmur2
//   PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/producer.nk node examples/produce.js orders

import { connect, PctlError } from '../src/index.js';

const topic = process.argv[2] ?? 'orders';

const client = await connect(); // server and creds from PCTL_SERVER and PCTL_CREDS
try {
  // A random producer id (the default): an id is one producer instance's; a second run that
  // reused one would have its records taken for duplicates of the first's, and not stored.
  const producer = await client.producer(topic);

  // send() returns a promise per record; records with the same key keep their order.
  const sends = [
    producer.send({ key: 'customer-42', value: JSON.stringify({ order: 1, item: 'tea' }) }),
    producer.send({ key: 'customer-7', value: JSON.stringify({ order: 2, item: 'cake' }) }),
    producer.send({ key: 'customer-42', value: JSON.stringify({ order: 3, item: 'milk' }) }),
    producer.send({ value: 'a keyless record: any partition, no order promised' }),
  ];
  for (const r of await Promise.all(sends)) {
    console.log(`record ${r.pseq}: partition ${r.partition}, epoch ${r.epoch}, stream sequence ${r.seq}`);
  }
  await producer.close();

  // "Where does this key go?" offline, with the module the topic uses (fetched and verified).
  const { topic: desc } = await client.topic(topic);
  const current = desc.epochs[desc.epochs.length - 1];
  const partitioner = await client.partitioner(current.partitioner);
  console.log(`customer-42 -> partition ${partitioner.partition('customer-42', current.partitions)} of ${current.partitions} (${partitioner.name}, sha256:${partitioner.digest.slice(0, 12)})`);
} catch (e) {
  if (!(e instanceof PctlError)) throw e;
  console.error(`${e.code}: ${e.message}`);
  process.exitCode = 1;
} finally {
  await client.close();
}
