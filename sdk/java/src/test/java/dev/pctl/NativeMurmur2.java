package dev.pctl;

/**
 * kafka-murmur2 in plain Java, from spec/builtins.md (Kafka's Utils.murmur2 and toPositive): the
 * baseline of the partitioning benchmark and a second reference in the tests.
 */
final class NativeMurmur2 {
    private NativeMurmur2() {}

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
        switch (k.length % 4) {
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
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }

    static int partition(byte[] key, int n) {
        return (murmur2(key) & 0x7fffffff) % n;
    }
}
