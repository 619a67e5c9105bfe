// A runnable example of the pctl Java SDK: partition offline, then produce to a topic.
//
//   sdk/java/setup
//   pctl serve --data ./pctl-data &
//   pctl topic create orders --partitions 6 --partitioner kafka-murmur2 --creds ./pctl-data/admin.nk
//   PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/producer.nk \
//     java -cp "sdk/java/target/pctl-sdk.jar:sdk/java/target/lib/*" sdk/java/examples/Quickstart.java orders
//
// (Java 17 runs a single source file directly; no build step for the example itself.)

import dev.pctl.PctlClient;
import dev.pctl.PctlException;
import dev.pctl.Partitioner;
import dev.pctl.Producer;
import dev.pctl.ProducerOptions;
import dev.pctl.ProducerRecord;
import dev.pctl.RecordMetadata;
import dev.pctl.TopicDescriptor;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

public class Quickstart {
    public static void main(String[] args) throws Exception {
        String topic = args.length > 0 ? args[0] : "orders";

        // Connects to $PCTL_SERVER with the NKey seed file $PCTL_CREDS (producer.nk).
        try (PctlClient client = PctlClient.connect()) {
            TopicDescriptor desc = client.topic(topic);
            System.out.println(desc);

            // The topic's own partitioner, fetched by digest and verified; usable offline too
            // (Partitioner.load(Path.of("plugins/builtin/kafka-murmur2.wasm"))).
            Partitioner partitioner = client.partitioner(desc.current().partitioner());
            int n = desc.current().partitions();
            System.out.printf("user-1 goes to partition %d of %d (%s)%n",
                    partitioner.partition("user-1".getBytes(StandardCharsets.UTF_8), n), n, partitioner.describe());

            try (Producer producer = client.producer(topic, ProducerOptions.builder().id("quickstart").build())) {
                List<CompletableFuture<RecordMetadata>> acks = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    // Records with the same key are delivered in this order, across epoch changes.
                    acks.add(producer.send(ProducerRecord.keyed("user-" + (i % 3), "event " + i)));
                }
                acks.add(producer.send(ProducerRecord.keyless("no key: any partition, no order")));
                for (CompletableFuture<RecordMetadata> f : acks) {
                    RecordMetadata md = f.join();
                    System.out.printf("record %d: partition %d, epoch %d, sequence %d%s%n",
                            md.producerSeq(), md.partition(), md.epoch(), md.sequence(), md.duplicate() ? " (duplicate)" : "");
                }
            } // close() waits for every record's fate
        } catch (PctlException e) {
            System.err.println("quickstart: " + e.code().wire() + ": " + e.getMessage());
            System.exit(1);
        }
    }
}
