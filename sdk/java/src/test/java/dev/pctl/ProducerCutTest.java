package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.JetStreamManagement;
import io.nats.client.api.MessageInfo;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The producer's per-key order under lost connections (spec/protocol.md §5.1.2): a TCP proxy cuts
 * the producer's connections again and again while it pipelines thousands of keyed records; then
 * every partition stream is read in stream order, and no key's records may be stored out of send
 * order, none twice, and every acknowledged record must be there. The expected order comes from
 * the test (the send order it chose), not from the producer.
 *
 * <p>{@code -Dpctl.producer=plain} runs the same test on the producer as it was before fast
 * batches ({@link PlainPublishProducer}: plain JetStream publishes through jnats, which re-sends
 * what it buffered after a reconnect): it fails (records stored out of order).
 */
@Tag("broker")
class ProducerCutTest {
    /** What the test needs of a producer, so the same test runs on the old one. */
    private interface Sender extends AutoCloseable {
        CompletableFuture<RecordMetadata> send(ProducerRecord r);

        boolean flush(Duration d);

        String stats();

        @Override
        void close();
    }

    private static Sender open(PctlClient c, String topic, ProducerOptions po) {
        if ("plain".equals(System.getProperty("pctl.producer"))) {
            PlainPublishProducer p = new PlainPublishProducer(c, topic, po);
            return new Sender() {
                public CompletableFuture<RecordMetadata> send(ProducerRecord r) {
                    return p.send(r);
                }

                public boolean flush(Duration d) {
                    return p.flush(d);
                }

                public String stats() {
                    return "plain-publish producer";
                }

                public void close() {
                    p.close();
                }
            };
        }
        Producer p = c.producer(topic, po);
        return new Sender() {
            public CompletableFuture<RecordMetadata> send(ProducerRecord r) {
                return p.send(r);
            }

            public boolean flush(Duration d) {
                return p.flush(d);
            }

            public String stats() {
                return p.settled() + " batches settled";
            }

            public void close() {
                p.close();
            }
        };
    }

    @Test
    void cutConnectionsKeepPerKeyStorageOrder() throws Exception {
        int partitions = 4;
        int keys = 64;
        int total = Integer.getInteger("pctl.cut.records", 20000);
        String topic = "cut";
        try (Broker b = Broker.start(); CutProxy proxy = new CutProxy(b.url)) {
            b.pctlOk(null, "topic", "create", topic, "--partitions", Integer.toString(partitions), "--partitioner", "kafka-murmur2");
            List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
            ClientOptions o = ClientOptions.builder().server(proxy.url).creds(b.producer).ackTimeout(Duration.ofSeconds(2)).build();
            AtomicBoolean stop = new AtomicBoolean();
            String stats;
            try (PctlClient c = PctlClient.connect(o); Sender p = open(c, topic, ProducerOptions.builder().id("cut-1").maxInFlight(256).build())) {
                Random rnd = new Random(7);
                // Each cut is a network failure in the middle of a stream of publishes: for a few
                // tens of milliseconds the client's bytes reach no server (they are written, and
                // sit in socket buffers), then every connection drops with what it held; the
                // client reconnects while the application keeps sending.
                Thread cutter = new Thread(() -> {
                    while (!stop.get() && proxy.cuts.get() < 30) {
                        try {
                            Thread.sleep(60 + rnd.nextInt(150));
                            proxy.holdRequests(true);
                            Thread.sleep(20 + rnd.nextInt(60));
                        } catch (InterruptedException e) {
                            return;
                        }
                        proxy.cut();
                    }
                }, "cutter");
                for (int i = 0; i < total; i++) {
                    fs.add(p.send(ProducerRecord.keyed("key-" + (i % keys), Integer.toString(i))));
                    if (i == total / 20) {
                        cutter.start(); // from here on, with records in flight
                    }
                    if (i % 8 == 0) {
                        Thread.sleep(1); // a steady stream (about 5,000 records/s), not one burst
                    }
                }
                boolean flushed = p.flush(Duration.ofMinutes(3));
                stop.set(true);
                cutter.join();
                assertTrue(flushed, "every record has its fate within 3 minutes");
                stats = p.stats();
            }
            Set<Long> acked = new HashSet<>();
            int failed = 0;
            for (CompletableFuture<RecordMetadata> f : fs) {
                try {
                    acked.add(f.join().producerSeq());
                } catch (RuntimeException e) {
                    failed++;
                }
            }
            // Every partition stream, in stream order, through the broker directly (admin).
            Map<String, Long> last = new HashMap<>();
            Set<Long> stored = new HashSet<>();
            List<String> violations = new ArrayList<>();
            try (PctlClient admin = PctlClient.connect(b.options(b.admin))) {
                JetStreamManagement jsm = admin.connection().jetStreamManagement();
                for (int q = 0; q < partitions; q++) {
                    String stream = "PCTL_" + topic + "_" + q;
                    long lastSeq = jsm.getStreamInfo(stream).getStreamState().getLastSequence();
                    for (long s = 1; s <= lastSeq; s++) {
                        MessageInfo m = jsm.getMessage(stream, s);
                        if (m.getHeaders() == null || m.getHeaders().getFirst("Pctl-Seq") == null) {
                            continue; // a fence marker
                        }
                        long pseq = Long.parseLong(m.getHeaders().getFirst("Pctl-Seq"));
                        String value = new String(m.getData(), java.nio.charset.StandardCharsets.UTF_8);
                        String k = "key-" + ((pseq - 1) % keys);
                        assertEquals(Long.toString(pseq - 1), value, "value of record " + pseq);
                        if (!stored.add(pseq)) {
                            violations.add("record " + pseq + " stored twice (again at " + stream + " seq " + s + ")");
                        }
                        Long prev = last.put(k, pseq);
                        if (prev != null && prev > pseq) {
                            violations.add(k + ": record " + pseq + " stored after record " + prev + " (" + stream + " seq " + s + ")");
                        }
                    }
                }
            }
            int missing = 0;
            for (long s : acked) {
                if (!stored.contains(s)) {
                    missing++;
                }
            }
            System.out.printf("cutConnectionsKeepPerKeyStorageOrder: %d records, %d cuts, %d acknowledged, %d failed, %d stored, %d order/duplicate violations, %d acknowledged but missing (%s)%n",
                    total, proxy.cuts.get(), acked.size(), failed, stored.size(), violations.size(), missing, stats);
            assertTrue(proxy.cuts.get() >= 5, "the proxy cut the connections while records were in flight: " + proxy.cuts.get() + " cuts");
            assertTrue(violations.isEmpty(), violations.size() + " violations, first: " + violations.subList(0, Math.min(10, violations.size())));
            assertEquals(0, missing, "acknowledged records missing from the streams");
            assertEquals(total, acked.size(), "every record is acknowledged (a lost connection is retried, never a failure)");
        }
    }
}
