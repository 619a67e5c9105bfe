"""pctl: WebAssembly-pluggable partitioning on NATS JetStream, for Python.

    import asyncio, pctl

    async def main():
        async with await pctl.connect("nats://127.0.0.1:4222", "producer.nk") as client:
            producer = await client.producer("orders")
            meta = await producer.produce(b"user-1", b"hello")
            print(meta.partition, meta.epoch, meta.seq)
            await producer.close()

    asyncio.run(main())

Offline: ``pctl.Partitioner.builtin("kafka-murmur2").partition(b"user-1", 12)`` (the built-ins are
in the package), or ``pctl.Partitioner.load("my.wasm")`` for a module file.
The specs are spec/abi-v1.md (modules) and spec/protocol.md (the broker's protocol)."""

from .client import Client, connect
from .consumer import CommitFailed, Consumer, ConsumerStats, MisplacedRecord, reset_group
from .errors import (BadRequest, ChangeInProgress, Conflict, Exists, Fenced, InternalError, InUse, MsgIdInProcess, NotFound,
                     OutOfSequence, PctlError, PermissionDenied, PluginFailed, PluginRejected, Unavailable, Unsupported,
                     error_from_code)
from .partitioner import Partitioner, builtin_names
from .producer import Producer, RecordMetadata
from .record import KeyChange, Misplacement, Record
from .state import KeySet, StateHandler, StateReason
from .wire import Epoch, PartitionerRef, Topic

__version__ = "0.1.0"

__all__ = ["BadRequest", "ChangeInProgress", "Client", "CommitFailed", "Conflict", "Consumer", "ConsumerStats", "KeyChange", "KeySet", "Misplacement", "MisplacedRecord", "MsgIdInProcess", "Record", "reset_group", "Epoch", "Exists", "Fenced", "InUse", "InternalError",
           "NotFound", "OutOfSequence", "PartitionerRef", "Partitioner", "PctlError", "PermissionDenied", "PluginFailed", "PluginRejected",
           "Producer", "RecordMetadata", "StateHandler", "StateReason", "Topic", "Unavailable", "Unsupported", "builtin_names", "connect", "error_from_code"]
