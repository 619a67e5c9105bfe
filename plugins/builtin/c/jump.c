/*
 * jump - Lamping and Veach's jump consistent hash over XXH64(key, seed 0)
 * (spec/builtins.md). Growing moves keys only into the new partitions.
 */
#include "builtin.h"

#define P64_1 0x9E3779B185EBCA87ull
#define P64_2 0xC2B2AE3D27D4EB4Full
#define P64_3 0x165667B19E3779F9ull
#define P64_4 0x85EBCA77C2B2AE63ull
#define P64_5 0x27D4EB2F165667C5ull

static inline uint64_t load_u64(const uint8_t *p) {
    return (uint64_t)pctl_load_u32(p) | (uint64_t)pctl_load_u32(p + 4) << 32;
}

static inline uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
    acc += input * P64_2;
    acc = rotl64(acc, 31);
    return acc * P64_1;
}

static inline uint64_t xxh_merge(uint64_t acc, uint64_t v) {
    acc ^= xxh_round(0, v);
    return acc * P64_1 + P64_4;
}

/* XXH64 with seed 0, as published in Cyan4973/xxHash. */
static uint64_t xxh64(const uint8_t *p, uint32_t len) {
    const uint8_t *end = p + len;
    uint64_t h;

    if (len >= 32) {
        uint64_t v1 = P64_1 + P64_2, v2 = P64_2, v3 = 0, v4 = 0 - P64_1;
        const uint8_t *limit = end - 32;
        do {
            v1 = xxh_round(v1, load_u64(p));
            v2 = xxh_round(v2, load_u64(p + 8));
            v3 = xxh_round(v3, load_u64(p + 16));
            v4 = xxh_round(v4, load_u64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = P64_5;
    }
    h += (uint64_t)len;

    while (end - p >= 8) {
        h ^= xxh_round(0, load_u64(p));
        h = rotl64(h, 27) * P64_1 + P64_4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)pctl_load_u32(p) * P64_1;
        h = rotl64(h, 23) * P64_2 + P64_3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p) * P64_5;
        h = rotl64(h, 11) * P64_1;
        p++;
    }

    h ^= h >> 33;
    h *= P64_2;
    h ^= h >> 29;
    h *= P64_3;
    h ^= h >> 32;
    return h;
}

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    uint64_t k = xxh64(key, len);
    int64_t b = -1, j = 0;
    while (j < (int64_t)n) {
        b = j;
        k = k * 2862933555777941757ull + 1;
        /* The paper's expression: the division first, then the product. */
        j = (int64_t)((double)(b + 1) * ((double)(1ll << 31) / (double)((k >> 33) + 1)));
    }
    return (uint32_t)b;
}

static void put_range(uint32_t i, uint32_t lo, uint32_t hi) {
    pctl_store_u32(buf + 8 * i, lo);
    pctl_store_u32(buf + 8 * i + 4, hi);
}

/*
 * Growing from n to m > n moves keys only into [n, m): child c < n has parent
 * c, child c >= n has parents [0, n). Shrinking from n to m < n: child c has
 * parents {c} and [m, n).
 */
PCTL_EXPORT("pctl_ancestry")
int32_t pctl_ancestry(int32_t from_n, int32_t to_n, int32_t child) {
    if (from_n < 1 || to_n < 1 || child < 0 || child >= to_n) {
        return PCTL_E_INVALID;
    }
    uint32_t from = (uint32_t)from_n, to = (uint32_t)to_n, c = (uint32_t)child;
    if (buf_size < 16) {
        return PCTL_E_BUFFER;
    }
    if (to >= from) {
        if (c < from) {
            put_range(0, c, c + 1);
        } else {
            put_range(0, 0, from);
        }
        return 1;
    }
    if (c + 1 == to) {
        put_range(0, c, from); /* {c} and [to, from) touch */
        return 1;
    }
    put_range(0, c, c + 1);
    put_range(1, to, from);
    return 2;
}

BUILTIN_METADATA("{\"name\":\"jump\",\"version\":\"1.0.0\","
                 "\"description\":\"Jump consistent hash (Lamping and Veach) over XXH64(key, seed 0)\","
                 "\"properties\":[\"ancestry\",\"compatible:jump\"]}")
