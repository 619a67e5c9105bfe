// TypeScript declarations of `@pctl/sdk/murmur2` (src/murmur2.js): a native JavaScript
// kafka-murmur2 written from spec/builtins.md. The SDK partitions with the topic's WebAssembly
// module, never with this; it is bench.js's baseline and a cross-check in the tests.

/**
 * Kafka's murmur2 of the key bytes (the `len` of them from `off`, default all of them), as an
 * unsigned 32-bit number. `off` lets a batch hash keys laid end to end in one buffer without a
 * view per key. The elements must be bytes (0–255).
 */
export function murmur2(key: ArrayLike<number>, len?: number, off?: number): number;

/** kafka-murmur2's partition of the key bytes among n: (murmur2(key) & 0x7fffffff) % n (`toPositive`, not abs). */
export function kafkaMurmur2(key: ArrayLike<number>, n: number, len?: number, off?: number): number;
