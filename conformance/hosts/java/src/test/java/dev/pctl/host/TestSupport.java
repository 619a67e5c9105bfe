package dev.pctl.host;

import dev.pctl.internal.Json;
import dev.pctl.runtime.Plugin;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/** Helpers shared by the tests: repository paths, the vectors, and in-process runs of the host. */
final class TestSupport {
    private TestSupport() {}

    /** The repository root (set by Surefire from pom.xml; defaults to three levels up). */
    static Path root() {
        return Path.of(System.getProperty("pctl.root", "../../..")).toAbsolutePath().normalize();
    }

    static Path repo(String rel) {
        return root().resolve(rel);
    }

    /** The runtime's own test modules live with the runtime, in the Java SDK. */
    static Path resource(String name) {
        return root().resolve("sdk/java/src/test/resources/wasm").resolve(name);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> json(Path p) throws Exception {
        return (Map<String, Object>) Json.parse(Files.readString(p, StandardCharsets.UTF_8));
    }

    /** One case of a spec/vectors file. */
    record Case(String keyHex, int n, int partition) {}

    @SuppressWarnings("unchecked")
    static List<Case> cases(String partitioner) throws Exception {
        Map<String, Object> doc = json(repo("spec/vectors/" + partitioner + ".json"));
        List<Case> out = new java.util.ArrayList<>();
        for (Object o : (List<Object>) doc.get("cases")) {
            Map<String, Object> c = (Map<String, Object>) o;
            out.add(new Case((String) c.get("key_hex"), ((Long) c.get("n")).intValue(), ((Long) c.get("partition")).intValue()));
        }
        return out;
    }

    /** What one run of the host printed. */
    record Result(int status, String stdout, String stderr) {
        List<String> lines() {
            return stdout.isEmpty() ? List.of() : List.of(stdout.split("\n", -1)).subList(0, stdout.split("\n", -1).length - 1);
        }
    }

    /** Runs the host command in this JVM, on a thread with the stack Main gives its worker. */
    static Result run(Plugin.Options options, String stdin, String... args) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int[] status = new int[1];
        Throwable[] thrown = new Throwable[1];
        Thread t = new Thread(null, () -> {
            try (PrintStream ps = new PrintStream(err, true, StandardCharsets.UTF_8)) {
                status[0] = Main.run(args, new ByteArrayInputStream(stdin.getBytes(StandardCharsets.ISO_8859_1)), out, ps, options);
            } catch (Throwable e) {
                thrown[0] = e;
            }
        }, "test-wasm", Main.WORKER_STACK_BYTES);
        t.start();
        t.join();
        if (thrown[0] != null) {
            throw new AssertionError("host threw", thrown[0]);
        }
        return new Result(status[0], out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    /** Loads a module. */
    static Plugin load(Path wasm, Plugin.Options o) throws Exception {
        return Plugin.load(read(wasm), wasm.getFileName().toString(), o);
    }

    /** Partitions the keys of stdin with an already loaded module (a fresh instance), as the command does. */
    static Result partition(Plugin plugin, int n, String stdin) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int status;
        try (PrintStream ps = new PrintStream(err, true, StandardCharsets.UTF_8)) {
            status = new Main.Partitioner(plugin, plugin.open(new byte[0]), new byte[0], n, out, ps)
                    .run(new ByteArrayInputStream(stdin.getBytes(StandardCharsets.ISO_8859_1)));
        }
        return new Result(status, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    static String keysInput(List<Case> cases) {
        StringBuilder sb = new StringBuilder();
        for (Case c : cases) {
            sb.append(c.keyHex()).append('\n');
        }
        return sb.toString();
    }

    static byte[] read(Path p) throws IOException {
        return Files.readAllBytes(p);
    }
}
