package dev.pctl;

import dev.pctl.runtime.Plugin;
import java.util.HashMap;
import java.util.Map;
import java.util.zip.CRC32;

/**
 * The native fast path (spec/builtins.md, "The native fast path"): Java implementations of the
 * built-in partitioners, written from spec/builtins.md, used instead of a topic's module only
 * when the client was built with {@link ClientOptions.Builder#nativeBuiltins(boolean)} and the
 * epoch's module has exactly the digest of a built-in module embedded in this library, without
 * config. The module stays the reference: NativeBuiltinsTest pins every function here to it
 * (random keys, both entry points) and to spec/vectors; any other digest (an upload claiming
 * {@code compatible:<builtin>} included) runs as a module.
 */
final class NativeBuiltins {
    private NativeBuiltins() {}

    /** A built-in's partition function, for {@code 1 <= n <= 2^31-1}. */
    interface Fn {
        int partition(byte[] key, int n);
    }

    /** Kafka's murmur2 of the key (as {@code Utils.murmur2}). */
    static int murmur2(byte[] k) {
        final int m = 0x5bd1e995;
        int h = 0x9747b28c ^ k.length;
        int i = 0;
        for (; i + 4 <= k.length; i += 4) {
            int x = (k[i] & 0xff) | (k[i + 1] & 0xff) << 8 | (k[i + 2] & 0xff) << 16 | (k[i + 3] & 0xff) << 24;
            x *= m;
            x ^= x >>> 24;
            x *= m;
            h *= m;
            h ^= x;
        }
        switch (k.length & 3) {
            case 3:
                h ^= (k[i + 2] & 0xff) << 16;
                // fall through
            case 2:
                h ^= (k[i + 1] & 0xff) << 8;
                // fall through
            case 1:
                h ^= k[i] & 0xff;
                h *= m;
                break;
            default:
                break;
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }

    /** kafka-murmur2: {@code toPositive(murmur2(key)) % n} (x &amp; 0x7fffffff, not abs). */
    static int kafkaMurmur2(byte[] key, int n) {
        return (murmur2(key) & 0x7fffffff) % n;
    }

    /** linear-murmur2: h % 2b, minus b when that is &gt;= n (b = 2^floor(log2 n)). */
    static int linearMurmur2(byte[] key, int n) {
        long h = murmur2(key) & 0x7fffffff;
        long b = Integer.highestOneBit(n) & 0xffffffffL;
        long p = h % (2 * b);
        if (p >= n) {
            p -= b;
        }
        return (int) p;
    }

    /** librdkafka-consistent: CRC-32 (IEEE, as zlib) of the key, unsigned % n. */
    static int librdkafkaConsistent(byte[] key, int n) {
        // A CRC32 per call, on purpose: it never escapes, so the JIT's escape analysis removes the
        // allocation; a reused ThreadLocal<CRC32> (get + reset) measured 0.83x of this (5.8 against
        // 6.9 ns per 16-byte key, best of 15 interleaved rounds, 2 December 2026).
        CRC32 c = new CRC32();
        c.update(key, 0, key.length);
        return (int) (c.getValue() % n);
    }

    private static int fnv1a32(byte[] key) {
        int h = 0x811c9dc5;
        for (byte b : key) {
            h ^= b & 0xff;
            h *= 0x01000193;
        }
        return h;
    }

    /** librdkafka-fnv1a: abs(h) as u32 (abs(INT32_MIN) = 0x80000000), unsigned % n. */
    static int librdkafkaFnv1a(byte[] key, int n) {
        int h = fnv1a32(key);
        if (h < 0) {
            h = -h; // wraps for INT32_MIN: 0x80000000
        }
        return Integer.remainderUnsigned(h, n);
    }

    /** sarama-fnv1a: h % n truncating (Java's %), negated if negative. */
    static int saramaFnv1a(byte[] key, int n) {
        int p = fnv1a32(key) % n;
        return p < 0 ? -p : p;
    }

    private static final long P1 = 0x9E3779B185EBCA87L;
    private static final long P2 = 0xC2B2AE3D27D4EB4FL;
    private static final long P3 = 0x165667B19E3779F9L;
    private static final long P4 = 0x85EBCA77C2B2AE63L;
    private static final long P5 = 0x27D4EB2F165667C5L;

    private static long le64(byte[] b, int i) {
        return (b[i] & 0xffL) | (b[i + 1] & 0xffL) << 8 | (b[i + 2] & 0xffL) << 16 | (b[i + 3] & 0xffL) << 24
                | (b[i + 4] & 0xffL) << 32 | (b[i + 5] & 0xffL) << 40 | (b[i + 6] & 0xffL) << 48 | (b[i + 7] & 0xffL) << 56;
    }

    private static long le32(byte[] b, int i) {
        return (b[i] & 0xffL) | (b[i + 1] & 0xffL) << 8 | (b[i + 2] & 0xffL) << 16 | (b[i + 3] & 0xffL) << 24;
    }

    private static long round(long acc, long input) {
        return Long.rotateLeft(acc + input * P2, 31) * P1;
    }

    private static long merge(long acc, long val) {
        return (acc ^ round(0, val)) * P1 + P4;
    }

    /** XXH64 of the key with seed 0 (as Cyan4973/xxHash). */
    static long xxh64(byte[] b) {
        int len = b.length;
        int i = 0;
        long h;
        if (len >= 32) {
            long v1 = P1 + P2;
            long v2 = P2;
            long v3 = 0;
            long v4 = -P1;
            for (; i + 32 <= len; i += 32) {
                v1 = round(v1, le64(b, i));
                v2 = round(v2, le64(b, i + 8));
                v3 = round(v3, le64(b, i + 16));
                v4 = round(v4, le64(b, i + 24));
            }
            h = Long.rotateLeft(v1, 1) + Long.rotateLeft(v2, 7) + Long.rotateLeft(v3, 12) + Long.rotateLeft(v4, 18);
            h = merge(h, v1);
            h = merge(h, v2);
            h = merge(h, v3);
            h = merge(h, v4);
        } else {
            h = P5;
        }
        h += len;
        for (; i + 8 <= len; i += 8) {
            h ^= round(0, le64(b, i));
            h = Long.rotateLeft(h, 27) * P1 + P4;
        }
        if (i + 4 <= len) {
            h ^= le32(b, i) * P1;
            h = Long.rotateLeft(h, 23) * P2 + P3;
            i += 4;
        }
        for (; i < len; i++) {
            h ^= (b[i] & 0xffL) * P5;
            h = Long.rotateLeft(h, 11) * P1;
        }
        h ^= h >>> 33;
        h *= P2;
        h ^= h >>> 29;
        h *= P3;
        h ^= h >>> 32;
        return h;
    }

    /** jump: the paper's jump consistent hash over XXH64 (seed 0), its float expression in order. */
    static int jump(byte[] key, int n) {
        long k = xxh64(key);
        long b = -1;
        long j = 0;
        while (j < n) {
            b = j;
            k = k * 2862933555777941757L + 1;
            j = (long) ((double) (b + 1) * ((double) (1L << 31) / (double) ((k >>> 33) + 1)));
        }
        return (int) b;
    }

    /** The native functions by built-in name. */
    static final Map<String, Fn> FUNCS = Map.of(
            "jump", NativeBuiltins::jump,
            "kafka-murmur2", NativeBuiltins::kafkaMurmur2,
            "librdkafka-consistent", NativeBuiltins::librdkafkaConsistent,
            "librdkafka-fnv1a", NativeBuiltins::librdkafkaFnv1a,
            "linear-murmur2", NativeBuiltins::linearMurmur2,
            "sarama-fnv1a", NativeBuiltins::saramaFnv1a);

    private static volatile Map<String, String> digests;

    /** digest to built-in name, for the modules embedded in this library, computed once. */
    static Map<String, String> builtinDigests() {
        Map<String, String> d = digests;
        if (d == null) {
            d = new HashMap<>();
            for (String name : Partitioner.builtinNames()) {
                if (FUNCS.containsKey(name)) {
                    d.put(Plugin.sha256(Partitioner.builtinModule(name)), name);
                }
            }
            digests = d = Map.copyOf(d);
        }
        return d;
    }

    /**
     * The native partitioner for an epoch's module {@code digest} and {@code config}, or null: only
     * when the digest is exactly that of a built-in module embedded in this library and the config
     * is empty. {@code module} is the module's bytes (verified against the digest by the caller),
     * or null for the embedded copy; the Partitioner loads it (name, digest and metadata are the
     * module's) and partitions with the Java function.
     */
    static Partitioner nativeFor(String digest, byte[] config, byte[] module, Plugin.Options options) {
        if (config != null && config.length > 0) {
            return null;
        }
        String name = builtinDigests().get(digest);
        if (name == null) {
            return null;
        }
        byte[] bytes = module != null ? module : Partitioner.builtinModule(name);
        if (!Plugin.sha256(bytes).equals(digest)) {
            return null;
        }
        return Partitioner.withNative(bytes, "built-in " + name, options, FUNCS.get(name));
    }
}
