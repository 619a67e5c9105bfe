/*
 * librdkafka-consistent - librdkafka's `consistent` partitioner:
 * crc32(key) % n, with zlib's CRC-32 (spec/builtins.md).
 */
#include "builtin.h"

/*
 * CRC-32 tables for slicing-by-8 (reflected polynomial 0xEDB88320), filled on
 * first use. They are a cache of constants: no result depends on when they
 * were filled. crc_tables[0] is the classic byte table; crc_tables[k][i] is
 * the CRC of byte i followed by k zero bytes, so eight bytes are folded with
 * eight independent lookups instead of a chain of eight.
 */
static uint32_t crc_tables[8][256];
static int crc_tables_ready;

static void crc_tables_fill(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++) {
            c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
        }
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int k = 1; k < 8; k++) {
            uint32_t prev = crc_tables[k - 1][i];
            crc_tables[k][i] = (prev >> 8) ^ crc_tables[0][prev & 0xFF];
        }
    }
    crc_tables_ready = 1;
}

static uint32_t crc32(const uint8_t *data, uint32_t len) {
    if (!crc_tables_ready) {
        crc_tables_fill();
    }
    uint32_t c = 0xFFFFFFFFu;
    while (len >= 8) {
        uint32_t one = pctl_load_u32(data) ^ c;
        uint32_t two = pctl_load_u32(data + 4);
        c = crc_tables[7][one & 0xFF] ^ crc_tables[6][(one >> 8) & 0xFF] ^
            crc_tables[5][(one >> 16) & 0xFF] ^ crc_tables[4][one >> 24] ^
            crc_tables[3][two & 0xFF] ^ crc_tables[2][(two >> 8) & 0xFF] ^
            crc_tables[1][(two >> 16) & 0xFF] ^ crc_tables[0][two >> 24];
        data += 8;
        len -= 8;
    }
    while (len--) {
        c = crc_tables[0][(c ^ *data++) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t partition_of(const uint8_t *key, uint32_t len, uint32_t n) {
    return crc32(key, len) % n;
}

BUILTIN_METADATA("{\"name\":\"librdkafka-consistent\",\"version\":\"1.0.0\","
                 "\"description\":\"librdkafka consistent partitioner: crc32(key) % n\","
                 "\"properties\":[\"compatible:librdkafka-consistent\"]}")
