// A native JavaScript kafka-murmur2, written from spec/builtins.md. The SDK partitions with the
// topic's WebAssembly module, never with this: it exists as the baseline of bench.js and as a
// cross-check in the tests (it must agree with plugins/builtin/kafka-murmur2.wasm bit for bit).

const M = 0x5bd1e995;

/**
 * Kafka's murmur2 of the key bytes (the len of them from off, default all of them), as an unsigned
 * 32-bit number. off lets a batch hash keys laid end to end in one buffer without a view per key.
 */
export function murmur2(key, len = key.length, off = 0) {
  let h = (0x9747b28c ^ len) >>> 0;
  const whole = off + (len & ~3);
  let i = off;
  for (; i < whole; i += 4) {
    let k = key[i] | (key[i + 1] << 8) | (key[i + 2] << 16) | (key[i + 3] << 24);
    k = Math.imul(k, M);
    k ^= k >>> 24;
    k = Math.imul(k, M);
    h = Math.imul(h, M) ^ k;
  }
  switch (len & 3) {
    case 3: h ^= key[i + 2] << 16; // falls through
    case 2: h ^= key[i + 1] << 8; // falls through
    case 1: h ^= key[i]; h = Math.imul(h, M);
  }
  h ^= h >>> 13;
  h = Math.imul(h, M);
  h ^= h >>> 15;
  return h >>> 0;
}

/** kafka-murmur2's partition: (murmur2(key) & 0x7fffffff) % n (`toPositive`, not abs). */
export function kafkaMurmur2(key, n, len = key.length, off = 0) {
  return (murmur2(key, len, off) & 0x7fffffff) % n;
}
