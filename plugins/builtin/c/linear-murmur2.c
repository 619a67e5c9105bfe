/*
 * linear-murmur2 - linear hashing over Kafka's murmur2 (spec/builtins.md):
 * growing from n to n+1 partitions splits exactly one partition. Declares
 * exact split ancestry whenever it needs at most PCTL_MAX_RANGES ranges.
 */
#include "builtin.h"
#include "murmur2.h"

/* The largest power of two <= n, for 1 <= n <= 2^31-1. */
static inline uint32_t floor_pow2(uint32_t n) {
    return 0x80000000u >> __builtin_clz(n);
}

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    uint32_t h = murmur2_positive(key, len);
    uint32_t b = floor_pow2(n); /* b <= n < 2b <= 2^31 */
    uint32_t p = h & (2 * b - 1);
    if (p >= n) {
        p -= b;
    }
    return p;
}

static void put_range(uint32_t i, uint32_t lo, uint32_t hi) {
    pctl_store_u32(buf + 8 * i, lo);
    pctl_store_u32(buf + 8 * i + 4, hi);
}

/*
 * Under to_n (b' = floor_pow2(to_n)) the keys of `child` are exactly the
 * hashes h = child (mod M), with M = 2b' for a split or new partition
 * (child < to_n - b' or child >= b') and M = b' otherwise. Under from_n
 * (b = floor_pow2(from_n)) that class maps to:
 *   - M >= 2b: one partition, (child mod 2b) folded down by b if >= from_n;
 *   - M <= b:  every x < from_n with x = child (mod M); each is reached by
 *              the hashes h = x (mod 2b), which lie inside the class.
 * Every residue mod 2^31 is a real hash (murmur2 is a bijection on 4-byte
 * keys), so these sets are the parents, not an over-approximation. When
 * they need more than PCTL_MAX_RANGES ranges, [0, from_n) is declared instead
 * (the same answer on every host, whatever its buffer size).
 */
PCTL_EXPORT("pctl_ancestry")
int32_t pctl_ancestry(int32_t from_n, int32_t to_n, int32_t child) {
    if (from_n < 1 || to_n < 1 || child < 0 || child >= to_n) {
        return PCTL_E_INVALID;
    }
    uint32_t from = (uint32_t)from_n, to = (uint32_t)to_n, c = (uint32_t)child;
    uint32_t cap = PCTL_MAX_RANGES;
    if (buf_size / 8 < cap) {
        return PCTL_E_BUFFER; /* never: hosts give at least PCTL_MIN_BUFFER */
    }

    uint32_t bt = floor_pow2(to);
    uint32_t m = (c < to - bt || c >= bt) ? 2 * bt : bt; /* c < m */
    uint32_t bf = floor_pow2(from);

    if (m >= 2 * bf) {
        uint32_t q = c & (2 * bf - 1);
        if (q >= from) {
            q -= bf;
        }
        put_range(0, q, q + 1);
        return 1;
    }
    if (m == 1) {
        put_range(0, 0, from);
        return 1;
    }
    /* m <= bf <= from and c < m, so at least one parent. */
    uint32_t count = (from - c - 1) / m + 1;
    if (count > cap) {
        put_range(0, 0, from);
        return 1;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t x = c + i * m;
        put_range(i, x, x + 1);
    }
    return (int32_t)count;
}

BUILTIN_METADATA("{\"name\":\"linear-murmur2\",\"version\":\"1.0.0\","
                 "\"description\":\"Linear hashing over Kafka murmur2: growing by one partition "
                 "splits one partition\","
                 "\"properties\":[\"ancestry\",\"compatible:linear-murmur2\"]}")
