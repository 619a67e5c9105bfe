package dev.pctl.cli;

import dev.pctl.BadRequestException;
import dev.pctl.ClientOptions;
import dev.pctl.CommitFailedException;
import dev.pctl.Consumer;
import dev.pctl.ConsumerOptions;
import dev.pctl.ConsumerRecord;
import dev.pctl.Misplacement;
import dev.pctl.MisplacedPolicy;
import dev.pctl.NotFoundException;
import dev.pctl.PctlClient;
import dev.pctl.PctlException;
import dev.pctl.RebalanceListener;
import dev.pctl.WakeupException;
import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The cross-language consume command, the same in every SDK:
 *
 * <pre>
 *   consume --server URL --creds FILE --topic T --group G [--from-beginning] [--from now|beginning|current-epoch] [--idle-exit D] [--max N]
 *           [--member ID] [--heartbeat D] [--misplaced stop|deliver|skip] [--assignor modulo|sticky]
 * </pre>
 *
 * <p>Runs one member of consumer group G on topic T and prints every record it is given as one
 * JSON line, exactly as {@code pctl consume T --group G --format jsonl --timestamps} prints it:
 *
 * <pre>
 *   {"topic":"t","partition":0,"epoch":1,"seq":5,"key":"k","value":"v","producer":"p","pseq":3,"ts":1733...}
 * </pre>
 *
 * <ul>
 *   <li>a key or value that is not valid UTF-8 is given as "key_b64" / "value_b64" (standard
 *       base64) instead; a keyless record has no key field; "producer" and "pseq" are omitted when
 *       the record has none; "ts" is the delivery time in unix nanoseconds;
 *   <li>with --misplaced deliver, a record stored outside its key's partition (spec/protocol.md
 *       §6.8) is printed with "misplaced":true, "expected_partition" (absent when its key or epoch
 *       is unusable) and "misplaced_reason"; with stop (the default) the member stops before it
 *       (exit 1), with skip it goes past it; every one is reported on standard error;
 *   <li>a tombstone (it deletes its key, spec/protocol.md §10.2) has "tombstone":true, a
 *       backfilled copy "backfill":"&lt;epoch&gt;/&lt;partition&gt;/&lt;seq&gt;" (§10.4);
 *   <li>strings are escaped as Go's encoding/json does (&lt;, &gt;, &amp; and U+2028/U+2029 as
 *       \\u escapes), so the lines are byte for byte those of the Go command.
 * </ul>
 *
 * <p>A record is acknowledged (committed) only after its line was written out, so a member killed
 * at any moment never loses a record it printed. It runs until SIGINT/SIGTERM (it commits and
 * leaves the group; exit 0), until --max N records were printed (exit 0), or until --idle-exit D
 * passed without a new record (exit 0). D is a Go duration (500ms, 5s, 1m30s). Exit 2: bad
 * arguments, unknown topic, bad group name; exit 1: refused, broker unreachable or failed.
 * --server and --creds default to $PCTL_SERVER and $PCTL_CREDS.
 */
public final class Consume {
    static final int EXIT_OK = 0;
    static final int EXIT_FAILURE = 1;
    static final int EXIT_USAGE = 2;

    private static final String USAGE = "usage: consume --server URL --creds FILE --topic T --group G [--from-beginning] [--from now|beginning|current-epoch] [--idle-exit D] [--max N] "
            + "[--member ID] [--heartbeat D] [--misplaced stop|deliver|skip] [--assignor modulo|sticky] [--verbose]";

    private Consume() {}

    public static void main(String[] args) {
        PrintStream err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
        AtomicBoolean stop = new AtomicBoolean();
        Consumer[] current = new Consumer[1];
        Runnable onSignal = () -> {
            stop.set(true);
            Consumer c = current[0];
            if (c != null) {
                c.wakeup();
            }
        };
        handleSignal("TERM", onSignal);
        handleSignal("INT", onSignal);
        int st = run(args, new FileOutputStream(FileDescriptor.out), err, stop, c -> current[0] = c);
        err.flush();
        System.exit(st);
    }

    /**
     * SIGINT and SIGTERM make the member commit and leave (exit 0), as Go's pctl consume does: the
     * JVM's own handling would exit 143 without committing. sun.misc.Signal (module
     * jdk.unsupported) by reflection, so that nothing depends on it at compile time.
     */
    private static void handleSignal(String name, Runnable r) {
        try {
            Class<?> sig = Class.forName("sun.misc.Signal");
            Class<?> handler = Class.forName("sun.misc.SignalHandler");
            InvocationHandler ih = (proxy, m, a) -> {
                if (m.getName().equals("handle")) {
                    r.run();
                }
                return null;
            };
            Object h = Proxy.newProxyInstance(handler.getClassLoader(), new Class<?>[] {handler}, ih);
            sig.getMethod("handle", sig, handler).invoke(null, sig.getConstructor(String.class).newInstance(name), h);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // no signal handling: the JVM's default (exit at once) remains
        }
    }

    /** Runs the command (what main does, without exiting or handling signals). */
    public static int run(String[] args, OutputStream stdout, PrintStream stderr, AtomicBoolean stop, java.util.function.Consumer<Consumer> started) {
        String server = null;
        String creds = null;
        String topic = null;
        String group = null;
        String member = null;
        boolean fromBeginning = false;
        String idleArg = "0";
        String maxArg = "0";
        String hbArg = "1s";
        String misplacedArg = "stop";
        String startArg = null;
        String assignorArg = null;
        boolean verbose = false;
        int first = args.length > 0 && args[0].equals("consume") ? 1 : 0;
        for (int i = first; i < args.length; i++) {
            String a = args[i];
            String flag = a;
            String value = null;
            int eq = a.indexOf('=');
            if (a.startsWith("--") && eq > 0) {
                flag = a.substring(0, eq);
                value = a.substring(eq + 1);
            }
            if (flag.equals("--from-beginning")) {
                if (value != null) {
                    return usage(stderr, "--from-beginning takes no value");
                }
                fromBeginning = true;
                continue;
            }
            if (flag.equals("--verbose")) {
                verbose = true;
                continue;
            }
            if (flag.equals("-h") || flag.equals("--help")) {
                stderr.println(USAGE);
                return EXIT_USAGE;
            }
            if (!flag.startsWith("--")) {
                return usage(stderr, "unexpected argument " + a);
            }
            if (value == null) {
                if (i + 1 >= args.length) {
                    return usage(stderr, flag + " needs a value");
                }
                value = args[++i];
            }
            switch (flag) {
                case "--server":
                    server = value;
                    break;
                case "--creds":
                    creds = value;
                    break;
                case "--topic":
                    topic = value;
                    break;
                case "--group":
                    group = value;
                    break;
                case "--member":
                    member = value;
                    break;
                case "--idle-exit":
                    idleArg = value;
                    break;
                case "--max":
                    maxArg = value;
                    break;
                case "--heartbeat":
                    hbArg = value;
                    break;
                case "--misplaced":
                    misplacedArg = value;
                    break;
                case "--from":
                    startArg = value;
                    break;
                case "--assignor":
                    assignorArg = value;
                    break;
                default:
                    return usage(stderr, "unknown flag " + flag);
            }
        }
        if (topic == null) {
            return usage(stderr, "--topic is required");
        }
        if (group == null) {
            return usage(stderr, "--group is required: the consumer group this member joins");
        }
        long idle;
        long hb;
        long max;
        MisplacedPolicy policy;
        try {
            idle = parseDuration(idleArg);
            hb = parseDuration(hbArg);
        } catch (IllegalArgumentException e) {
            return usage(stderr, e.getMessage());
        }
        try {
            max = Long.parseLong(maxArg);
        } catch (NumberFormatException e) {
            return usage(stderr, "--max " + maxArg + ": give a count");
        }
        if (max < 0) {
            return usage(stderr, "--max " + max + ": give a positive count, or 0 for no limit");
        }
        if (hb <= 0) {
            return usage(stderr, "--heartbeat " + hbArg + ": give a positive duration");
        }
        try {
            policy = MisplacedPolicy.parse(misplacedArg);
        } catch (BadRequestException e) {
            return usage(stderr, "--misplaced " + misplacedArg + ": give stop, deliver or skip");
        }
        ConsumerOptions.Builder ob;
        try {
            ob = ConsumerOptions.builder(group).member(member).fromBeginning(fromBeginning).start(startArg).autoCommit(false)
                    .heartbeat(Duration.ofNanos(hb)).sessionTimeout(Duration.ofNanos(Math.max(6_000_000_000L, 3 * hb))).misplaced(policy)
                    .assignor(assignorArg);
        } catch (BadRequestException e) {
            return usage(stderr, e.getMessage());
        }
        if (verbose) {
            ob.logger(l -> stderr.println("consume: " + l));
        }
        ClientOptions.Builder cb = ClientOptions.builder().connectionName("pctl-java consume " + group);
        if (server != null) {
            cb.server(server);
        }
        if (creds != null) {
            cb.creds(Path.of(creds));
        }
        long start = System.nanoTime();
        long n = 0;
        String why = "interrupted";
        int status = EXIT_OK;
        OutputStream out = new BufferedOutputStream(stdout, 1 << 16);
        Map<Integer, ConsumerRecord> printed = new HashMap<>(); // the last record printed, per partition, not committed yet
        PctlClient client;
        try {
            client = PctlClient.connect(cb.build());
        } catch (PctlException e) {
            stderr.println("consume: " + e.getMessage());
            return e instanceof BadRequestException ? EXIT_USAGE : EXIT_FAILURE;
        }
        Consumer[] cn = new Consumer[1];
        String topicName = topic;
        MisplacedPolicy pol = policy;
        try {
            ob.onMisplaced(r -> stderr.println("consume: misplaced record: partition " + r.partition() + " seq " + r.sequence() + " epoch " + r.epoch()
                    + " key " + (r.key() == null ? "-" : new String(r.key(), StandardCharsets.UTF_8)) + ": " + r.misplacement().reason()
                    + " (--misplaced " + pol.wire() + ")"));
            ob.listener(new RebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<Integer> partitions) {
                    // A partition handed to another member: what was printed is committed first,
                    // so that the next owner does not deliver it again (duplicates only after a crash).
                    flushAndCommit(out, printed, cn[0]);
                }
            });
            try {
                cn[0] = client.consumer(topic, ob.build());
            } catch (PctlException e) {
                stderr.println("consume: " + e.getMessage());
                why = "failed";
                return e instanceof BadRequestException || e instanceof NotFoundException ? EXIT_USAGE : EXIT_FAILURE;
            }
            started.accept(cn[0]);
            long last = System.nanoTime();
            long lastFlush = last;
            boolean dirty = false;
            StringBuilder line = new StringBuilder(256);
            while (!stop.get()) {
                long now = System.nanoTime();
                if (idle > 0 && now - last >= idle) {
                    why = "no new record for " + idleArg;
                    break;
                }
                long wait = 100_000_000L;
                if (idle > 0) {
                    wait = Math.min(wait, Math.max(1_000_000L, idle - (now - last)));
                }
                List<ConsumerRecord> recs;
                try {
                    recs = cn[0].poll(Duration.ofNanos(wait));
                } catch (WakeupException e) {
                    break;
                }
                for (ConsumerRecord r : recs) {
                    if (max > 0 && n >= max) {
                        break; // not printed, so not acknowledged: it stays for the group's next member
                    }
                    line.setLength(0);
                    jsonLine(line, topicName, r, nowNanos());
                    out.write(line.toString().getBytes(StandardCharsets.UTF_8));
                    printed.put(r.partition(), r);
                    n++;
                    dirty = true;
                    last = System.nanoTime();
                }
                if (dirty && (recs.isEmpty() || System.nanoTime() - lastFlush >= 100_000_000L || (max > 0 && n >= max))) {
                    // Printed, then acknowledged: a record is committed only once its line is out.
                    flushAndCommit(out, printed, cn[0]);
                    lastFlush = System.nanoTime();
                    dirty = false;
                }
                if (max > 0 && n >= max) {
                    why = "--max " + max + " reached";
                    break;
                }
            }
            flushAndCommit(out, printed, cn[0]);
        } catch (PctlException e) {
            stderr.println("consume: " + e.getMessage());
            why = "failed";
            status = EXIT_FAILURE;
        } catch (IOException e) {
            stderr.println("consume: write standard output: " + e.getMessage());
            why = "failed";
            status = EXIT_FAILURE;
        } finally {
            if (cn[0] != null) {
                try {
                    flushAndCommit(out, printed, cn[0]);
                } catch (PctlException e) {
                    // reported above
                }
                try {
                    cn[0].close();
                } catch (PctlException e) {
                    stderr.println("consume: close: " + e.getMessage());
                }
            }
            client.close();
            stderr.printf("consume: %s group %s: %d records in %.3fs (%s)%n", topic, group, n, (System.nanoTime() - start) / 1e9, why);
        }
        return status;
    }

    private static void flushAndCommit(OutputStream out, Map<Integer, ConsumerRecord> printed, Consumer cn) {
        try {
            out.flush();
        } catch (IOException e) {
            throw new dev.pctl.UnavailableException("write standard output: " + e.getMessage(), e);
        }
        if (cn == null) {
            return;
        }
        for (ConsumerRecord r : printed.values()) {
            try {
                cn.commit(r);
            } catch (CommitFailedException e) {
                // the partition is another member's now: it delivers these records again
            }
        }
        printed.clear();
    }

    private static long nowNanos() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    private static int usage(PrintStream err, String msg) {
        err.println("consume: " + msg);
        err.println(USAGE);
        return EXIT_USAGE;
    }

    private static final Pattern DUR = Pattern.compile("(\\d+(?:\\.\\d*)?|\\.\\d+)(ns|us|µs|μs|ms|s|m|h)");

    /** A Go duration ("1m30s", "500ms", "0") in nanoseconds. */
    static long parseDuration(String s) {
        if (s.equals("0") || s.equals("+0") || s.equals("-0")) {
            return 0;
        }
        if (s.startsWith("-")) {
            throw new IllegalArgumentException("invalid duration \"" + s + "\": negative");
        }
        String rest = s.startsWith("+") ? s.substring(1) : s;
        if (rest.isEmpty()) {
            throw new IllegalArgumentException("invalid duration \"" + s + "\"");
        }
        Matcher m = DUR.matcher(rest);
        double total = 0;
        int pos = 0;
        while (pos < rest.length()) {
            if (!m.find(pos) || m.start() != pos) {
                throw new IllegalArgumentException("invalid duration \"" + s + "\" (e.g. 500ms, 5s, 1m30s)");
            }
            double unit;
            switch (m.group(2)) {
                case "ns":
                    unit = 1;
                    break;
                case "us":
                case "µs":
                case "μs":
                    unit = 1e3;
                    break;
                case "ms":
                    unit = 1e6;
                    break;
                case "s":
                    unit = 1e9;
                    break;
                case "m":
                    unit = 60e9;
                    break;
                default:
                    unit = 3600e9;
            }
            total += Double.parseDouble(m.group(1)) * unit;
            pos = m.end();
        }
        return (long) total;
    }

    /** The line {@code pctl consume --format jsonl --timestamps} prints for a record delivered at ts (unix ns). */
    public static StringBuilder jsonLine(StringBuilder sb, String topic, ConsumerRecord r, long ts) {
        sb.append("{\"topic\":");
        goString(sb, topic);
        sb.append(",\"partition\":").append(r.partition()).append(",\"epoch\":").append(r.epoch()).append(",\"seq\":").append(r.sequence());
        if (r.key() != null) {
            field(sb, "key", r.key());
        }
        field(sb, "value", r.value());
        if (!r.producer().isEmpty()) {
            sb.append(",\"producer\":");
            goString(sb, r.producer());
        }
        if (r.producerSeq() != 0) {
            sb.append(",\"pseq\":").append(r.producerSeq());
        }
        if (ts != 0) {
            sb.append(",\"ts\":").append(ts);
        }
        Misplacement mp = r.misplacement();
        if (mp != null) {
            sb.append(",\"misplaced\":true");
            if (mp.expected() >= 0) {
                sb.append(",\"expected_partition\":").append(mp.expected());
            }
            sb.append(",\"misplaced_reason\":");
            goString(sb, mp.reason());
        }
        if (r.tombstone()) {
            sb.append(",\"tombstone\":true");
        }
        if (r.backfill() != null) {
            sb.append(",\"backfill\":\"").append(r.backfill().epoch()).append('/').append(r.backfill().partition()).append('/').append(r.backfill().sequence()).append('"');
        }
        return sb.append("}\n");
    }

    private static void field(StringBuilder sb, String name, byte[] v) {
        String s = utf8(v);
        if (s != null) {
            sb.append(",\"").append(name).append("\":");
            goString(sb, s);
        } else {
            sb.append(",\"").append(name).append("_b64\":\"").append(Base64.getEncoder().encodeToString(v)).append('"');
        }
    }

    /** The bytes as a string when they are valid UTF-8 (as Go's utf8.Valid says), else null. */
    private static String utf8(byte[] v) {
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(v)).toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** s as Go's encoding/json writes a string (HTML-safe escaping). */
    static void goString(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\b':
                    sb.append("\\b");
                    break;
                case '\f':
                    sb.append("\\f");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                case '<':
                case '>':
                case '&':
                case '\u2028':
                case '\u2029':
                    sb.append("\\u").append(HEX[(ch >> 12) & 15]).append(HEX[(ch >> 8) & 15]).append(HEX[(ch >> 4) & 15]).append(HEX[ch & 15]);
                    break;
                default:
                    if (ch < 0x20) {
                        sb.append("\\u00").append(HEX[(ch >> 4) & 15]).append(HEX[ch & 15]);
                    } else {
                        sb.append(ch);
                    }
            }
        }
        sb.append('"');
    }
}
