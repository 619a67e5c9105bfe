/*
 * Writes spec/vectors/librdkafka-consistent.json and librdkafka-fnv1a.json by calling the
 * real librdkafka partitioners (public API, rdkafka.h):
 *   rd_kafka_msg_partitioner_consistent  -> rd_crc32(key, keylen) % partition_cnt
 *   rd_kafka_msg_partitioner_fnv1a       -> rd_fnv1a(key, keylen) % partition_cnt
 * Neither reads rkt or the opaques (only the *_random variants do), so NULL is passed.
 * The key pointer is never NULL, also for the empty key: keyless records are not keys.
 *
 * Usage: librdkafka_vectors KEYS_TXT OUT_DIR DATE
 * Build: cc -O2 -o librdkafka_vectors librdkafka_vectors.c $(pkg-config --cflags --libs rdkafka)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

typedef int32_t (*partitioner_fn)(const rd_kafka_topic_t *, const void *, size_t, int32_t,
                                  void *, void *);

static void die(const char *msg, const char *arg) {
        fprintf(stderr, "librdkafka_vectors: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
        exit(1);
}

static int hexval(int c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
}

/* Runs one partitioner over every case of KEYS_TXT and writes its vector file. */
static void generate(const char *keys_path, const char *out_path, const char *name,
                     partitioner_fn fn, const char *fn_name, const char *date) {
        FILE *in = fopen(keys_path, "r");
        if (!in) die(strerror(errno), keys_path);
        FILE *out = fopen(out_path, "w");
        if (!out) die(strerror(errno), out_path);

        fprintf(out,
                "{\"partitioner\":\"%s\",\"source\":\"librdkafka %s (%s, Debian librdkafka-dev) "
                "via tools/crosscheck/librdkafka (generated %s)\",\n \"cases\":[\n",
                name, rd_kafka_version_str(), fn_name, date);

        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        unsigned char *key = NULL;
        size_t keycap = 0;
        long ncases = 0;
        while ((len = getline(&line, &cap, in)) != -1) {
                if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
                if (len == 0 || line[0] == '#') continue;
                char *sp = strchr(line, ' ');
                if (!sp || sp[1] != 'x') die("bad line", line);
                *sp = '\0';
                const char *hex = sp + 2;
                size_t hexlen = strlen(hex);
                if (hexlen % 2) die("odd hex", hex);
                size_t keylen = hexlen / 2;
                if (keylen + 1 > keycap) {
                        keycap = keylen + 1;
                        key = realloc(key, keycap);
                        if (!key) die("out of memory", NULL);
                }
                for (size_t i = 0; i < keylen; i++) {
                        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
                        if (hi < 0 || lo < 0) die("bad hex", hex);
                        key[i] = (unsigned char)(hi << 4 | lo);
                }
                for (char *tok = strtok(line, ","); tok; tok = strtok(NULL, ",")) {
                        long n = strtol(tok, NULL, 10);
                        if (n < 1 || n > INT32_MAX) die("bad partition count", tok);
                        int32_t p = fn(NULL, key, keylen, (int32_t)n, NULL, NULL);
                        fprintf(out, "%s  {\"key_hex\":\"%s\",\"n\":%ld,\"partition\":%d}",
                                ncases ? ",\n" : "", hex, n, (int)p);
                        ncases++;
                }
        }
        fprintf(out, "\n ]}\n");
        if (fclose(out) != 0) die(strerror(errno), out_path);
        fclose(in);
        free(line);
        free(key);
        fprintf(stderr, "librdkafka_vectors: %ld cases -> %s\n", ncases, out_path);
}

int main(int argc, char **argv) {
        if (argc != 4) {
                fprintf(stderr, "usage: %s KEYS_TXT OUT_DIR DATE\n", argv[0]);
                return 2;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/librdkafka-consistent.json", argv[2]);
        generate(argv[1], path, "librdkafka-consistent", rd_kafka_msg_partitioner_consistent,
                 "rd_kafka_msg_partitioner_consistent", argv[3]);
        snprintf(path, sizeof path, "%s/librdkafka-fnv1a.json", argv[2]);
        generate(argv[1], path, "librdkafka-fnv1a", rd_kafka_msg_partitioner_fnv1a,
                 "rd_kafka_msg_partitioner_fnv1a", argv[3]);
        return 0;
}
