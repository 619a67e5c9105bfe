/*
 * my-partitioner - a pctl partitioner in freestanding C (ABI v1, portable
 * profile: no imports, no libc).
 *
 *     ./build.sh                                   builds my-partitioner.wasm
 *     pctl conformance my-partitioner.wasm         checks it
 *     pctl partition --plugin ./my-partitioner.wasm --partitions 12 alice bob
 *
 * The function (the same in pctl's C, Go, Rust and AssemblyScript templates,
 * which give identical partitions):
 *
 *     h = FNV-1a-64 over the key's bytes, starting from 0xcbf29ce484222325 ^ seed
 *     h = fmix64(h)                  MurmurHash3's 64-bit finaliser
 *     partition = h mod n            unsigned 64-bit remainder
 *
 * fmix64 is there because FNV-1a's low bits are weak (bit 0 of the hash is
 * just the parity of the keys' bit 0s), and "mod n" for a small or
 * power-of-two n reads mostly low bits. The seed comes from the optional
 * config `seed=<u64>` (pctl ... --config seed=42): a different seed is a
 * different layout of keys over partitions. No seed means seed 0.
 *
 * Replace hash() with your own function; keep the rest. Whatever you write,
 * the result must depend only on (key, n, config): no clock, no randomness,
 * no state that changes between calls (spec section 1).
 */
#include "pctl_abi.h"

/*
 * The buffer (spec 2.2): the host writes keys and config here and reads
 * results from here. Static and zero-initialised, so it costs no module
 * bytes; 16-byte aligned, as wide loads like it.
 */
static uint8_t buf[PCTL_MAX_BUFFER] __attribute__((aligned(16)));

/* The size the host asked for; 0 until pctl_key_buffer. Bounds checks only. */
static uint32_t buf_size;

/* Set once by pctl_configure, before any partition call; never changed by one. */
static uint64_t seed;

static const char metadata[] =
    "{\"name\":\"my-partitioner\",\"version\":\"0.1.0\","
    "\"description\":\"FNV-1a-64 of the key (optional seed), fmix64, modulo n\","
    "\"properties\":[\"ancestry\"]}";

/* The hash of key[0, len). Unsigned arithmetic wraps, as the function needs. */
static uint64_t hash(const uint8_t *key, uint32_t len) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (uint32_t i = 0; i < len; i++) {
        h ^= key[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/*
 * 1 <= n <= 2^31-1. Unsigned remainder: a signed one (int64_t % n) would give
 * negative partitions for half the keys. The result is < n, so it fits.
 */
static int32_t partition_of(const uint8_t *key, uint32_t len, int32_t n) {
    return (int32_t)(hash(key, len) % (uint64_t)n);
}

/* Spec 2.1: the ABI version, nothing else. */
PCTL_EXPORT_ABI_VERSION

/*
 * Spec 2.2: called once per instance with 64 KiB <= size <= 1 MiB; returns the
 * buffer's address. Every size in that range must succeed.
 */
PCTL_EXPORT("pctl_key_buffer")
int32_t pctl_key_buffer(int32_t size) {
    if (size < 1 || size > PCTL_MAX_BUFFER) {
        return 0;
    }
    buf_size = (uint32_t)size;
    return (int32_t)(uintptr_t)buf;
}

/* Whether k[0, len) is the NUL-terminated name. */
static int key_is(const uint8_t *k, uint32_t len, const char *name) {
    uint32_t i = 0;
    while (i < len && name[i] != 0 && k[i] == (uint8_t)name[i]) {
        i++;
    }
    return i == len && name[i] == 0;
}

/*
 * Spec 2.5: the config is buf[0, config_len), lines "K=V\n" sorted by K
 * (pctl makes them from --config K=V). Copy what you need: the buffer is
 * overwritten by the next call. Reject what you do not understand, unknown
 * keys included: a typo must not silently give another layout.
 */
PCTL_EXPORT("pctl_configure")
int32_t pctl_configure(int32_t config_len) {
    if (config_len < 0 || config_len > PCTL_MAX_CONFIG || (uint32_t)config_len > buf_size) {
        return PCTL_E_CONFIG;
    }
    uint64_t s = 0;
    int have_seed = 0;
    uint32_t end = (uint32_t)config_len;
    for (uint32_t line = 0; line < end;) {
        uint32_t eq = line, eol = line;
        while (eol < end && buf[eol] != '\n') {
            eol++;
        }
        if (eol == end) {
            return PCTL_E_CONFIG; /* every line ends with '\n' */
        }
        while (eq < eol && buf[eq] != '=') {
            eq++;
        }
        if (eq < eol && key_is(buf + line, eq - line, "seed")) {
            /* seed=<decimal u64>: 1 to 20 digits, no sign, no overflow. */
            uint32_t vlen = eol - eq - 1;
            if (have_seed || vlen < 1 || vlen > 20) {
                return PCTL_E_CONFIG;
            }
            for (uint32_t i = eq + 1; i < eol; i++) {
                uint32_t d = (uint32_t)buf[i] - '0';
                if (d > 9 || s > (UINT64_MAX - d) / 10) {
                    return PCTL_E_CONFIG;
                }
                s = s * 10 + d;
            }
            have_seed = 1;
        } else {
            return PCTL_E_CONFIG; /* unknown key, or no '=' */
        }
        line = eol + 1;
    }
    seed = s;
    return 0;
}

/*
 * Spec 2.3: the key is buf[0, key_len). Must not write to the buffer. Check
 * the arguments: never read past the key or the buffer.
 */
PCTL_EXPORT("pctl_partition")
int32_t pctl_partition(int32_t key_len, int32_t n) {
    if (n < 1 || key_len < 0 || key_len > PCTL_MAX_KEY || (uint32_t)key_len > buf_size) {
        return PCTL_E_INVALID;
    }
    return partition_of(buf, (uint32_t)key_len, n);
}

/*
 * Spec 2.4: buf holds count u32 lengths, then the keys' bytes. Result i
 * overwrites len[i], after len[i] was read; keys are found by the running sum
 * of lengths. Results must equal pctl_partition's, key by key.
 */
PCTL_EXPORT("pctl_partition_batch")
int32_t pctl_partition_batch(int32_t count, int32_t n) {
    if (n < 1 || count < 1 || (uint32_t)count > buf_size / 4) {
        return PCTL_E_INVALID;
    }
    uint32_t off = 4 * (uint32_t)count; /* where the next key starts */
    for (uint32_t i = 0; i < (uint32_t)count; i++) {
        uint32_t len = pctl_load_u32(buf + 4 * i);
        if (len > PCTL_MAX_KEY || len > buf_size - off) {
            return PCTL_E_INVALID;
        }
        pctl_store_u32(buf + 4 * i, (uint32_t)partition_of(buf + off, len, n));
        off += len;
    }
    return 0;
}

/* Spec 2.6: the same JSON document on every call. */
PCTL_EXPORT("pctl_metadata")
int64_t pctl_metadata(void) {
    return PCTL_METADATA_RESULT(metadata);
}

/*
 * Spec 2.7, optional: which partitions of from_n can a key of partition
 * `child` of to_n come from? For h mod n there is an exact answer when to_n
 * is a multiple of from_n (h mod from_n = (h mod to_n) mod from_n): one
 * parent. Otherwise decline, and hosts compute ancestry per key. Delete this
 * export, and "ancestry" from the metadata, if your function has no such rule.
 */
PCTL_EXPORT("pctl_ancestry")
int32_t pctl_ancestry(int32_t from_n, int32_t to_n, int32_t child) {
    if (from_n < 1 || to_n < 1 || child < 0 || child >= to_n) {
        return PCTL_E_INVALID;
    }
    if (to_n % from_n != 0) {
        return PCTL_E_UNSUPPORTED;
    }
    uint32_t parent = (uint32_t)child % (uint32_t)from_n;
    pctl_store_u32(buf, parent);         /* lo */
    pctl_store_u32(buf + 4, parent + 1); /* hi, exclusive */
    return 1;
}
