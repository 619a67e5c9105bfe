/*
 * builtin.h - what the six built-in modules share: the buffer, the required
 * exports and the batch call. Each <name>.c includes it, then defines
 * partition_of() (the function of spec/builtins.md) and its metadata.
 *
 * The built-ins are `portable` modules (spec/abi-v1.md section 6.1): no
 * imports, no libc, no state that a result could depend on. Build flags are
 * in ../../Makefile.
 */
#ifndef PCTL_BUILTIN_H
#define PCTL_BUILTIN_H

#include "pctl_abi.h"

/* The buffer (spec 2.2). Zero-initialised, so it costs no module bytes. */
static uint8_t buf[PCTL_MAX_BUFFER] __attribute__((aligned(16)));

/* The size the host asked for; 0 until pctl_key_buffer. Only bounds checks
 * read it. */
static uint32_t buf_size;

/* The partition of key[0, len) among n partitions, 1 <= n <= 2^31-1. */
static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n);

PCTL_EXPORT_ABI_VERSION

PCTL_EXPORT("pctl_key_buffer")
int32_t pctl_key_buffer(int32_t size) {
    if (size < 1 || size > PCTL_MAX_BUFFER) {
        return 0;
    }
    buf_size = (uint32_t)size;
    return (int32_t)(uintptr_t)buf;
}

PCTL_EXPORT("pctl_partition")
int32_t pctl_partition(int32_t key_len, int32_t n) {
    if (n < 1 || key_len < 0 || key_len > PCTL_MAX_KEY || (uint32_t)key_len > buf_size) {
        return PCTL_E_INVALID;
    }
    return (int32_t)partition_of(buf, (uint32_t)key_len, (uint32_t)n);
}

PCTL_EXPORT("pctl_partition_batch")
int32_t pctl_partition_batch(int32_t count, int32_t n) {
    if (n < 1 || count < 1 || (uint32_t)count > buf_size / 4) {
        return PCTL_E_INVALID;
    }
    uint32_t off = 4 * (uint32_t)count; /* start of the next key */
    for (uint32_t i = 0; i < (uint32_t)count; i++) {
        uint32_t len = pctl_load_u32(buf + 4 * i);
        if (len > PCTL_MAX_KEY || len > buf_size - off) {
            return PCTL_E_INVALID;
        }
        pctl_store_u32(buf + 4 * i, partition_of(buf + off, len, (uint32_t)n));
        off += len;
    }
    return 0;
}

/* Defines pctl_metadata returning the string literal `json`. */
#define BUILTIN_METADATA(json)                                          \
    static const char metadata[] = json;                                \
    PCTL_EXPORT("pctl_metadata") int64_t pctl_metadata(void) {          \
        return PCTL_METADATA_RESULT(metadata);                          \
    }

#endif /* PCTL_BUILTIN_H */
