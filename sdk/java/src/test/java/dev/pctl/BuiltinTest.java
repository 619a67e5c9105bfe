package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.util.HexFormat;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The built-ins embedded in the jar: the same bytes as plugins/builtin, and the real clients' answers. */
class BuiltinTest {
    @Test
    void everyBuiltinIsEmbeddedByteForByte() throws Exception {
        List<String> files;
        try (Stream<java.nio.file.Path> s = Files.list(Repo.path("plugins/builtin"))) {
            files = s.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".wasm"))
                    .map(n -> n.substring(0, n.length() - 5)).sorted().collect(Collectors.toList());
        }
        assertEquals(files, Partitioner.builtinNames(), "the list of built-ins follows plugins/builtin");
        for (String name : files) {
            assertArrayEquals(Files.readAllBytes(Repo.path("plugins/builtin/" + name + ".wasm")), Partitioner.builtinModule(name), name);
        }
    }

    @Test
    void builtinsAnswerLikeTheReferenceClients() throws Exception {
        // spec/vectors: computed by the real clients (kafka-clients, librdkafka, Sarama, ...).
        for (String name : Partitioner.builtinNames()) {
            List<Repo.Case> cases = Repo.vectors(name);
            assertTrue(cases.size() > 10, name + " vectors present");
            try (Partitioner p = Partitioner.builtin(name)) {
                assertEquals(name, p.name());
                for (Repo.Case c : cases) {
                    assertEquals(c.partition(), p.partition(c.key(), c.n()), () -> name + " key " + HexFormat.of().formatHex(c.key()) + " n=" + c.n());
                }
            }
        }
    }

    @Test
    void unknownBuiltinSaysWhichExist() {
        NotFoundException e = assertThrows(NotFoundException.class, () -> Partitioner.builtin("murmur3"));
        assertTrue(e.getMessage().contains("kafka-murmur2"), e.getMessage());
    }
}
