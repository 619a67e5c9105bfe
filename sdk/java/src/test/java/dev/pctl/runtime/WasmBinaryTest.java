package dev.pctl.runtime;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The structural reader (WasmBinary). */
class WasmBinaryTest {
    @Test
    void leb128() {
        record Tc(long v, boolean signed, String hex) {}
        for (Tc tc : List.of(new Tc(0, false, "00"), new Tc(127, false, "7f"), new Tc(128, false, "8001"), new Tc(624485, false, "e58e26"),
                new Tc(1000, true, "e807"), new Tc(63, true, "3f"), new Tc(64, true, "c000"), new Tc(-1, true, "7f"), new Tc(-65, true, "bf7f"))) {
            ByteArrayOutputStream o = new ByteArrayOutputStream();
            if (tc.signed()) {
                WasmBinary.sleb(o, tc.v());
            } else {
                WasmBinary.uleb(o, tc.v());
            }
            assertEquals(tc.hex(), TestSupport.hex(o.toByteArray()), tc.v() + (tc.signed() ? " signed" : ""));
        }
    }

    @Test
    void rewriteKeepsStartTablesGlobalsAndMultiValue() throws Exception {
        // rewrite.wasm: (3 * key_len + 5) % n through a start function, a table, a multi-value call
        Plugin p = TestSupport.load(TestSupport.resource("rewrite.wasm"), new Plugin.Options());
        int[] got = TestSupport.onBigStack(() -> TestSupport.partitions(p.open(new byte[0]), List.of(new byte[0], new byte[1], new byte[2]), 7, true));
        assertArrayEquals(new int[] {5, 1, 4}, got);
    }

    @Test
    void structure() throws Exception {
        WasmBinary bin = WasmBinary.parse(TestSupport.read(TestSupport.repo("runtime/testdata/hostile/rand-clock.wasm")));
        assertEquals(2, bin.importedFuncs);
        assertEquals("wasi_snapshot_preview1", bin.imports.get(0).module());
        assertEquals("clock_time_get", bin.imports.get(0).name());
        assertEquals("(i32, i64, i32) -> (i32)", bin.types.get(bin.imports.get(0).typeIndex()).toString());
        assertEquals(17, bin.memories.get(0).min());
        assertEquals(-1, bin.memories.get(0).max());
        assertEquals(WasmBinary.KIND_MEMORY, bin.export("memory").kind());
        assertEquals("(i32, i32) -> (i32)", bin.funcType(bin.export("pctl_partition").index()).toString());
    }

    @Test
    void malformed() {
        byte[] header = {0, 'a', 's', 'm', 1, 0, 0, 0};
        record Tc(String name, byte[] bytes, boolean unsupported) {}
        List<Tc> cases = List.of(
                new Tc("short", new byte[] {0, 'a', 's', 'm'}, false),
                new Tc("version 2 (a component)", new byte[] {0, 'a', 's', 'm', 0x0d, 0, 1, 0}, false),
                new Tc("section past the end", concat(header, new byte[] {1, 10, 0}), false),
                new Tc("sections out of order", concat(header, new byte[] {3, 1, 0, 1, 1, 0}), false),
                new Tc("unknown section", concat(header, new byte[] {14, 0}), false),
                new Tc("function and code counts differ", concat(header, new byte[] {1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0}), false),
                new Tc("GC struct type", concat(header, new byte[] {1, 3, 1, 0x5f, 0}), true),
                new Tc("typed reference param", concat(header, new byte[] {1, 5, 1, 0x60, 1, 0x64, 0x70}), true),
                new Tc("shared memory", concat(header, new byte[] {5, 4, 1, 3, 1, 1}), true),
                new Tc("memory64", concat(header, new byte[] {5, 3, 1, 4, 1}), true),
                new Tc("two memories", concat(header, new byte[] {5, 5, 2, 0, 1, 0, 1}), true),
                new Tc("tag section", concat(header, new byte[] {13, 1, 0}), true));
        for (Tc tc : cases) {
            WasmFormatException e = assertThrows(WasmFormatException.class, () -> WasmBinary.parse(tc.bytes()), tc.name());
            assertEquals(tc.unsupported(), e.unsupportedFeature, tc.name() + ": " + e.getMessage());
            assertTrue(e.getMessage().contains("at byte"), tc.name());
        }
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] out = new byte[a.length + b.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
