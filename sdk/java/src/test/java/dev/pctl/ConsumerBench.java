package dev.pctl;

import io.nats.client.Connection;
import io.nats.client.MessageConsumer;
import io.nats.client.OrderedConsumerContext;
import io.nats.client.StreamContext;
import io.nats.client.api.OrderedConsumerConfiguration;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Consumer throughput: the SDK's consumer-group member (placement checks, gates, leases, commits)
 * against raw JetStream consumption with jnats on the same streams, in the same run; prints the
 * ratio (target: at least 0.8x).
 *
 * <p>Starts {@code pctl serve} (built from this checkout, as the tests do), creates a topic with 4
 * partitions, produces half the records, grows it to 8 partitions (an epoch change: records of
 * the new epoch are gated on their keys' old partitions until the group drained them), produces
 * the other half. Then, {@code rounds} times and alternating:
 *
 * <ul>
 *   <li>raw: jnats ordered consumers (the idiomatic "simplified" API, {@code consume(handler)}), one
 *       per partition stream, until every message is read; jnats parses every message and its
 *       headers; no order across partitions, no group, no gates: the floor any consumer pays;
 *   <li>sdk: one member of a new group ({@code fromBeginning}) polling every record, auto-commit,
 *       gating on (the default);
 *   <li>sdk-ungated: the same with gating off (what the gates themselves cost).
 * </ul>
 *
 * <pre>
 *   sdk/java/bench consumer [records] [rounds]
 * </pre>
 */
public final class ConsumerBench {
    private ConsumerBench() {}

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        try (Broker b = Broker.start()) {
            b.pctlOk(null, "topic", "create", "bench", "--partitions", "4", "--partitioner", "kafka-murmur2");
            long t0 = System.nanoTime();
            produce(b, 0, n / 2);
            b.pctlOk(null, "topic", "repartition", "bench", "--partitions", "8");
            produce(b, n / 2, n);
            System.out.printf("produced %d records (4 partitions, then 8) in %.1f s%n", n, (System.nanoTime() - t0) / 1e9);
            List<Double> raw = new ArrayList<>();
            List<Double> sdk = new ArrayList<>();
            List<Double> ungated = new ArrayList<>();
            List<Double> ratios = new ArrayList<>();
            List<Double> rawCpu = new ArrayList<>();
            List<Double> sdkCpu = new ArrayList<>();
            int g = 0;
            for (int r = 0; r < rounds + 1; r++) { // the first round warms the JIT up and is not counted
                long c0 = cpu();
                double a = rawRound(b, n);
                long c1 = cpu();
                double s = sdkRound(b, n, "g" + (g++), true);
                long c2 = cpu();
                double u = sdkRound(b, n, "g" + (g++), false);
                double ac = (c1 - c0) / (double) n;
                double sc = (c2 - c1) / (double) n;
                System.out.printf("round %d%s: raw jnats %.0f rec/s (%.1f us CPU/record), sdk %.0f rec/s (%.1f us CPU/record), sdk ungated %.0f rec/s%n", r,
                        r == 0 ? " (warm-up)" : "", a, ac / 1000, s, sc / 1000, u);
                if (r > 0) {
                    raw.add(a);
                    sdk.add(s);
                    ungated.add(u);
                    ratios.add(s / a);
                    rawCpu.add(ac);
                    sdkCpu.add(sc);
                }
            }
            double mr = median(raw);
            double ms = median(sdk);
            double mu = median(ungated);
            System.out.printf("median of %d rounds: raw jnats ordered consumers %.0f records/s; sdk member (gating on) %.0f records/s = %.2fx raw; "
                    + "sdk ungated %.0f records/s (gates cost %.2fx)%n", rounds, mr, ms, ms / mr, mu, mu / ms);
            System.out.printf("median of the per-round ratios sdk/raw: %.2fx; consumer JVM CPU per record: raw %.1f us, sdk %.1f us (raw/sdk %.2fx)%n",
                    median(ratios), median(rawCpu) / 1000, median(sdkCpu) / 1000, median(rawCpu) / median(sdkCpu));
        }
    }

    /** This JVM's CPU time so far, in nanoseconds. */
    private static long cpu() {
        return ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static double median(List<Double> l) {
        List<Double> s = new ArrayList<>(l);
        Collections.sort(s);
        return s.get(s.size() / 2);
    }

    private static void produce(Broker b, int from, int to) {
        try (PctlClient c = PctlClient.connect(b.options(b.producer)); Producer p = c.producer("bench")) {
            List<CompletableFuture<RecordMetadata>> last = new ArrayList<>();
            for (int i = from; i < to; i++) {
                CompletableFuture<RecordMetadata> f = p.send(ProducerRecord.keyed("key-" + (i % 5000), "value-" + i));
                if (i == to - 1) {
                    last.add(f);
                }
            }
            p.flush();
            last.forEach(CompletableFuture::join);
        }
    }

    private static double rawRound(Broker b, int n) throws Exception {
        try (PctlClient c = PctlClient.connect(b.options(b.consumer))) {
            Connection nc = c.connection();
            AtomicLong got = new AtomicLong();
            CountDownLatch done = new CountDownLatch(1);
            List<MessageConsumer> cs = new ArrayList<>();
            long t0 = System.nanoTime();
            for (int q = 0; q < 8; q++) {
                StreamContext sc = nc.getStreamContext("PCTL_bench_" + q);
                OrderedConsumerContext oc = sc.createOrderedConsumer(new OrderedConsumerConfiguration().filterSubject("pctl.data.bench.>"));
                cs.add(oc.consume(m -> {
                    if (m.getHeaders() != null && m.getHeaders().getFirst("Pctl-Fence") != null) {
                        return;
                    }
                    if (got.incrementAndGet() == n) {
                        done.countDown();
                    }
                }));
            }
            if (!done.await(300, TimeUnit.SECONDS)) {
                throw new IllegalStateException("raw: only " + got.get() + " of " + n);
            }
            double rate = n / ((System.nanoTime() - t0) / 1e9);
            for (MessageConsumer mc : cs) {
                mc.stop();
            }
            return rate;
        }
    }

    private static double sdkRound(Broker b, int n, String group, boolean gating) {
        try (PctlClient c = PctlClient.connect(b.options(b.consumer));
                Consumer cn = c.consumer("bench", ConsumerOptions.builder(group).fromBeginning(true).gating(gating).build())) {
            long got = 0;
            long t0 = System.nanoTime();
            long deadline = t0 + TimeUnit.SECONDS.toNanos(300);
            while (got < n) {
                got += cn.poll(Duration.ofMillis(500)).size();
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("sdk: only " + got + " of " + n);
                }
            }
            return n / ((System.nanoTime() - t0) / 1e9);
        }
    }
}
