package dev.pctl.internal;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A strict, small JSON reader and writer (RFC 8259) for plugin metadata, broker API bodies and
 * the test vectors. Internal to pctl: not part of the SDK's API. Objects
 * become {@code Map<String,Object>} (a repeated key keeps its last value and position, as
 * for Go's encoding/json the last one wins), arrays {@code List<Object>}, strings {@code String}, numbers
 * {@code Double} or, when integral and in range, {@code Long}, and true/false/null their Java
 * values. A dependency-free reader keeps the host's start-up short.
 */
public final class Json {
    private final String s;
    private int pos;

    private Json(String s) {
        this.s = s;
    }

    /** Malformed JSON; the message says what and at which offset. */
    public static final class JsonException extends Exception {
        private static final long serialVersionUID = 1L;

        JsonException(String msg) {
            super(msg);
        }
    }

    /** Parses one JSON value (with optional surrounding white space) and nothing else. */
    public static Object parse(String text) throws JsonException {
        Json j = new Json(text);
        j.ws();
        Object v = j.value(0);
        j.ws();
        if (j.pos != j.s.length()) {
            throw j.err("unexpected text after the value");
        }
        return v;
    }

    /** Appends s as a JSON string, quoted and escaped (non-ASCII characters are kept as they are). */
    public static StringBuilder quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                default:
                    if (c < 0x20 || c == 0x2028 || c == 0x2029) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        return sb.append('"');
    }

    /** Returns s as a JSON string. */
    public static String quote(String s) {
        return quote(new StringBuilder(s.length() + 2), s).toString();
    }

    /**
     * Writes a value made of {@code Map<String, ?>} (in its iteration order), {@code List<?>},
     * {@code String}, {@code Number}, {@code Boolean} and null.
     */
    public static String write(Object v) {
        StringBuilder sb = new StringBuilder();
        write(sb, v);
        return sb.toString();
    }

    private static void write(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String) {
            quote(sb, (String) v);
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                quote(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof List) {
            sb.append('[');
            boolean first = true;
            for (Object o : (List<?>) v) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                write(sb, o);
            }
            sb.append(']');
        } else {
            throw new IllegalArgumentException("cannot write " + v.getClass().getName() + " as JSON");
        }
    }

    private JsonException err(String msg) {
        return new JsonException(msg + " at offset " + pos);
    }

    private void ws() {
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private Object value(int depth) throws JsonException {
        if (depth > 1000) {
            throw err("nested too deeply");
        }
        if (pos >= s.length()) {
            throw err("unexpected end");
        }
        char c = s.charAt(pos);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw err("unexpected character '" + c + "'");
        }
    }

    private Object literal(String word, Object v) throws JsonException {
        if (!s.startsWith(word, pos)) {
            throw err("invalid literal");
        }
        pos += word.length();
        return v;
    }

    private Map<String, Object> object(int depth) throws JsonException {
        Map<String, Object> m = new LinkedHashMap<>();
        pos++;
        ws();
        if (pos < s.length() && s.charAt(pos) == '}') {
            pos++;
            return m;
        }
        while (true) {
            ws();
            if (pos >= s.length() || s.charAt(pos) != '"') {
                throw err("expected a string key");
            }
            String k = string();
            ws();
            expect(':');
            ws();
            Object v = value(depth + 1);
            m.remove(k); // a repeated key counts where it last appears
            m.put(k, v);
            ws();
            if (pos < s.length() && s.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect('}');
            return m;
        }
    }

    private List<Object> array(int depth) throws JsonException {
        List<Object> a = new ArrayList<>();
        pos++;
        ws();
        if (pos < s.length() && s.charAt(pos) == ']') {
            pos++;
            return a;
        }
        while (true) {
            ws();
            a.add(value(depth + 1));
            ws();
            if (pos < s.length() && s.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect(']');
            return a;
        }
    }

    private void expect(char c) throws JsonException {
        if (pos >= s.length() || s.charAt(pos) != c) {
            throw err("expected '" + c + "'");
        }
        pos++;
    }

    private String string() throws JsonException {
        pos++; // opening quote
        StringBuilder sb = new StringBuilder();
        while (true) {
            if (pos >= s.length()) {
                throw err("unterminated string");
            }
            char c = s.charAt(pos++);
            if (c == '"') {
                return sb.toString();
            }
            if (c < 0x20) {
                throw err("control character in string");
            }
            if (c != '\\') {
                sb.append(c);
                continue;
            }
            if (pos >= s.length()) {
                throw err("unterminated escape");
            }
            char e = s.charAt(pos++);
            switch (e) {
                case '"':
                case '\\':
                case '/':
                    sb.append(e);
                    break;
                case 'b':
                    sb.append('\b');
                    break;
                case 'f':
                    sb.append('\f');
                    break;
                case 'n':
                    sb.append('\n');
                    break;
                case 'r':
                    sb.append('\r');
                    break;
                case 't':
                    sb.append('\t');
                    break;
                case 'u':
                    if (pos + 4 > s.length()) {
                        throw err("short \\u escape");
                    }
                    try {
                        sb.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                    } catch (NumberFormatException ex) {
                        throw err("bad \\u escape");
                    }
                    pos += 4;
                    break;
                default:
                    throw err("bad escape \\" + e);
            }
        }
    }

    private Object number() throws JsonException {
        int start = pos;
        if (s.charAt(pos) == '-') {
            pos++;
        }
        if (pos >= s.length()) {
            throw err("bad number");
        }
        if (s.charAt(pos) == '0') {
            pos++;
        } else if (s.charAt(pos) >= '1' && s.charAt(pos) <= '9') {
            while (pos < s.length() && Character.isDigit(s.charAt(pos))) {
                pos++;
            }
        } else {
            throw err("bad number");
        }
        boolean integral = true;
        if (pos < s.length() && s.charAt(pos) == '.') {
            integral = false;
            pos++;
            int d = pos;
            while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
                pos++;
            }
            if (d == pos) {
                throw err("bad fraction");
            }
        }
        if (pos < s.length() && (s.charAt(pos) == 'e' || s.charAt(pos) == 'E')) {
            integral = false;
            pos++;
            if (pos < s.length() && (s.charAt(pos) == '+' || s.charAt(pos) == '-')) {
                pos++;
            }
            int d = pos;
            while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
                pos++;
            }
            if (d == pos) {
                throw err("bad exponent");
            }
        }
        String t = s.substring(start, pos);
        if (integral) {
            try {
                return Long.parseLong(t);
            } catch (NumberFormatException e) {
                // too large for a long: fall through to double
            }
        }
        return Double.parseDouble(t);
    }
}
