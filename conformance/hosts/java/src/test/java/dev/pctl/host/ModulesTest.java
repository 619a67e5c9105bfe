package dev.pctl.host;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.runtime.Plugin;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Every built-in module and every kafka-murmur2 build against the reference vectors in
 * spec/vectors (computed by the real clients: a mismatch means keys would remap for existing
 * users), through the host command, with batch calls and with single calls, on the compiler and
 * the interpreter.
 */
class ModulesTest {
    private static void check(String wasm, String vectors, boolean batch, boolean compile) throws Exception {
        List<TestSupport.Case> cases = TestSupport.cases(vectors);
        Map<Integer, List<TestSupport.Case>> byN = new TreeMap<>();
        for (TestSupport.Case c : cases) {
            byN.computeIfAbsent(c.n(), k -> new ArrayList<>()).add(c);
        }
        Plugin.Options o = new Plugin.Options();
        o.useBatch = batch;
        o.compile = compile;
        // The whole command for one partition count, then the same loaded module for the others.
        int first = byN.keySet().iterator().next();
        TestSupport.Result r0 = TestSupport.run(o, TestSupport.keysInput(byN.get(first)),
                "run", "--wasm", TestSupport.repo(wasm).toString(), "--partitions", Integer.toString(first));
        Plugin plugin = TestSupport.load(TestSupport.repo(wasm), o);
        for (var e : byN.entrySet()) {
            TestSupport.Result r = e.getKey() == first ? r0 : TestSupport.partition(plugin, e.getKey(), TestSupport.keysInput(e.getValue()));
            assertEquals(0, r.status(), r.stderr());
            List<String> got = r.lines();
            assertEquals(e.getValue().size(), got.size(), "one line per key");
            for (int i = 0; i < got.size(); i++) {
                TestSupport.Case c = e.getValue().get(i);
                assertEquals(c.partition(), Integer.parseInt(got.get(i)),
                        () -> wasm + ": key " + c.keyHex() + " n=" + c.n() + " (keys would remap for users of the reference client)");
            }
        }
    }

    @ParameterizedTest(name = "{0} vs {1}")
    @CsvSource({
        "plugins/builtin/kafka-murmur2.wasm, kafka-murmur2",
        "plugins/builtin/linear-murmur2.wasm, linear-murmur2",
        "plugins/builtin/librdkafka-consistent.wasm, librdkafka-consistent",
        "plugins/builtin/librdkafka-fnv1a.wasm, librdkafka-fnv1a",
        "plugins/builtin/sarama-fnv1a.wasm, sarama-fnv1a",
        "plugins/builtin/jump.wasm, jump",
        "plugins/murmur2/kafka-murmur2-go.wasm, kafka-murmur2",
        "plugins/murmur2/kafka-murmur2-as.wasm, kafka-murmur2",
        "plugins/murmur2/kafka-murmur2-rust.wasm, kafka-murmur2",
    })
    void vectorsBatch(String wasm, String vectors) throws Exception {
        check(wasm, vectors, true, true);
    }

    @ParameterizedTest(name = "{0} vs {1}, single calls")
    @CsvSource({
        "plugins/builtin/kafka-murmur2.wasm, kafka-murmur2",
        "plugins/builtin/jump.wasm, jump",
        "plugins/murmur2/kafka-murmur2-go.wasm, kafka-murmur2",
    })
    void vectorsSingle(String wasm, String vectors) throws Exception {
        check(wasm, vectors, false, true);
    }

    @ParameterizedTest(name = "{0} vs {1}, interpreter")
    @CsvSource({
        "plugins/builtin/kafka-murmur2.wasm, kafka-murmur2",
        "plugins/murmur2/kafka-murmur2-rust.wasm, kafka-murmur2",
    })
    void vectorsInterpreter(String wasm, String vectors) throws Exception {
        check(wasm, vectors, true, false);
    }

    @ParameterizedTest(name = "metadata of {0}")
    @CsvSource({
        "plugins/builtin/kafka-murmur2.wasm, kafka-murmur2",
        "plugins/murmur2/kafka-murmur2-go.wasm, kafka-murmur2-go",
    })
    void metadata(String wasm, String name) throws Exception {
        Plugin p = Plugin.load(TestSupport.read(TestSupport.repo(wasm)), wasm, new Plugin.Options());
        assertEquals(name, p.name());
        assertTrue(p.hasBatch());
        assertEquals(1, p.abiVersion());
        assertEquals(wasm.contains("-go"), p.isWasiProfile());
    }
}
