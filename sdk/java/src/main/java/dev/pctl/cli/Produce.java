package dev.pctl.cli;

import dev.pctl.BadRequestException;
import dev.pctl.ClientOptions;
import dev.pctl.NotFoundException;
import dev.pctl.PctlClient;
import dev.pctl.PctlException;
import dev.pctl.Producer;
import dev.pctl.ProducerOptions;
import dev.pctl.ProducerRecord;
import dev.pctl.RecordMetadata;
import dev.pctl.internal.Json;
import java.io.BufferedInputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The cross-language produce command, the same in every SDK (sdk/crosslang drives them):
 *
 * <pre>
 *   produce --server URL --creds FILE --topic T --producer-id ID  &lt; key&lt;TAB&gt;value lines
 * </pre>
 *
 * <p>Reads records from standard input, one per line (UTF-8): everything before the first tab is
 * the key, everything after it the value; a line without a tab is a keyless record whose value is
 * the whole line; the line's final newline is not part of the record. With
 * {@code --tombstone-marker M} a line {@code key<TAB>M} sends a tombstone for key (spec/protocol.md
 * §10.2) instead of the value M. Each line is sent with the
 * SDK's {@link Producer} as soon as it is read. For every record, when its fate is known, prints
 * one JSON line to standard output:
 *
 * <pre>
 *   {"pseq": 1, "acked": true, "partition": 3, "epoch": 1, "seq": 17}
 *   {"pseq": 2, "acked": false, "partition": null, "epoch": null, "seq": null, "error": "..."}
 * </pre>
 *
 * <p>where {@code pseq} is the record's {@code Pctl-Seq} (1-based, in input order) and {@code seq}
 * its stream sequence, 0 when the producer did not learn it (spec/protocol.md §5.1.2). Exit status 0
 * when every record was acknowledged; 1 when one failed or the broker could not be used; 2 for bad
 * flags or an unknown topic. A summary goes to standard error. {@code --server} and {@code
 * --creds} default to {@code $PCTL_SERVER} and {@code $PCTL_CREDS}; {@code --producer-id} to a
 * random id.
 */
public final class Produce {
    static final int EXIT_OK = 0;
    static final int EXIT_FAILURE = 1;
    static final int EXIT_USAGE = 2;

    private static final String USAGE = "usage: produce --server URL --creds FILE --topic T [--producer-id ID] [--tombstone-marker M] < key<TAB>value lines";

    private Produce() {}

    public static void main(String[] args) {
        PrintStream err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
        if ("1".equals(System.getenv("PCTL_PRODUCE_LOG"))) {
            // The producer's decisions after failures (settling, re-sends, repartitions) on stderr.
            java.util.logging.Logger l = java.util.logging.Logger.getLogger("dev.pctl");
            java.util.logging.Handler h = new java.util.logging.StreamHandler(err, new java.util.logging.SimpleFormatter() {
                @Override
                public String format(java.util.logging.LogRecord r) {
                    return java.time.Instant.ofEpochMilli(r.getMillis()) + " " + formatMessage(r) + System.lineSeparator();
                }
            }) {
                @Override
                public synchronized void publish(java.util.logging.LogRecord r) {
                    super.publish(r);
                    flush();
                }
            };
            h.setLevel(java.util.logging.Level.FINE);
            l.setLevel(java.util.logging.Level.FINE);
            l.setUseParentHandlers(false);
            l.addHandler(h);
        }
        int st = run(args, new FileInputStream(FileDescriptor.in), new FileOutputStream(FileDescriptor.out), err);
        err.flush();
        System.exit(st);
    }

    /** Runs the command (what main does, without exiting). */
    public static int run(String[] args, InputStream stdin, OutputStream stdout, PrintStream stderr) {
        String server = null;
        String creds = null;
        String topic = null;
        byte[] marker = null; // --tombstone-marker
        String id = null;
        int first = args.length > 0 && args[0].equals("produce") ? 1 : 0;
        for (int i = first; i < args.length; i++) {
            String a = args[i];
            String flag = a;
            String value = null;
            int eq = a.indexOf('=');
            if (a.startsWith("--") && eq > 0) {
                flag = a.substring(0, eq);
                value = a.substring(eq + 1);
            }
            if (flag.equals("-h") || flag.equals("--help")) {
                stderr.println(USAGE);
                return EXIT_OK;
            }
            if (!Arrays.asList("--server", "--creds", "--topic", "--producer-id", "--tombstone-marker").contains(flag)) {
                return usage(stderr, a.startsWith("-") ? "unknown flag " + a : "unexpected argument \"" + a + "\"; records are read from standard input");
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
                case "--tombstone-marker":
                    marker = value.getBytes(java.nio.charset.StandardCharsets.UTF_8);
                    break;
                default:
                    id = value;
            }
        }
        if (topic == null) {
            return usage(stderr, "--topic is required");
        }
        ClientOptions.Builder ob = ClientOptions.builder().connectionName("pctl-java-produce");
        if (server != null) {
            ob.server(server);
        }
        if (creds != null) {
            ob.creds(creds.isEmpty() ? null : Path.of(creds));
        }
        ProducerOptions po;
        try {
            po = ProducerOptions.builder().id(id).build();
        } catch (BadRequestException e) {
            return usage(stderr, "--producer-id: " + e.getMessage());
        }
        Out out = new Out(stdout);
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        long sent = 0;
        try (PctlClient client = PctlClient.connect(ob.build())) {
            Producer producer;
            try {
                producer = client.producer(topic, po);
            } catch (NotFoundException | BadRequestException e) {
                stderr.println("produce: " + e.getMessage());
                return EXIT_USAGE;
            }
            try {
                LineReader lines = new LineReader(new BufferedInputStream(stdin, 1 << 16));
                byte[] line;
                while ((line = lines.next()) != null) {
                    int tab = indexOf(line, (byte) '\t');
                    ProducerRecord rec = tab < 0 ? ProducerRecord.keyless(line)
                            : marker != null && Arrays.equals(line, tab + 1, line.length, marker, 0, marker.length)
                                    ? ProducerRecord.tombstone(Arrays.copyOfRange(line, 0, tab))
                                    : ProducerRecord.keyed(Arrays.copyOfRange(line, 0, tab), Arrays.copyOfRange(line, tab + 1, line.length));
                    long pseq;
                    try {
                        pseq = producer.send(rec, (md, e) -> {
                            if (e == null) {
                                acked.incrementAndGet();
                            } else {
                                failed.incrementAndGet();
                            }
                            out.result(md, e);
                        });
                    } catch (PctlException e) {
                        // The producer failed for good (every record in flight gets its line).
                        stderr.println("produce: " + e.getMessage());
                        failed.incrementAndGet();
                        break;
                    }
                    sent = pseq;
                }
            } catch (IOException e) {
                stderr.println("produce: reading standard input: " + e.getMessage());
                failed.incrementAndGet();
            }
            try {
                producer.close();
            } catch (PctlException e) {
                stderr.println("produce: " + e.getMessage());
            }
            out.flush();
            stderr.printf("produce: %d records: %d acknowledged, %d failed; %d re-sent after an epoch change (producer %s, epoch %d)%n",
                    sent, acked.get(), failed.get(), producer.resent(), producer.id(), producer.epoch());
            return failed.get() == 0 && acked.get() == sent ? EXIT_OK : EXIT_FAILURE;
        } catch (PctlException e) {
            out.flush();
            stderr.println("produce: " + e.getMessage());
            return e instanceof BadRequestException ? EXIT_USAGE : EXIT_FAILURE;
        }
    }

    private static int usage(PrintStream stderr, String msg) {
        stderr.println("produce: " + msg);
        stderr.println(USAGE);
        return EXIT_USAGE;
    }

    private static int indexOf(byte[] b, byte x) {
        for (int i = 0; i < b.length; i++) {
            if (b[i] == x) {
                return i;
            }
        }
        return -1;
    }

    /** The JSON lines on stdout, one whole line at a time, flushed at once (a driver may be waiting). */
    private static final class Out {
        private final OutputStream out;
        private IOException broken;

        Out(OutputStream out) {
            this.out = out;
        }

        void result(RecordMetadata md, PctlException e) {
            if (e == null) {
                write(String.format("{\"pseq\": %d, \"acked\": true, \"partition\": %d, \"epoch\": %d, \"seq\": %d}",
                        md.producerSeq(), md.partition(), md.epoch(), md.sequence()));
            } else {
                write(String.format("{\"pseq\": %d, \"acked\": false, \"partition\": %s, \"epoch\": %s, \"seq\": null, \"error\": %s}",
                        md.producerSeq(), md.partition() < 0 ? "null" : md.partition(), md.epoch() < 0 ? "null" : md.epoch(), Json.quote(e.getMessage())));
            }
        }

        synchronized void write(String line) {
            if (broken != null) {
                return;
            }
            try {
                out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
                out.flush();
            } catch (IOException e) {
                broken = e;
            }
        }

        synchronized void flush() {
            try {
                out.flush();
            } catch (IOException e) {
                broken = e;
            }
        }
    }

    /** Lines of standard input as bytes, without their final "\n"; a last line without one counts. */
    static final class LineReader {
        private final InputStream in;
        private byte[] buf = new byte[256];

        LineReader(InputStream in) {
            this.in = in;
        }

        byte[] next() throws IOException {
            int n = 0;
            while (true) {
                int c = in.read();
                if (c < 0) {
                    return n == 0 ? null : Arrays.copyOf(buf, n);
                }
                if (c == '\n') {
                    return Arrays.copyOf(buf, n);
                }
                if (n == buf.length) {
                    buf = Arrays.copyOf(buf, 2 * n);
                }
                buf[n++] = (byte) c;
            }
        }
    }
}
