/*
 * murmur2.h - MurmurHash2 exactly as Apache Kafka's Utils.murmur2 computes it
 * (spec/builtins.md, kafka-murmur2): seed 0x9747b28c, little-endian blocks,
 * Java's tail order. Shared by kafka-murmur2 and linear-murmur2.
 */
#ifndef PCTL_MURMUR2_H
#define PCTL_MURMUR2_H

#include "pctl_abi.h"

static inline uint32_t murmur2(const uint8_t *data, uint32_t len) {
    const uint32_t m = 0x5bd1e995u;
    const uint32_t r = 24;
    uint32_t h = 0x9747b28cu ^ len;
    uint32_t blocks = len / 4;

    for (uint32_t i = 0; i < blocks; i++) {
        uint32_t k = pctl_load_u32(data + 4 * i);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }

    const uint8_t *tail = data + 4 * blocks;
    switch (len % 4) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }

    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* Kafka's Utils.toPositive: clears the sign bit (it is not abs). */
static inline uint32_t murmur2_positive(const uint8_t *data, uint32_t len) {
    return murmur2(data, len) & 0x7fffffffu;
}

#endif /* PCTL_MURMUR2_H */
