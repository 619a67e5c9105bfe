/*
 * kafka-murmur2 - the Apache Kafka Java client's default partitioner for
 * keyed records: toPositive(murmur2(key)) % n (spec/builtins.md).
 */
#include "builtin.h"
#include "murmur2.h"

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    return murmur2_positive(key, len) % n;
}

BUILTIN_METADATA("{\"name\":\"kafka-murmur2\",\"version\":\"1.0.0\","
                 "\"description\":\"Kafka Java client default partitioner for keyed records: "
                 "toPositive(murmur2(key)) % n\","
                 "\"properties\":[\"compatible:kafka-murmur2\"]}")
