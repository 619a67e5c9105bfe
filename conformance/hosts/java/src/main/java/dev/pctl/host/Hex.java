package dev.pctl.host;

/** Hexadecimal digits, either case. */
final class Hex {
    private Hex() {}

    /** The value of a hex digit, or -1. */
    static int digit(int c) {
        if (c >= '0' && c <= '9') {
            return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
            return c - 'a' + 10;
        }
        if (c >= 'A' && c <= 'F') {
            return c - 'A' + 10;
        }
        return -1;
    }

    /** Decodes b[off, off+len), or returns null if it is not an even number of hex digits. */
    static byte[] decode(byte[] b, int off, int len) {
        if (len % 2 != 0) {
            return null;
        }
        byte[] out = new byte[len / 2];
        for (int i = 0; i < out.length; i++) {
            int hi = digit(b[off + 2 * i]);
            int lo = digit(b[off + 2 * i + 1]);
            if (hi < 0 || lo < 0) {
                return null;
            }
            out[i] = (byte) (hi << 4 | lo);
        }
        return out;
    }

    static String encode(byte[] b) {
        StringBuilder sb = new StringBuilder(2 * b.length);
        for (byte x : b) {
            sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return sb.toString();
    }
}
