/*
 * librdkafka-consistent - librdkafka's `consistent` partitioner:
 * crc32(key) % n, with zlib's CRC-32 (spec/builtins.md).
 */
#include "builtin.h"

/*
 * CRC-32 table (reflected polynomial 0xEDB88320), filled on first use. It is
 * a cache of constants: no result depends on when it was filled.
 */
static uint32_t crc_table[256];
static int crc_table_ready;

static void crc_table_fill(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++) {
            c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
        }
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

static uint32_t crc32(const uint8_t *data, uint32_t len) {
    if (!crc_table_ready) {
        crc_table_fill();
    }
    uint32_t c = 0xFFFFFFFFu;
    for (uint32_t i = 0; i < len; i++) {
        c = crc_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    return crc32(key, len) % n;
}

BUILTIN_METADATA("{\"name\":\"librdkafka-consistent\",\"version\":\"1.0.0\","
                 "\"description\":\"librdkafka consistent partitioner: crc32(key) % n\","
                 "\"properties\":[\"compatible:librdkafka-consistent\"]}")
