// pctl's Node.js SDK: produce to pctl topics with client-side partitioning (the topic's own
// WebAssembly partitioner, run on Node's built-in WebAssembly), consume them as a member of a
// consumer group with per-key order across epoch changes, and compute partitions offline.
//
//   import { connect, Partitioner } from '@pctl/sdk';
//
// spec/protocol.md and spec/abi-v1.md are the contracts this package implements.

export { connect, Client, DEFAULTS, readSeed } from './client.js';
export { Producer, PRODUCER_DEFAULTS, MIN_SERVER_VERSION } from './producer.js';
export { Consumer, Message, MisplacedError, CONSUMER_DEFAULTS, resetGroup, parseTarget } from './consumer.js';
export { TIME_HEADER, MAX_HEADER_BYTES, DEFAULT_MAX_RECORD_BYTES } from './records.js';
export { Partitioner, partition, configBytes, builtinNames } from './partitioner.js';
export {
  CODES, PctlError, BadRequestError, NotFoundError, ExistsError, ConflictError, InUseError,
  PluginRejectedError, PluginError, FencedError, ChangeInProgressError, PermissionError,
  UnavailableError, MsgIdInProcessError, OutOfSequenceError, UnsupportedError, InternalError, errorFromCode,
} from './errors.js';
