// A runnable example of the pctl Java SDK's consumer: one member of a consumer group that prints
// its assignment, every record, and the key handover of an epoch change.
//
//   PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/consumer.nk \
//     java -cp "sdk/java/target/pctl-sdk.jar:sdk/java/target/lib/*" sdk/java/examples/ConsumerQuickstart.java orders [GROUP]
//
// Start it twice with the same GROUP and the members share the partitions (the "assigned" and
// "revoked" lines); grow the topic meanwhile (pctl topic expand orders --partitions 6) and the keys
// that move are handed over in order (the "keys" lines). It stops after 5 s without a record.
// (Java 17 runs a single source file directly; no build step for the example itself.)

import dev.pctl.Consumer;
import dev.pctl.ConsumerOptions;
import dev.pctl.ConsumerRecord;
import dev.pctl.KeyChange;
import dev.pctl.NotFoundException;
import dev.pctl.PctlClient;
import dev.pctl.PctlException;
import dev.pctl.RebalanceListener;
import java.time.Duration;
import java.util.Collection;

public class ConsumerQuickstart {
    public static void main(String[] args) {
        String topic = args.length > 0 ? args[0] : "orders";
        String group = args.length > 1 ? args[1] : "billing";
        RebalanceListener listener = new RebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<Integer> partitions) {
                System.out.println("assigned partitions " + partitions);
            }

            @Override
            public void onPartitionsRevoked(Collection<Integer> partitions) {
                System.out.println("revoked partitions " + partitions);
            }

            @Override
            public void onKeysRevoked(KeyChange ch) {
                System.out.printf("keys of partition %d leave it (epoch %d -> %d)%n", ch.partition(), ch.fromEpoch(), ch.toEpoch());
            }

            @Override
            public void onKeysAssigned(KeyChange ch) {
                System.out.printf("keys of partition %d arrive in partition %d (epoch %d)%n", ch.parent(), ch.partition(), ch.toEpoch());
            }
        };
        // $PCTL_SERVER and $PCTL_CREDS (consumer.nk)
        try (PctlClient client = PctlClient.connect();
                Consumer consumer = client.consumer(topic, ConsumerOptions.builder(group).fromBeginning(true).listener(listener).build())) {
            int n = 0;
            long idleSince = System.nanoTime();
            while (System.nanoTime() - idleSince < Duration.ofSeconds(5).toNanos()) {
                // The records of one poll are acknowledged by the next poll (auto-commit).
                for (ConsumerRecord r : consumer.poll(Duration.ofMillis(500))) {
                    System.out.printf("partition %d epoch %d seq %d: %s = %s%n", r.partition(), r.epoch(), r.sequence(),
                            r.hasKey() ? r.keyString() : "(no key)", r.valueString());
                    n++;
                    idleSince = System.nanoTime();
                }
            }
            System.out.printf("%d records; member %s of group %s owned %s%n", n, consumer.member(), group, consumer.assignment());
        } catch (NotFoundException e) {
            System.err.printf("no topic %s: create it with 'pctl topic create %s --partitions 3 --partitioner kafka-murmur2'%n", topic, topic);
            System.exit(1);
        } catch (PctlException e) {
            System.err.println("consumer: " + e.code().wire() + ": " + e.getMessage());
            System.exit(1);
        }
    }
}
