/*
 * sarama-fnv1a - Sarama's NewHashPartitioner: FNV-1a-32 as an i32, Go's
 * truncating remainder by n, negated if negative (spec/builtins.md).
 */
#include "builtin.h"

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    uint32_t h = 0x811C9DC5u;
    for (uint32_t i = 0; i < len; i++) {
        h ^= key[i];
        h *= 0x01000193u;
    }
    /*
     * C's % on int32_t truncates toward zero like Go's. n >= 1, so it never
     * overflows (INT32_MIN % n lies in (-n, 0]) and -p fits.
     */
    int32_t p = (int32_t)h % (int32_t)n;
    if (p < 0) {
        p = -p;
    }
    return (uint32_t)p;
}

BUILTIN_METADATA("{\"name\":\"sarama-fnv1a\",\"version\":\"1.0.0\","
                 "\"description\":\"Sarama NewHashPartitioner: |fnv1a32(key) as i32 % n|\","
                 "\"properties\":[\"compatible:sarama-fnv1a\"]}")
