package dev.pctl.runtime;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The random stream of spec/abi-v1.md §6.2 against spec/vectors/wasi-random.json. */
class RandomStreamTest {
    @Test
    void outputsMatchVector() throws Exception {
        Map<String, Object> v = TestSupport.json(TestSupport.repo("spec/vectors/wasi-random.json"));
        assertEquals(0L, v.get("state0"));
        RandomStream r = new RandomStream(0);
        @SuppressWarnings("unchecked")
        List<Object> outputs = (List<Object>) v.get("outputs");
        for (int i = 0; i < outputs.size(); i++) {
            long want = Long.parseUnsignedLong(((String) outputs.get(i)).substring(2), 16);
            assertEquals(want, r.nextOutput(), "SplitMix64 output " + (i + 1));
        }
        assertEquals("0xe220a8397b1dcdaf", v.get("first_output"));
    }

    @Test
    void bytesMatchVectorWhateverTheReadSizes() throws Exception {
        String want = (String) TestSupport.json(TestSupport.repo("spec/vectors/wasi-random.json")).get("bytes_hex");
        assertEquals("afcd1d7b39a820e2", want.substring(0, 16), "the spec's first bytes");
        int[][] patterns = {{64}, {1}, {3, 5}, {7, 9, 13}, {8}, {0, 2, 0, 11}};
        for (int[] sizes : patterns) {
            RandomStream r = new RandomStream(0);
            byte[] got = new byte[64];
            int off = 0;
            for (int k = 0; off < 64; k++) {
                int len = Math.min(sizes[k % sizes.length], 64 - off);
                r.read(got, off, len);
                off += len;
            }
            assertEquals(want, TestSupport.hex(got), "reads of sizes " + java.util.Arrays.toString(sizes) + " must continue the stream (a read may end inside an output)");
        }
    }
}
