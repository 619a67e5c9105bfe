package dev.pctl.runtime;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.TreeMap;
import java.util.regex.Pattern;

/**
 * The canonical config bytes of spec/abi-v1.md §2.5, from {@code --config K=V} flags: one line
 * {@code K=V\n} per pair, sorted by K (bytewise), each K at most once, K matching
 * {@code [A-Za-z0-9_.-]+}, V any UTF-8 without a newline; no pairs give zero bytes. The same
 * flags in any order give the same bytes (as the Go side's {@code partitioner.EncodeConfig}).
 */
public final class Config {
    private static final Pattern KEY = Pattern.compile("[A-Za-z0-9_.-]+");

    private Config() {}

    /** A flag value that breaks the rules above; the message says which rule. */
    public static final class BadConfigException extends Exception {
        private static final long serialVersionUID = 1L;

        BadConfigException(String msg) {
            super("bad partitioner config: " + msg);
        }
    }

    /** Encodes raw flag values (the bytes after {@code --config}), e.g. {@code "a=1"}. */
    public static byte[] encode(List<byte[]> pairs) throws BadConfigException {
        TreeMap<String, byte[]> seen = new TreeMap<>(); // keys are ASCII: String order is byte order
        for (byte[] p : pairs) {
            int eq = indexOf(p, (byte) '=');
            if (eq < 0) {
                throw new BadConfigException(quote(p) + " has no '='; write KEY=VALUE");
            }
            String k = new String(p, 0, eq, StandardCharsets.ISO_8859_1);
            byte[] v = java.util.Arrays.copyOfRange(p, eq + 1, p.length);
            if (!KEY.matcher(k).matches()) {
                throw new BadConfigException("key " + quote(java.util.Arrays.copyOf(p, eq)) + " must match [A-Za-z0-9_.-]+");
            }
            if (indexOf(v, (byte) '\n') >= 0 || !validUtf8(v)) {
                throw new BadConfigException("value of \"" + k + "\" must be UTF-8 without newlines");
            }
            byte[] prev = seen.put(k, v);
            if (prev != null) {
                throw new BadConfigException("key \"" + k + "\" given twice (" + quote(prev) + " and " + quote(v) + ")");
            }
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (var e : seen.entrySet()) {
            byte[] k = e.getKey().getBytes(StandardCharsets.ISO_8859_1);
            out.write(k, 0, k.length);
            out.write('=');
            out.write(e.getValue(), 0, e.getValue().length);
            out.write('\n');
        }
        return out.toByteArray();
    }

    /** Encodes flag values given as Java strings (UTF-8). */
    public static byte[] encodeStrings(List<String> pairs) throws BadConfigException {
        List<byte[]> raw = new java.util.ArrayList<>();
        for (String s : pairs) {
            raw.add(s.getBytes(StandardCharsets.UTF_8));
        }
        return encode(raw);
    }

    /** Encodes a map of pairs (any order), e.g. {@code Map.of("seed", "42")}. */
    public static byte[] encode(java.util.Map<String, String> pairs) throws BadConfigException {
        List<String> l = new java.util.ArrayList<>();
        for (var e : pairs.entrySet()) {
            if (!KEY.matcher(e.getKey()).matches()) {
                throw new BadConfigException("key \"" + e.getKey() + "\" must match [A-Za-z0-9_.-]+");
            }
            l.add(e.getKey() + "=" + e.getValue());
        }
        return encodeStrings(l);
    }

    private static int indexOf(byte[] b, byte x) {
        for (int i = 0; i < b.length; i++) {
            if (b[i] == x) {
                return i;
            }
        }
        return -1;
    }

    public static boolean validUtf8(byte[] b) {
        try {
            StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(b));
            return true;
        } catch (CharacterCodingException e) {
            return false;
        }
    }

    private static String quote(byte[] b) {
        StringBuilder sb = new StringBuilder("\"");
        for (byte x : b) {
            int c = x & 0xff;
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                sb.append((char) c);
            } else if (c == '\n') {
                sb.append("\\n");
            } else {
                sb.append(String.format("\\x%02x", c));
            }
        }
        return sb.append('"').toString();
    }
}
