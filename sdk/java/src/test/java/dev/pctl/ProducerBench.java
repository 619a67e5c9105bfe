package dev.pctl;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/**
 * Producer throughput: the SDK's fast-batch producer (spec/protocol.md §5.1.2) against the
 * producer it replaced ({@link PlainPublishProducer}: one JetStream request/reply publish per
 * record through jnats, up to 1024 in flight per partition), in the same run, on the same broker
 * and topic; prints records/s of each and the ratio.
 *
 * <p>Starts {@code pctl serve} (built from this checkout, as the tests do), creates a topic with 4
 * partitions, then alternates, after a warm-up round of each, {@code rounds} counted rounds of
 * each producer sending {@code records} keyed records (1000 keys, 100-byte values) and flushing.
 * The broker is another process on the same machine.
 *
 * <pre>
 *   sdk/java/bench producer [records] [rounds]
 * </pre>
 */
public final class ProducerBench {
    private ProducerBench() {}

    private record Run(double rate, double cpuPerRecordMicros) {}

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 100_000;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        byte[] value = new byte[100];
        java.util.Arrays.fill(value, (byte) 'v');
        List<ProducerRecord> recs = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            recs.add(ProducerRecord.keyed(("key-" + (i % 1000)).getBytes(java.nio.charset.StandardCharsets.UTF_8), value));
        }
        try (Broker b = Broker.start(); PctlClient c = PctlClient.connect(b.options(b.producer))) {
            b.pctlOk(null, "topic", "create", "bench", "--partitions", "4", "--partitioner", "kafka-murmur2");
            List<Double> plain = new ArrayList<>();
            List<Double> fast = new ArrayList<>();
            List<Double> ratios = new ArrayList<>();
            List<Double> plainCpu = new ArrayList<>();
            List<Double> fastCpu = new ArrayList<>();
            for (int r = 0; r < rounds + 1; r++) { // the first round warms the JIT up and is not counted
                Run p = run(recs, () -> {
                    PlainPublishProducer pp = new PlainPublishProducer(c, "bench", ProducerOptions.defaults());
                    return new Handle(pp::send, () -> pp.flush(), pp::close);
                });
                Run f = run(recs, () -> {
                    Producer fp = c.producer("bench");
                    return new Handle(fp::send, () -> fp.flush(), fp::close);
                });
                System.out.printf("round %d%s: plain publishes %.0f rec/s (%.1f us CPU/record), fast batches %.0f rec/s (%.1f us CPU/record): %.2fx%n", r,
                        r == 0 ? " (warm-up)" : "", p.rate(), p.cpuPerRecordMicros(), f.rate(), f.cpuPerRecordMicros(), f.rate() / p.rate());
                if (r > 0) {
                    plain.add(p.rate());
                    fast.add(f.rate());
                    ratios.add(f.rate() / p.rate());
                    plainCpu.add(p.cpuPerRecordMicros());
                    fastCpu.add(f.cpuPerRecordMicros());
                }
            }
            System.out.printf("%d records x %d rounds, 4 partitions: plain publishes (median) %.0f rec/s, fast batches %.0f rec/s: %.2fx (median of per-round ratios %.2fx); CPU per record %.1f / %.1f us%n",
                    n, rounds, median(plain), median(fast), median(fast) / median(plain), median(ratios), median(plainCpu), median(fastCpu));
        }
    }

    private record Handle(Function<ProducerRecord, CompletableFuture<RecordMetadata>> send, Runnable flush, Runnable close) {}

    private static Run run(List<ProducerRecord> recs, java.util.function.Supplier<Handle> open) {
        Handle h = open.get();
        try {
            long cpu0 = ManagementFactory.getThreadMXBean().isCurrentThreadCpuTimeSupported() ? processCpu() : 0;
            long t0 = System.nanoTime();
            List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>(recs.size());
            for (ProducerRecord r : recs) {
                fs.add(h.send().apply(r));
            }
            h.flush().run();
            long t = System.nanoTime() - t0;
            long cpu = processCpu() - cpu0;
            for (CompletableFuture<RecordMetadata> f : fs) {
                f.join();
            }
            return new Run(recs.size() / (t / 1e9), cpu / 1e3 / recs.size());
        } finally {
            h.close().run();
        }
    }

    private static long processCpu() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) {
            return sun.getProcessCpuTime();
        }
        return 0;
    }

    private static double median(List<Double> l) {
        List<Double> s = new ArrayList<>(l);
        Collections.sort(s);
        return s.isEmpty() ? 0 : s.get(s.size() / 2);
    }
}
