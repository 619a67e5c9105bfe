package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

@Tag("broker")
class ConsumerSmokeTest {
    @Test
    void smoke() throws Exception {
        try (Broker b = Broker.start()) {
            b.pctlOk(null, "topic", "create", "t", "--partitions", "3", "--partitioner", "kafka-murmur2");
            try (PctlClient pc = PctlClient.connect(b.options(b.producer)); Producer p = pc.producer("t")) {
                for (int i = 0; i < 300; i++) {
                    p.send(ProducerRecord.keyed("k" + (i % 7), "" + i));
                }
                p.flush();
            }
            b.pctlOk(null, "topic", "repartition", "t", "--partitions", "5");
            try (PctlClient pc = PctlClient.connect(b.options(b.producer)); Producer p = pc.producer("t")) {
                for (int i = 300; i < 600; i++) {
                    p.send(ProducerRecord.keyed("k" + (i % 7), "" + i));
                }
                p.flush();
            }
            List<ConsumerRecord> got = new ArrayList<>();
            try (PctlClient cc = PctlClient.connect(b.options(b.consumer));
                    Consumer cn = cc.consumer("t", ConsumerOptions.builder("g").fromBeginning(true).logger(System.err::println).build())) {
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (got.size() < 600 && System.nanoTime() < deadline) {
                    got.addAll(cn.poll(Duration.ofMillis(500)));
                }
                System.err.println(cn.stats());
            }
            assertEquals(600, got.size());
        }
    }
}
