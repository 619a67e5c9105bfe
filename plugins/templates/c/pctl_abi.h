/*
 * pctl_abi.h - the pctl partitioner ABI, version 1, for C module authors.
 *
 * This header restates spec/abi-v1.md (normative) as C: its constants, its
 * error codes and the signatures of the exports a host looks for. Where this
 * file and the spec disagree, the spec wins and this file is a bug.
 *
 * It needs nothing but clang targeting wasm32 (it includes only the compiler's
 * own <stdint.h>), so it works with -ffreestanding -nostdlib:
 *
 *     clang --target=wasm32 -std=c99 -O2 -ffreestanding -fno-builtin -nostdlib \
 *           -I plugins/include -Wl,--no-entry -o my.wasm my.c
 *
 * A module of the `portable` profile (spec section 6.1) has no imports at all.
 * Check yours with `wasm-objdump -x -j Import my.wasm`: the section must be
 * absent. A call clang turns into memcpy/memset (struct copies, loops that look
 * like them) would become an import of `env.memcpy`; -fno-builtin and plain
 * byte loops avoid it.
 *
 * Minimal module:
 *
 *     #include "pctl_abi.h"
 *
 *     static uint8_t buf[PCTL_MAX_BUFFER];
 *
 *     PCTL_EXPORT_ABI_VERSION
 *
 *     PCTL_EXPORT("pctl_key_buffer")
 *     int32_t pctl_key_buffer(int32_t size) {
 *         return (size > 0 && size <= PCTL_MAX_BUFFER) ? (int32_t)(uintptr_t)buf : 0;
 *     }
 *
 *     PCTL_EXPORT("pctl_partition")
 *     int32_t pctl_partition(int32_t key_len, int32_t n) {
 *         if (n < 1 || key_len < 0 || key_len > PCTL_MAX_KEY) return PCTL_E_INVALID;
 *         return (int32_t)((uint32_t)key_len % (uint32_t)n);
 *     }
 *
 * The memory export is named `memory` by wasm-ld's default; nothing to do.
 */
#ifndef PCTL_ABI_H
#define PCTL_ABI_H

/* clang's own <stdint.h> is freestanding: no libc or sysroot needed. */
#include <stdint.h>

/* ---- Constants (spec section 1.3) ------------------------------------- */

/* The value pctl_abi_version returns. */
#define PCTL_ABI_VERSION 1
/* Longest key, in bytes. Hosts never pass a longer one. */
#define PCTL_MAX_KEY 65536
/* Longest config, in bytes. */
#define PCTL_MAX_CONFIG 65536
/* Smallest buffer size a host asks pctl_key_buffer for. */
#define PCTL_MIN_BUFFER 65536
/* Largest buffer size a host asks for; a module MUST be able to provide it. */
#define PCTL_MAX_BUFFER 1048576
/* Longest metadata document, in bytes. */
#define PCTL_MAX_METADATA 65536
/* Largest partition count n. */
#define PCTL_MAX_PARTITIONS 2147483647
/* Most ranges pctl_ancestry returns, whatever the buffer size (spec 2.7). */
#define PCTL_MAX_RANGES 8192

/* ---- Error codes (spec section 5) -------------------------------------- */
/* Negative results of pctl_partition, batch slots and the optional calls.  */

/* An argument is out of range (n < 1, child >= to_n, bad lengths). */
#define PCTL_E_INVALID (-1)
/* pctl_configure rejected the config; the host fails instance creation. */
#define PCTL_E_CONFIG (-2)
/* The optional operation is not supported for these arguments. */
#define PCTL_E_UNSUPPORTED (-3)
/* The result does not fit in the buffer. */
#define PCTL_E_BUFFER (-4)
/* The module failed for another reason. */
#define PCTL_E_INTERNAL (-5)

/* ---- Metadata properties (spec section 2.6) ---------------------------- */

/* The module exports pctl_ancestry and declares its parents with it. */
#define PCTL_PROP_ANCESTRY "ancestry"
/* Prefix of "compatible:<builtin>" (spec/builtins.md names the built-ins). */
#define PCTL_PROP_COMPATIBLE "compatible:"

/* ---- Exports ----------------------------------------------------------- */

/*
 * PCTL_EXPORT("name") exports the function that follows under `name`, the way
 * hosts look it up. It does not need --export-dynamic and it keeps the
 * function even if nothing in the module calls it.
 */
#define PCTL_EXPORT(name) __attribute__((export_name(name), visibility("default"), used))

/*
 * The prototypes below fix each export's C signature; wasm32 lowers int32_t
 * to i32 and int64_t to i64, which is what the spec's tables say. Define the
 * function with PCTL_EXPORT("<same name>") in front of it.
 */

/* Required. Returns PCTL_ABI_VERSION; no side effects (spec 2.1). */
int32_t pctl_abi_version(void);

/*
 * Required. Returns the address of a region of `size` bytes of memory that
 * stays the host's for the life of the instance (the buffer), or 0. The host
 * calls it once, with PCTL_MIN_BUFFER <= size <= PCTL_MAX_BUFFER, before any
 * other call except pctl_metadata (spec 2.2). A static
 * `uint8_t buf[PCTL_MAX_BUFFER]` costs no module bytes.
 */
int32_t pctl_key_buffer(int32_t size);

/*
 * Required. The key is buffer[0, key_len); returns a partition in [0, n) or
 * a negative PCTL_E_* code. Must not modify the buffer (spec 2.3).
 */
int32_t pctl_partition(int32_t key_len, int32_t n);

/*
 * Optional. Many keys in one call (spec 2.4). On entry the buffer holds
 *     offset 0:       count little-endian u32 key lengths
 *     offset 4*count: the keys' bytes, concatenated
 * Write result i (an i32, LE) over len[i] after reading len[i]; return 0, or a
 * negative code if the batch as a whole failed. Results must equal what
 * pctl_partition returns for each key.
 */
int32_t pctl_partition_batch(int32_t count, int32_t n);

/*
 * Optional. The config is buffer[0, config_len); copy what you need and
 * return 0, or PCTL_E_CONFIG to reject it (spec 2.5). Without this export the
 * module takes no config and hosts refuse a non-empty one.
 */
int32_t pctl_configure(int32_t config_len);

/*
 * Optional. Returns (ptr << 32) | len of a UTF-8 JSON document, the same on
 * every call (spec 2.6); use PCTL_METADATA_RESULT.
 */
int64_t pctl_metadata(void);

/*
 * Optional. Declared split ancestry (spec 2.7): writes `count` sorted,
 * disjoint, non-empty [lo, hi) ranges of u32 pairs to buffer[8*i, 8*i+8),
 * covering every parent of `child` when the partition count changes from
 * from_n to to_n; returns count, or PCTL_E_UNSUPPORTED, PCTL_E_INVALID,
 * PCTL_E_BUFFER. Declare the "ancestry" property in the metadata too.
 */
int32_t pctl_ancestry(int32_t from_n, int32_t to_n, int32_t child);

/* ---- Helpers ----------------------------------------------------------- */

/* Exports pctl_abi_version returning PCTL_ABI_VERSION. */
#define PCTL_EXPORT_ABI_VERSION \
    PCTL_EXPORT("pctl_abi_version") int32_t pctl_abi_version(void) { return PCTL_ABI_VERSION; }

/*
 * The pctl_metadata result for a string literal or a char array holding the
 * JSON document (its terminating NUL is not part of it).
 */
#define PCTL_METADATA_RESULT(json) \
    ((int64_t)(((uint64_t)(uintptr_t)(json) << 32) | (uint64_t)(sizeof(json) - 1)))

/* Little-endian u32 load and store, byte by byte (any alignment). */
static inline uint32_t pctl_load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void pctl_store_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

#endif /* PCTL_ABI_H */
