package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Parses a NATS header block ({@code NATS/1.0[ status]\r\n}, then {@code name: value\r\n}
 * lines, then {@code \r\n}) from its bytes, whatever they hold: names and values are decoded as
 * UTF-8 (a malformed byte becomes U+FFFD) and trimmed as NATS clients do; a line without a colon
 * is skipped. Internal.
 */
final class RecordHeaders {
    private RecordHeaders() {}

    /** Every (name, value) line, in order. */
    static List<String[]> parse(byte[] b) {
        List<String[]> out = new ArrayList<>();
        if (b == null) {
            return out;
        }
        int i = RawConn.indexOfCrlf(b, 0);
        if (i < 0) {
            return out;
        }
        i += 2;
        while (i < b.length) {
            int e = RawConn.indexOfCrlf(b, i);
            if (e < 0) {
                e = b.length;
            }
            if (e > i) {
                int colon = -1;
                for (int j = i; j < e; j++) {
                    if (b[j] == ':') {
                        colon = j;
                        break;
                    }
                }
                if (colon > i) {
                    String name = new String(b, i, colon - i, StandardCharsets.UTF_8).trim();
                    String value = new String(b, colon + 1, e - colon - 1, StandardCharsets.UTF_8).trim();
                    if (!name.isEmpty()) {
                        out.add(new String[] {name, value});
                    }
                }
            }
            i = e + 2;
        }
        return out;
    }

    /** The first value of the header {@code name} (exact name), or null. */
    static String first(byte[] b, String name) {
        if (b == null) {
            return null;
        }
        for (String[] kv : parse(b)) {
            if (kv[0].equals(name)) {
                return kv[1];
            }
        }
        return null;
    }
}
