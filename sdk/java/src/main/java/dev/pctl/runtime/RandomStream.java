package dev.pctl.runtime;

/**
 * The random stream of the wasi-deterministic profile (spec/abi-v1.md §6.2): SplitMix64 from a
 * given state (0 for the spec's stream), each output's 8 bytes little-endian, read as one
 * continuous byte stream (a read may end inside an output; the next read continues there).
 * One per instance; not thread-safe.
 */
final class RandomStream {
    private long state;
    private long current; // the output being read
    private int left; // bytes of current not yet read

    RandomStream(long seed) {
        this.state = seed;
    }

    /** The next SplitMix64 output. */
    long nextOutput() {
        state += 0x9E3779B97F4A7C15L;
        long z = state;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Fills dst[off, off+len) with the next len bytes of the stream. */
    void read(byte[] dst, int off, int len) {
        for (int i = off; i < off + len; i++) {
            if (left == 0) {
                current = nextOutput();
                left = 8;
            }
            dst[i] = (byte) (current >>> (8 * (8 - left)));
            left--;
        }
    }
}
