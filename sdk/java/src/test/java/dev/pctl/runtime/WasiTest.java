package dev.pctl.runtime;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.dylibso.chicory.runtime.ByteArrayMemory;
import com.dylibso.chicory.runtime.Memory;
import com.dylibso.chicory.wasm.types.MemoryLimits;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The deterministic WASI functions of spec/abi-v1.md §6.2, one by one, on a one-page memory. */
class WasiTest {
    private static final int END = 65536; // one page

    private static Memory mem() {
        Memory m = new ByteArrayMemory(new MemoryLimits(1, 1));
        m.fill((byte) 0xAA, 0, END); // so that "writes nothing" is visible
        return m;
    }

    private static void untouched(Memory m, String why) {
        byte[] all = m.readBytes(0, END);
        for (int i = 0; i < all.length; i++) {
            if (all[i] != (byte) 0xAA) {
                throw new AssertionError(why + ": byte " + i + " was written");
            }
        }
    }

    @Test
    void signaturesAreTheTenOfTheProfile() {
        assertEquals(List.of("args_get", "args_sizes_get", "clock_time_get", "environ_get", "environ_sizes_get",
                "fd_write", "poll_oneoff", "proc_exit", "random_get", "sched_yield"), List.copyOf(Wasi.SIGNATURES.keySet()));
        assertEquals("(i32, i64, i32) -> (i32)", Wasi.SIGNATURES.get("clock_time_get").toString());
        assertEquals("(i32) -> ()", Wasi.SIGNATURES.get("proc_exit").toString());
        assertEquals("() -> (i32)", Wasi.SIGNATURES.get("sched_yield").toString());
        assertEquals(10, new Wasi().hostFunctions().size());
    }

    @Test
    void clock() {
        Wasi w = new Wasi();
        for (int id = 0; id <= 3; id++) {
            Memory m = mem();
            assertEquals(0, w.clockTimeGet(m, id, id * 1000L, 8));
            assertEquals(1704067200000000000L, m.readLong(8), "clock " + id + " reads PCTL_WASI_TIME");
            assertEquals(0, w.clockTimeGet(m, id, 1, 8));
            assertEquals(1704067200000000000L, m.readLong(8), "however often it is called");
        }
        Memory m = mem();
        assertEquals(Wasi.ERRNO_INVAL, w.clockTimeGet(m, 4, 0, 8));
        assertEquals(Wasi.ERRNO_INVAL, w.clockTimeGet(m, -1, 0, 8), "ids are unsigned");
        assertEquals(Wasi.ERRNO_FAULT, w.clockTimeGet(m, 0, 0, END - 7));
        assertEquals(Wasi.ERRNO_FAULT, w.clockTimeGet(m, 0, 0, -8));
        untouched(m, "invalid clock calls");
        assertEquals(0, w.clockTimeGet(m, 0, 0, END - 8), "the last 8 bytes of memory are inside");
    }

    @Test
    void randomContinuesAcrossCallsAndFaultsTakeNothing() throws Exception {
        String want = (String) TestSupport.json(TestSupport.repo("spec/vectors/wasi-random.json")).get("bytes_hex");
        Wasi w = new Wasi();
        Memory m = mem();
        assertEquals(Wasi.ERRNO_FAULT, w.randomGet(m, END - 2, 3));
        untouched(m, "random_get out of range");
        assertEquals(0, w.randomGet(m, 100, 3));
        assertEquals(0, w.randomGet(m, 103, 0));
        assertEquals(0, w.randomGet(m, 103, 61));
        assertEquals(want, TestSupport.hex(m.readBytes(100, 64)), "a faulting call does not advance the stream; calls continue it");
        assertEquals(0, new Wasi().randomGet(m, END - 8, 8), "each instance starts its own stream");
        assertEquals(want.substring(0, 16), TestSupport.hex(m.readBytes(END - 8, 8)));
    }

    @Test
    void argsAndEnviron() {
        Memory m = mem();
        assertEquals(0, Wasi.zeroSizes(m, 0, 4));
        assertEquals(0, m.readInt(0));
        assertEquals(0, m.readInt(4));
        Memory m2 = mem();
        assertEquals(Wasi.ERRNO_FAULT, Wasi.zeroSizes(m2, 0, END - 3));
        untouched(m2, "sizes_get with one pointer out of range writes neither");
    }

    @Test
    void fdWrite() {
        Memory m = mem();
        // two iovecs at 16: (buf 100, len 5), (buf 200, len 7)
        m.writeI32(16, 100);
        m.writeI32(20, 5);
        m.writeI32(24, 200);
        m.writeI32(28, 7);
        assertEquals(0, Wasi.fdWrite(m, 1, 16, 2, 8));
        assertEquals(12, m.readInt(8));
        assertEquals(0, Wasi.fdWrite(m, 2, 16, 0, 8));
        assertEquals(0, m.readInt(8), "no iovecs: nothing written");
        assertEquals(Wasi.ERRNO_BADF, Wasi.fdWrite(m, 0, 16, 2, 8));
        assertEquals(Wasi.ERRNO_BADF, Wasi.fdWrite(m, 3, 16, 2, 8));
        m.writeI32(8, 0x55555555);
        assertEquals(Wasi.ERRNO_FAULT, Wasi.fdWrite(m, 1, END - 8, 2, 8));
        assertEquals(Wasi.ERRNO_FAULT, Wasi.fdWrite(m, 1, 16, 2, END - 2));
        assertEquals(0x55555555, m.readInt(8), "a fault writes nothing");
    }

    @Test
    void pollOneoffCompletesEverySubscription() {
        Memory m = mem();
        int in = 1000;
        int out = 2000;
        // subscription 0: clock (tag 0), userdata 0x1122334455667788; 1: fd_read (tag 1); 2: fd_write (tag 2)
        long[] userdata = {0x1122334455667788L, 42, -1};
        int[] tags = {0, 1, 2};
        for (int i = 0; i < 3; i++) {
            m.writeLong(in + 48 * i, userdata[i]);
            m.writeByte(in + 48 * i + 8, (byte) tags[i]);
        }
        assertEquals(0, Wasi.pollOneoff(m, in, out, 3, 3000));
        assertEquals(3, m.readInt(3000), "nevents = nsubs");
        for (int i = 0; i < 3; i++) {
            byte[] e = m.readBytes(out + 32 * i, 32);
            assertEquals(userdata[i], m.readLong(out + 32 * i), "event " + i + " userdata");
            assertEquals(tags[i] == 0 ? 0 : 8, m.readShort(out + 32 * i + 8), "event " + i + " error: 0 for a clock, badf otherwise");
            assertEquals(tags[i], e[10], "event " + i + " type = the tag");
            for (int k = 11; k < 32; k++) {
                assertEquals(0, e[k], "event " + i + " byte " + k + " is zero");
            }
            assertEquals(0, e[9]);
        }
        Memory m2 = mem();
        assertEquals(Wasi.ERRNO_INVAL, Wasi.pollOneoff(m2, in, out, 0, 3000), "no subscriptions");
        assertEquals(Wasi.ERRNO_FAULT, Wasi.pollOneoff(m2, END - 40, out, 1, 3000));
        assertEquals(Wasi.ERRNO_FAULT, Wasi.pollOneoff(m2, in, END - 31, 1, 3000));
        assertEquals(Wasi.ERRNO_FAULT, Wasi.pollOneoff(m2, in, out, 1, END - 1));
        assertEquals(Wasi.ERRNO_FAULT, Wasi.pollOneoff(m2, in, out, 0x10000000, 3000));
        untouched(m2, "failed poll_oneoff calls");
    }

    @Test
    void procExitCarriesTheCode() {
        Wasi.ProcExit e = new Wasi.ProcExit(3);
        assertEquals(3, e.code);
        assertTrue(e.getMessage().contains("3"));
        assertArrayEquals(new byte[0], Wasi.SIGNATURES.get("proc_exit").results());
    }
}
