package dev.pctl;

import dev.pctl.internal.Json;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

/** Paths in the repository and its test vectors, for the SDK's tests. */
final class Repo {
    private Repo() {}

    /** The repository root (set by Surefire from pom.xml; defaults to two levels up). */
    static Path root() {
        return Path.of(System.getProperty("pctl.root", "../..")).toAbsolutePath().normalize();
    }

    static Path path(String rel) {
        return root().resolve(rel);
    }

    /** One case of a spec/vectors file. */
    record Case(byte[] key, int n, int partition) {}

    /** The cases of spec/vectors/NAME.json (computed by the reference clients). */
    @SuppressWarnings("unchecked")
    static List<Case> vectors(String name) throws Exception {
        Map<String, Object> doc = (Map<String, Object>) Json.parse(Files.readString(path("spec/vectors/" + name + ".json"), StandardCharsets.UTF_8));
        List<Case> out = new ArrayList<>();
        for (Object o : (List<Object>) doc.get("cases")) {
            Map<String, Object> c = (Map<String, Object>) o;
            out.add(new Case(HexFormat.of().parseHex((String) c.get("key_hex")), ((Long) c.get("n")).intValue(), ((Long) c.get("partition")).intValue()));
        }
        return out;
    }
}
