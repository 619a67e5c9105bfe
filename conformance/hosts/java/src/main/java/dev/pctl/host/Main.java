package dev.pctl.host;

import dev.pctl.runtime.Config;
import dev.pctl.runtime.Plugin;
import dev.pctl.runtime.PluginException;
import dev.pctl.runtime.PluginInstance;
import dev.pctl.runtime.Watchdog;
import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The pctl conformance host command, the same for every host language:
 *
 * <pre>
 *   run --wasm FILE --partitions N [--config K=V ... | --config-hex HEX]
 * </pre>
 *
 * <p>(conformance/hosts/README.md; the leading command name {@code run} is optional.)
 * {@code --config} flags give the canonical config bytes of spec/abi-v1.md §2.5;
 * {@code --config-hex} gives the config bytes themselves, for tests.
 *
 * <p>Reads keys from standard input, one per line, hex-encoded (an empty line is the empty key;
 * the newline after the last key is optional), and prints each key's partition on its own line,
 * in order. Exit status 0 when every key got a partition; 1 when a call into the module failed
 * (stdout then holds the partitions of the keys before the failing one, and stderr names the
 * plugin, the kind of failure and the key's line); 2 for bad usage or input, or a module refused
 * at load or unable to take the config.
 *
 * <p>Arguments given as {@code --hex-args H...} are the real arguments, each hex-encoded (the
 * {@code run} script passes them so, so that config values reach the host byte for byte
 * whatever the JVM's locale).
 *
 * <p>The WebAssembly host itself is the Java SDK's runtime ({@code dev.pctl.runtime} in
 * sdk/java): this command only reads flags and keys, batches them and prints partitions.
 */
public final class Main {
    static final int EXIT_OK = 0;
    static final int EXIT_FAILURE = 1;
    static final int EXIT_USAGE = 2;

    private static final String USAGE = "usage: run --wasm FILE --partitions N [--config K=V ... | --config-hex HEX] < hex keys, one per line";

    /** Stack of the thread that runs modules: deep enough that 1000 wasm frames never overflow it. */
    static final long WORKER_STACK_BYTES = 1L << 30;

    private Main() {}

    public static void main(String[] args) throws InterruptedException {
        int[] status = {EXIT_FAILURE};
        PrintStream err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
        // A call that ignores its interrupt must not hang the command: report it and exit 1.
        Watchdog.onStuck((who, limitNanos) -> {
            err.printf("pctl-java run: %s: time limit exceeded: a call ran past its limit of %d ms and did not stop "
                    + "within %d ms of being interrupted; exiting%n", who, limitNanos / 1_000_000, Watchdog.GRACE_NANOS / 1_000_000);
            err.flush();
            Runtime.getRuntime().halt(EXIT_FAILURE);
        });
        OutputStream out = new FileOutputStream(FileDescriptor.out);
        InputStream in = new FileInputStream(FileDescriptor.in);
        Thread worker = new Thread(null, () -> {
            try {
                status[0] = run(args, in, out, err, optionsFromEnvironment());
            } catch (Throwable t) {
                err.println("pctl-java: internal error: " + t);
                t.printStackTrace(err);
                status[0] = EXIT_FAILURE;
            }
        }, "pctl-wasm", WORKER_STACK_BYTES);
        worker.start();
        worker.join();
        err.flush();
        System.exit(status[0]);
    }

    /**
     * PCTL_JAVA_ENGINE=interpreter runs modules in Chicory's interpreter instead of compiling
     * them; PCTL_JAVA_SINGLE=1 makes single calls even when the module has a batch export;
     * PCTL_JAVA_CACHE=DIR keeps compiled modules in DIR across runs ("off": never).
     */
    static Plugin.Options optionsFromEnvironment() {
        Plugin.Options o = new Plugin.Options();
        o.compile = !"interpreter".equals(System.getenv("PCTL_JAVA_ENGINE"));
        o.useBatch = !"1".equals(System.getenv("PCTL_JAVA_SINGLE"));
        String cache = System.getenv("PCTL_JAVA_CACHE");
        if (cache != null && !cache.isEmpty() && !cache.equals("off")) {
            o.cacheDir = Path.of(cache);
        }
        return o;
    }

    /** Runs the command; must be called on the thread that will run the module's code. */
    static int run(String[] argv, InputStream stdin, OutputStream stdout, PrintStream stderr, Plugin.Options options) {
        List<byte[]> args = new ArrayList<>();
        if (argv.length > 0 && argv[0].equals("--hex-args")) {
            for (int i = 1; i < argv.length; i++) {
                byte[] b = Hex.decode(argv[i].getBytes(StandardCharsets.ISO_8859_1), 0, argv[i].length());
                if (b == null) {
                    stderr.println("pctl-java: --hex-args: argument " + i + " is not hex");
                    return EXIT_USAGE;
                }
                args.add(b);
            }
        } else {
            for (String a : argv) {
                args.add(a.getBytes(StandardCharsets.UTF_8));
            }
        }
        return new Main.Command(stdin, stdout, stderr, options).run(args);
    }

    private static final class Command {
        private final InputStream stdin;
        private final OutputStream stdout;
        private final PrintStream stderr;
        private final Plugin.Options options;

        Command(InputStream stdin, OutputStream stdout, PrintStream stderr, Plugin.Options options) {
            this.stdin = stdin;
            this.stdout = stdout;
            this.stderr = stderr;
            this.options = options;
        }

        private int usage(String msg) {
            stderr.println("pctl-java run: " + msg);
            stderr.println(USAGE);
            return EXIT_USAGE;
        }

        int run(List<byte[]> args) {
            // The command's name may be given or not: "run --wasm ..." and "--wasm ..." are the same.
            int first = 0;
            if (!args.isEmpty() && str(args.get(0)).equals("run")) {
                first = 1;
            }
            if (!args.isEmpty() && (str(args.get(0)).equals("help"))) {
                stderr.println(USAGE);
                return EXIT_OK;
            }
            String wasm = null;
            String partitions = null;
            String configHex = null;
            List<byte[]> config = new ArrayList<>();
            for (int i = first; i < args.size(); i++) {
                byte[] a = args.get(i);
                String s = str(a);
                String flag = s;
                byte[] value = null;
                int eq = s.indexOf('=');
                if (s.startsWith("--") && eq > 0) {
                    flag = s.substring(0, eq);
                    value = java.util.Arrays.copyOfRange(a, utf8Len(s.substring(0, eq)) + 1, a.length);
                }
                if (!flag.equals("--wasm") && !flag.equals("--partitions") && !flag.equals("--config") && !flag.equals("--config-hex")) {
                    if (s.equals("-h") || s.equals("--help")) {
                        stderr.println(USAGE);
                        return EXIT_OK;
                    }
                    return usage(s.startsWith("-") ? "unknown flag " + s : "unexpected argument \"" + s + "\"; keys are read from standard input");
                }
                if (value == null) {
                    if (i + 1 >= args.size()) {
                        return usage(flag + " needs a value");
                    }
                    value = args.get(++i);
                }
                switch (flag) {
                    case "--wasm":
                        wasm = str(value);
                        break;
                    case "--partitions":
                        partitions = str(value);
                        break;
                    case "--config-hex":
                        configHex = str(value);
                        break;
                    default:
                        config.add(value);
                }
            }
            if (wasm == null) {
                return usage("--wasm is required (a .wasm file)");
            }
            int n;
            if (partitions == null) {
                return usage("invalid partition count: --partitions is required (1 to 2147483647)");
            }
            try {
                long v = Long.parseLong(partitions);
                if (v < 1 || v > Integer.MAX_VALUE) {
                    return usage("invalid partition count: --partitions " + v + " is out of range; give 1 to 2147483647");
                }
                n = (int) v;
            } catch (NumberFormatException e) {
                return usage("invalid partition count: --partitions \"" + partitions + "\" is not an integer; give 1 to 2147483647");
            }
            byte[] cfg;
            if (configHex != null) {
                if (!config.isEmpty()) {
                    return usage("--config-hex and --config cannot be combined");
                }
                cfg = Hex.decode(configHex.getBytes(StandardCharsets.ISO_8859_1), 0, configHex.length());
                if (cfg == null || configHex.chars().anyMatch(c -> c > 0x7f)) {
                    return usage("--config-hex \"" + configHex + "\" is not hex");
                }
            } else {
                try {
                    cfg = Config.encode(config);
                } catch (Config.BadConfigException e) {
                    return usage(e.getMessage());
                }
            }
            byte[] bytes;
            try {
                bytes = Files.readAllBytes(Path.of(wasm));
            } catch (NoSuchFileException e) {
                return usage("--wasm " + wasm + ": no such file");
            } catch (IOException | RuntimeException e) {
                return usage("--wasm " + wasm + ": cannot read: " + e.getMessage());
            }

            Plugin plugin;
            PluginInstance inst;
            long t0 = System.nanoTime();
            try {
                plugin = Plugin.load(bytes, wasm, options);
            } catch (PluginException e) {
                stderr.println("pctl-java run: " + e.getMessage());
                return e.exitStatus();
            }
            try {
                inst = plugin.open(cfg);
            } catch (PluginException e) {
                // Whatever went wrong in pctl_configure (a rejection, a code, a trap), the module
                // could not be prepared for this config: a refusal (conformance/hosts/README.md).
                stderr.println("pctl-java run: " + e.getMessage());
                return EXIT_USAGE;
            }
            long t1 = System.nanoTime();
            int st = new Partitioner(plugin, inst, cfg, n, stdout, stderr).run(stdin);
            if (System.getenv("PCTL_JAVA_TIMING") != null) {
                stderr.printf("pctl-java: jvm start to main %d ms, load %d ms, partition %d ms%n",
                        java.lang.management.ManagementFactory.getRuntimeMXBean().getUptime() - (System.nanoTime() - t0) / 1_000_000,
                        (t1 - t0) / 1_000_000, (System.nanoTime() - t1) / 1_000_000);
            }
            return st;
        }

        private static String str(byte[] b) {
            return new String(b, StandardCharsets.UTF_8);
        }

        private static int utf8Len(String s) {
            return s.getBytes(StandardCharsets.UTF_8).length;
        }
    }

    /** Reads keys, partitions them a batch at a time, writes the partitions. */
    static final class Partitioner {
        private final Plugin plugin;
        private final byte[] config;
        private final int n;
        private final OutputStream out;
        private final PrintStream stderr;
        private final boolean useBatch;
        private PluginInstance inst;

        // The current batch: keys i = arena[ends[i-1], ends[i]), read from line firstLine + i.
        private final byte[] arena = new byte[Plugin.BUFFER_BYTES];
        private final int[] ends = new int[Plugin.MAX_BATCH_KEYS];
        private final int[] results = new int[Plugin.MAX_BATCH_KEYS];
        private int count;
        private long firstLine = 1;
        private final byte[] num = new byte[12];

        Partitioner(Plugin plugin, PluginInstance inst, byte[] config, int n, OutputStream stdout, PrintStream stderr) {
            this.plugin = plugin;
            this.inst = inst;
            this.config = config;
            this.n = n;
            this.out = new BufferedOutputStream(stdout, 1 << 16);
            this.stderr = stderr;
            this.useBatch = plugin.options().useBatch;
        }

        int run(InputStream stdin) {
            LineReader lines = new LineReader(stdin);
            byte[] key = new byte[Plugin.MAX_KEY];
            try {
                for (long line = 1; ; line++) {
                    int len;
                    try {
                        len = lines.next(key);
                    } catch (LineReader.LineException e) {
                        flush();
                        out.flush();
                        stderr.println("pctl-java run: line " + line + ": " + e.getMessage());
                        return EXIT_USAGE;
                    }
                    if (len < 0) {
                        break;
                    }
                    if (count == Plugin.MAX_BATCH_KEYS || 4 * (count + 1) + keyBytes() + len > Plugin.BUFFER_BYTES) {
                        flush();
                    }
                    if (count == 0) {
                        firstLine = line;
                    }
                    int start = keyBytes();
                    System.arraycopy(key, 0, arena, start, len);
                    ends[count++] = start + len;
                }
                flush();
                out.flush();
                return EXIT_OK;
            } catch (PluginException e) {
                try {
                    out.flush();
                } catch (IOException io) {
                    // stdout gone; the error below still explains the failure
                }
                stderr.println("pctl-java run: " + e.getMessage());
                return e.exitStatus();
            } catch (IOException e) {
                stderr.println("pctl-java run: " + e.getMessage());
                return EXIT_FAILURE;
            }
        }

        private int keyBytes() {
            return count == 0 ? 0 : ends[count - 1];
        }

        private void flush() throws PluginException, IOException {
            if (count == 0) {
                return;
            }
            if (inst.hasBatch() && useBatch) {
                try {
                    ensureInstance();
                    inst.batch(arena, ends, count, n, results);
                    for (int i = 0; i < count; i++) {
                        write(results[i]);
                    }
                    count = 0;
                    return;
                } catch (PluginException e) {
                    if (count == 1) {
                        throw e.withContext("key on line " + firstLine + " of standard input");
                    }
                    // Find the failing key: the same keys one at a time on a fresh instance.
                    singles(e);
                    return;
                }
            }
            singles(null);
        }

        /** Single calls for the current batch; batchError is why the batch call failed, if it did. */
        private void singles(PluginException batchError) throws PluginException, IOException {
            int prev = 0;
            int done = 0;
            int[] single = new int[count];
            for (int i = 0; i < count; i++) {
                try {
                    ensureInstance();
                    single[i] = inst.partition(arena, prev, ends[i] - prev, n);
                } catch (PluginException e) {
                    for (int j = done; j < i; j++) {
                        write(single[j]);
                    }
                    throw e.withContext("key on line " + (firstLine + i) + " of standard input");
                }
                prev = ends[i];
                if (batchError == null) {
                    write(single[i]);
                    done = i + 1;
                }
            }
            if (batchError != null) {
                // Every key succeeded alone: the batch call itself is broken (§2.4 requires the
                // same results either way), so none of these keys gets a partition.
                throw batchError.withContext("batch of the keys on lines " + firstLine + " to " + (firstLine + count - 1)
                        + " of standard input; each of them succeeded in a single call");
            }
            count = 0;
        }

        private void ensureInstance() throws PluginException {
            if (inst.isBroken()) {
                inst.close();
                inst = plugin.open(config);
            }
        }

        private void write(int p) throws IOException {
            int i = num.length;
            num[--i] = '\n';
            do {
                num[--i] = (byte) ('0' + p % 10);
                p /= 10;
            } while (p != 0);
            out.write(num, i, num.length - i);
        }
    }
}
