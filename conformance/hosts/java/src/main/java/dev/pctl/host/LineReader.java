package dev.pctl.host;

import dev.pctl.runtime.Plugin;
import java.io.IOException;
import java.io.InputStream;

/**
 * Reads hex-encoded keys, one per line: an empty line is the empty key, a "\r" before the
 * "\n" is ignored, and the last line needs no "\n" (but a final "\n" does not start another
 * key). Keys are decoded as they are read, so a line is never held in memory as text.
 */
final class LineReader {
    /** A line that is not a key: not hex, odd length, or longer than PCTL_MAX_KEY bytes. */
    static final class LineException extends Exception {
        private static final long serialVersionUID = 1L;

        LineException(String msg) {
            super(msg);
        }
    }

    private final InputStream in;
    private final byte[] buf = new byte[1 << 18];
    private int pos;
    private int lim;
    private boolean eof;

    LineReader(InputStream in) {
        this.in = in;
    }

    private int read() throws IOException {
        if (pos == lim) {
            if (eof) {
                return -1;
            }
            int r = in.read(buf, 0, buf.length);
            if (r <= 0) {
                eof = true;
                return -1;
            }
            pos = 0;
            lim = r;
        }
        return buf[pos++] & 0xff;
    }

    /**
     * Decodes the next line into key (at least PCTL_MAX_KEY bytes long) and returns its length,
     * or -1 at the end of input.
     */
    int next(byte[] key) throws IOException, LineException {
        int c = read();
        if (c < 0) {
            return -1;
        }
        int len = 0;
        int hi = -1;
        long chars = 0;
        boolean cr = false;
        StringBuilder head = new StringBuilder();
        while (c >= 0 && c != '\n') {
            if (head.length() < 40) {
                head.append(c >= 0x20 && c < 0x7f ? (char) c : '?');
            }
            if (cr) {
                throw new LineException("\"" + head + "...\" is not hex (a \\r inside the line)");
            }
            if (c == '\r') {
                cr = true;
                c = read();
                continue;
            }
            int d = Hex.digit(c);
            if (d < 0) {
                long bad = chars + 1;
                for (c = read(); c >= 0 && c != '\n' && head.length() < 40; c = read()) {
                    head.append(c >= 0x20 && c < 0x7f ? (char) c : '?');
                }
                throw new LineException("\"" + head + (head.length() >= 40 ? "..." : "") + "\" is not hex: character " + bad + " is not a hex digit");
            }
            chars++;
            if (hi < 0) {
                hi = d;
            } else {
                if (len == Plugin.MAX_KEY) {
                    throw new LineException("key too long: more than " + Plugin.MAX_KEY + " bytes; keys are at most " + Plugin.MAX_KEY + " bytes (spec/abi-v1.md §1.1)");
                }
                key[len++] = (byte) (hi << 4 | d);
                hi = -1;
            }
            c = read();
        }
        if (hi >= 0) {
            throw new LineException("\"" + head + (chars >= 40 ? "..." : "") + "\" is not hex: odd number of digits");
        }
        return len;
    }
}
