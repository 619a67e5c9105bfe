/*
 * librdkafka-fnv1a - librdkafka's `fnv1a` partitioner: the absolute value of
 * the signed 32-bit FNV-1a, as a u32, unsigned remainder (spec/builtins.md).
 */
#include "builtin.h"

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    uint32_t h = 0x811C9DC5u;
    for (uint32_t i = 0; i < len; i++) {
        h ^= key[i];
        h *= 0x01000193u;
    }
    /*
     * abs() of the i32 in two's complement, computed on the u32 so that
     * INT32_MIN (0x80000000) maps to 0x80000000 as the spec pins, without
     * signed overflow in C.
     */
    if (h & 0x80000000u) {
        h = 0u - h;
    }
    return h % n;
}

BUILTIN_METADATA("{\"name\":\"librdkafka-fnv1a\",\"version\":\"1.0.0\","
                 "\"description\":\"librdkafka fnv1a partitioner: abs(fnv1a32(key) as i32) % n\","
                 "\"properties\":[\"compatible:librdkafka-fnv1a\"]}")
