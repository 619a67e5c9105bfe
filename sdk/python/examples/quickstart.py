#!/usr/bin/env python3
"""Produce a few keyed records to a pctl topic and show where they landed.

    pctl serve --data ./pctl-data &
    pctl topic create orders --partitions 6 --partitioner kafka-murmur2
    PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/producer.nk \\
        sdk/python/.venv/bin/python sdk/python/examples/quickstart.py orders

Then `pctl consume orders --group demo --from-beginning` prints them, and
`pctl partition --plugin kafka-murmur2 --partitions 6 customer-1` names the same partition."""

import asyncio
import json
import sys

import pctl


async def main(topic: str) -> int:
    try:
        client = await pctl.connect()  # $PCTL_SERVER and $PCTL_CREDS
    except pctl.PctlError as e:
        print(f"connect: {e}", file=sys.stderr)
        return 1
    async with client:
        try:
            # A random producer id (the default): see the README on stable ids.
            producer = await client.producer(topic)
        except pctl.NotFound:
            print(f"no topic {topic}: create it with 'pctl topic create {topic} --partitions 6 --partitioner kafka-murmur2'", file=sys.stderr)
            return 1
        async with producer:
            # send() returns a future per record; records with the same key keep their order.
            futures = [await producer.send(f"customer-{i % 3}", json.dumps({"order": i})) for i in range(9)]
            futures.append(await producer.send(None, "a keyless record: any partition"))
            for f in futures:
                try:
                    m = await f
                    print(f"record {m.producer_seq}: partition {m.partition}, epoch {m.epoch}, stream sequence {m.seq}"
                          + (" (a duplicate: already stored)" if m.duplicate else ""))
                except pctl.PctlError as e:
                    print(f"record failed ({e.code}): {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "orders")))
