#!/usr/bin/env python3
"""Consume a pctl topic as one member of a consumer group, and show what the group does.

    PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/consumer.nk \\
        sdk/python/.venv/bin/python sdk/python/examples/consumer.py orders [GROUP]

Start it twice with the same GROUP and the members share the partitions (watch the "assigned" and
"revoked" lines); grow the topic meanwhile (`pctl topic expand orders --partitions 6`) and the
keys that move are handed over in order (the "keys" lines). It stops after 5 s without a record."""

import asyncio
import sys

import pctl


def assigned(partitions: list) -> None:
    print(f"assigned partitions {partitions}")


def revoked(partitions: list) -> None:
    print(f"revoked partitions {partitions}")


def keys_revoked(ch: pctl.KeyChange) -> None:
    print(f"keys of partition {ch.partition} leave it (epoch {ch.from_epoch} -> {ch.to_epoch})")


def keys_assigned(ch: pctl.KeyChange) -> None:
    print(f"keys of partition {ch.parent} arrive in partition {ch.partition} (epoch {ch.to_epoch})")


async def main(topic: str, group: str) -> int:
    try:
        client = await pctl.connect()  # $PCTL_SERVER and $PCTL_CREDS (consumer.nk)
    except pctl.PctlError as e:
        print(f"connect: {e}", file=sys.stderr)
        return 1
    async with client:
        try:
            consumer = await client.consumer(topic, group, from_beginning=True, on_assigned=assigned, on_revoked=revoked,
                                             on_keys_assigned=keys_assigned, on_keys_revoked=keys_revoked)
        except pctl.NotFound:
            print(f"no topic {topic}: create it with 'pctl topic create {topic} --partitions 3 --partitioner kafka-murmur2'", file=sys.stderr)
            return 1
        n = 0
        async with consumer:
            # `async for record in consumer:` runs until the consumer is closed; a demo stops when idle.
            while (record := await consumer.next(timeout=5)) is not None:
                n += 1
                key = "(keyless)" if record.key is None else record.key.decode(errors="replace")
                print(f"partition {record.partition} epoch {record.epoch} seq {record.seq}: {key} = "
                      f"{record.value.decode(errors='replace')} {record.headers or ''}")
        print(f"{n} records; member {consumer.member} of group {group} left the group")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "orders", sys.argv[2] if len(sys.argv) > 2 else "demo")))
