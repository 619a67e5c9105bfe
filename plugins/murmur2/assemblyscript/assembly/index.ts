// kafka-murmur2 for pctl, in AssemblyScript: the Apache Kafka Java client's
// default partitioner for keyed records, toPositive(murmur2(key)) % n
// (spec/builtins.md), as a `portable` module (no imports) implementing
// spec/abi-v1.md. It must give the same partition as
// plugins/builtin/kafka-murmur2.wasm for every key and n.

const ABI_VERSION: i32 = 1;
const MAX_KEY: i32 = 65536;
const MAX_BUFFER: i32 = 1048576;
const E_INVALID: i32 = -1;

// The buffer (abi-v1 section 2.2): static, zero-filled, costs no module bytes.
const buf: usize = memory.data(MAX_BUFFER, 16);
// The size the host asked for; 0 until pctl_key_buffer. Bounds checks only.
let bufSize: u32 = 0;

// One literal: a concatenation would be evaluated at start-up by the runtime.
const METADATA =
  '{"name":"kafka-murmur2-as","version":"1.0.0","description":"Kafka Java client default partitioner, built with AssemblyScript","properties":["compatible:kafka-murmur2"]}';
// The metadata as UTF-8 (it is ASCII); written by pctl_metadata.
const metadataBytes: usize = memory.data(256);

@inline
function load32(p: usize): u32 {
  return <u32>load<u8>(p) | (<u32>load<u8>(p, 1) << 8) |
    (<u32>load<u8>(p, 2) << 16) | (<u32>load<u8>(p, 3) << 24);
}

function murmur2(data: usize, len: u32): u32 {
  const m: u32 = 0x5bd1e995;
  let h: u32 = 0x9747b28c ^ len;
  const blocks = len >> 2;
  for (let i: u32 = 0; i < blocks; i++) {
    let k = load32(data + (<usize>i << 2));
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  const tail = data + (<usize>blocks << 2);
  const t = len & 3;
  if (t == 3) h ^= <u32>load<u8>(tail, 2) << 16;
  if (t >= 2) h ^= <u32>load<u8>(tail, 1) << 8;
  if (t >= 1) {
    h ^= <u32>load<u8>(tail);
    h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return h;
}

// toPositive is x & 0x7fffffff, not abs(x).
@inline
function partitionOf(key: usize, len: u32, n: u32): u32 {
  return (murmur2(key, len) & 0x7fffffff) % n;
}

export function pctl_abi_version(): i32 {
  return ABI_VERSION;
}

export function pctl_key_buffer(size: i32): i32 {
  if (size < 1 || size > MAX_BUFFER) return 0;
  bufSize = <u32>size;
  return <i32>buf;
}

export function pctl_partition(key_len: i32, n: i32): i32 {
  if (n < 1 || key_len < 0 || key_len > MAX_KEY || <u32>key_len > bufSize) return E_INVALID;
  return <i32>partitionOf(buf, <u32>key_len, <u32>n);
}

export function pctl_partition_batch(count: i32, n: i32): i32 {
  if (n < 1 || count < 1 || <u32>count > bufSize >> 2) return E_INVALID;
  let off: u32 = <u32>count << 2;
  for (let i: u32 = 0; i < <u32>count; i++) {
    const slot = buf + (<usize>i << 2);
    const len = load32(slot);
    if (len > <u32>MAX_KEY || len > bufSize - off) return E_INVALID;
    const p = partitionOf(buf + <usize>off, len, <u32>n);
    store<u8>(slot, <u8>p);
    store<u8>(slot, <u8>(p >> 8), 1);
    store<u8>(slot, <u8>(p >> 16), 2);
    store<u8>(slot, <u8>(p >> 24), 3);
    off += len;
  }
  return 0;
}

export function pctl_metadata(): i64 {
  const len = METADATA.length;
  for (let i = 0; i < len; i++) {
    store<u8>(metadataBytes + <usize>i, <u8>METADATA.charCodeAt(i));
  }
  return (<i64>metadataBytes << 32) | <i64>len;
}
