package dev.pctl;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real broker for the integration tests: builds {@code ./cmd/pctl} with go (once per JVM), runs
 * {@code pctl serve --data TMP --listen 127.0.0.1:0}, reads its ready line, and runs other
 * {@code pctl} commands against it. No mocks of NATS.
 */
final class Broker implements AutoCloseable {
    private static final Pattern READY = Pattern.compile("broker ready at (\\S+) \\(data (.+); admin credentials (.+)\\)");
    private static Path binary;

    final Path dir;
    final String url;
    final Path admin;
    final Path producer;
    final Path consumer;
    private final Process serve;

    private Broker(Path dir, String url, Process serve) {
        this.dir = dir;
        this.url = url;
        this.serve = serve;
        this.admin = dir.resolve("data/admin.nk");
        this.producer = dir.resolve("data/producer.nk");
        this.consumer = dir.resolve("data/consumer.nk");
    }

    /** The pctl binary, built from the repository with go into a temporary directory. */
    static synchronized Path pctl() throws IOException, InterruptedException {
        if (binary == null) {
            Path tmp = Files.createTempDirectory("pctl-java-it");
            Path out = tmp.resolve("pctl");
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                try {
                    Files.deleteIfExists(out);
                    Files.deleteIfExists(tmp);
                } catch (IOException e) {
                    // left in the temporary directory
                }
            }));
            Process p = new ProcessBuilder("go", "build", "-o", out.toString(), "./cmd/pctl")
                    .directory(Repo.root().toFile()).redirectErrorStream(true).start();
            String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(10, TimeUnit.MINUTES) || p.exitValue() != 0) {
                throw new IllegalStateException("go build ./cmd/pctl failed: " + log);
            }
            binary = out;
        }
        return binary;
    }

    /** Starts a broker on a fresh data directory and a free port. */
    static Broker start() throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("pctl-java-broker");
        Process p = new ProcessBuilder(pctl().toString(), "serve", "--data", dir.resolve("data").toString(), "--listen", "127.0.0.1:0")
                .redirectError(dir.resolve("serve.log").toFile()).start();
        BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String line = r.readLine();
        Matcher m = line == null ? null : READY.matcher(line);
        if (m == null || !m.find()) {
            p.destroyForcibly();
            throw new IllegalStateException("pctl serve did not print its ready line (got " + line + "): " + Files.readString(dir.resolve("serve.log")));
        }
        Thread drain = new Thread(() -> {
            try {
                r.transferTo(java.io.Writer.nullWriter());
            } catch (IOException e) {
                // the broker stopped
            }
        }, "pctl-serve-stdout");
        drain.setDaemon(true);
        drain.start();
        return new Broker(dir, m.group(1), p);
    }

    /** Client options for a role's credentials. */
    ClientOptions options(Path creds) {
        return ClientOptions.builder().server(url).creds(creds).build();
    }

    /** What a command printed, and its exit status. */
    record Result(int status, String stdout, String stderr) {}

    /** Runs {@code pctl ARGS --server URL --creds admin.nk} with stdin; fails the test on a non-zero exit. */
    String pctlOk(String stdin, String... args) throws IOException, InterruptedException {
        return ok(run(stdin, true, args), args);
    }

    /** Runs a pctl command that needs no broker ({@code partition}); fails the test on a non-zero exit. */
    String pctlOffline(String stdin, String... args) throws IOException, InterruptedException {
        return ok(run(stdin, false, args), args);
    }

    private static String ok(Result r, String... args) {
        if (r.status() != 0) {
            throw new AssertionError("pctl " + String.join(" ", args) + " exited " + r.status() + ": " + r.stderr());
        }
        return r.stdout();
    }

    /** Runs pctl ARGS (with the broker's URL and admin credentials when connect is set). */
    Result run(String stdin, boolean connect, String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>();
        cmd.add(pctl().toString());
        cmd.addAll(List.of(args));
        if (connect) {
            cmd.addAll(List.of("--server", url, "--creds", admin.toString()));
        }
        File err = Files.createTempFile(dir, "cmd", ".err").toFile();
        Process p = new ProcessBuilder(cmd).redirectError(err).start();
        if (stdin != null) {
            p.getOutputStream().write(stdin.getBytes(StandardCharsets.UTF_8));
        }
        p.getOutputStream().close();
        String out = read(p.getInputStream());
        if (!p.waitFor(2, TimeUnit.MINUTES)) {
            p.destroyForcibly();
            throw new AssertionError("pctl " + String.join(" ", args) + " did not finish");
        }
        return new Result(p.exitValue(), out, Files.readString(err.toPath()));
    }

    private static String read(InputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        in.transferTo(b);
        return b.toString(StandardCharsets.UTF_8);
    }

    /** Stops the broker (SIGTERM: it stops cleanly) and removes its directory. */
    @Override
    public void close() throws InterruptedException, IOException {
        serve.destroy();
        if (!serve.waitFor(20, TimeUnit.SECONDS)) {
            serve.destroyForcibly();
            serve.waitFor(5, TimeUnit.SECONDS);
        }
        try (var files = Files.walk(dir)) {
            for (Path f : files.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(f);
            }
        }
    }
}
