package dev.pctl.runtime;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The rewriting must produce exactly the Go host's bytes (runtime/internal/wasmbin), so that
 * Chicory charges the same fuel at the same points as wazero (spec/abi-v1.md §7.2): every module
 * of the corpus, rewritten with the hosts' default limits, hashes to what
 * runtime/internal/wasmbin/testdata/instrumented.txt records from Go (or is refused with the
 * same class).
 */
class InstrumenterTest {
    @Test
    void corpusIsByteIdenticalToTheGoHost() throws Exception {
        List<String> lines = Files.readAllLines(TestSupport.repo("runtime/internal/wasmbin/testdata/instrumented.txt"), StandardCharsets.UTF_8);
        List<String> wrong = new ArrayList<>();
        int n = 0;
        for (String line : lines) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            n++;
            String want = line.substring(0, line.indexOf(' '));
            String file = line.substring(line.indexOf(' ') + 1);
            String got;
            try {
                byte[] out = Instrumenter.instrument(TestSupport.read(TestSupport.repo(file)), Instrumenter.Limits.hostDefaults()).bytes();
                got = TestSupport.hex(MessageDigest.getInstance("SHA-256").digest(out));
            } catch (WasmFormatException e) {
                got = e.unsupportedFeature ? "unsupported" : "malformed";
            }
            if (!got.equals(want)) {
                wrong.add(file + ": " + got + ", Go: " + want);
            }
        }
        assertTrue(n > 40, "the corpus is listed");
        assertEquals(List.of(), wrong);
    }
}
