package dev.pctl.runtime;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Canonical config bytes of spec/abi-v1.md §2.5. */
class ConfigTest {
    private static String enc(String... pairs) throws Exception {
        return new String(Config.encodeStrings(List.of(pairs)), StandardCharsets.UTF_8);
    }

    @Test
    void canonicalForm() throws Exception {
        record Tc(String name, String[] in, String want) {}
        List<Tc> cases = List.of(
                new Tc("no pairs: zero bytes", new String[] {}, ""),
                new Tc("one pair", new String[] {"a=1"}, "a=1\n"),
                new Tc("sorted bytewise", new String[] {"b=2", "a=1", "B=3", "_=4", "a.b=5", "-=6"}, "-=6\nB=3\n_=4\na=1\na.b=5\nb=2\n"),
                new Tc("empty value", new String[] {"k="}, "k=\n"),
                new Tc("value may hold '=' and spaces", new String[] {"k=a=b c"}, "k=a=b c\n"),
                new Tc("UTF-8 value", new String[] {"k=é€𝄞"}, "k=é€𝄞\n"));
        for (Tc tc : cases) {
            assertEquals(tc.want(), enc(tc.in()), tc.name());
        }
        assertEquals(enc("x=1", "y=2"), enc("y=2", "x=1"), "the same flags in any order give the same bytes");
    }

    @Test
    void refusals() {
        record Tc(String name, byte[] pair) {}
        List<Tc> cases = List.of(
                new Tc("no '='", "abc".getBytes(StandardCharsets.UTF_8)),
                new Tc("empty key", "=1".getBytes(StandardCharsets.UTF_8)),
                new Tc("key outside [A-Za-z0-9_.-]", "a b=1".getBytes(StandardCharsets.UTF_8)),
                new Tc("non-ASCII key", "é=1".getBytes(StandardCharsets.UTF_8)),
                new Tc("newline in value", "a=1\n2".getBytes(StandardCharsets.UTF_8)),
                new Tc("invalid UTF-8 value", new byte[] {'a', '=', (byte) 0xff}),
                new Tc("UTF-8 surrogate in value", new byte[] {'a', '=', (byte) 0xed, (byte) 0xa0, (byte) 0x80}),
                new Tc("overlong UTF-8 in value", new byte[] {'a', '=', (byte) 0xc0, (byte) 0xaf}));
        for (Tc tc : cases) {
            assertThrows(Config.BadConfigException.class, () -> Config.encode(List.of(tc.pair())), tc.name());
        }
        assertThrows(Config.BadConfigException.class, () -> Config.encodeStrings(List.of("a=1", "a=1")), "a key given twice");
    }

    @Test
    void rawBytesPassUnchanged() throws Exception {
        byte[] v = {'k', '=', (byte) 0xc3, (byte) 0xa9};
        assertArrayEquals(new byte[] {'k', '=', (byte) 0xc3, (byte) 0xa9, '\n'}, Config.encode(List.of(v)));
    }
}
