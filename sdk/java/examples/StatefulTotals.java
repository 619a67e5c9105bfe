// An example stateful processor of the pctl Java SDK (spec/protocol.md §6.9): a per-key running
// total, kept in a local store (a map), made durable in a NATS KV bucket (one entry per key), and
// handed over between the members of its consumer group with the consumer's state handler.
//
//   PCTL_SERVER=nats://127.0.0.1:4222 PCTL_CREDS=./pctl-data/admin.nk \
//     java -cp "sdk/java/target/pctl-sdk.jar:sdk/java/target/lib/*" sdk/java/examples/StatefulTotals.java payments
//
// Every input record's value is a decimal amount; the processor adds it to its key's total. For
// each record it applies it writes the key's new state to the bucket (and waits for the
// acknowledgement) before the record is acknowledged (the next poll acknowledges it), so the bucket
// always holds every applied record's effect. The state carries the input record that last changed
// it (partition and stream sequence): a record delivered again after a member crash is recognised
// and not counted twice (a key's records are redelivered only from their own partition, after the
// ones of that partition already applied). load installs the bucket's state of the key; flush only
// drops keys from the local store, since the bucket already has them. Start it several times with
// the same group and kill one: the totals in the bucket stay exact. StateGroupTest compiles this
// file and runs it against a real broker (two members, a third joins, the topic grows 4 -> 8, a
// member crashes). (Java 17 runs a single source file directly; no build step for the example.)

import dev.pctl.Consumer;
import dev.pctl.ConsumerOptions;
import dev.pctl.ConsumerRecord;
import dev.pctl.KeySet;
import dev.pctl.PctlClient;
import dev.pctl.StateHandler;
import io.nats.client.KeyValue;
import io.nats.client.api.KeyValueConfiguration;
import io.nats.client.api.KeyValueEntry;
import io.nats.client.api.KeyValueOperation;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

public class StatefulTotals implements StateHandler {
    /** One key's state: its total, how many records were applied, and the last one (partition, sequence). */
    public record State(long total, long count, int partition, long seq) {
        String encode() {
            return total + " " + count + " " + partition + " " + seq;
        }

        static State decode(byte[] b) {
            String[] f = new String(b, StandardCharsets.UTF_8).split(" ");
            return new State(Long.parseLong(f[0]), Long.parseLong(f[1]), Integer.parseInt(f[2]), Long.parseLong(f[3]));
        }
    }

    private final KeyValue store;
    private final boolean loads; // false: a wrong processor that does not load a key's state on arrival (tests)
    private final Map<String, State> local = new ConcurrentHashMap<>(); // the keys this member holds (hex)
    public final AtomicLong applied = new AtomicLong();
    public final AtomicLong duplicates = new AtomicLong();
    public final AtomicLong loadCalls = new AtomicLong();
    public final AtomicLong flushCalls = new AtomicLong();

    public StatefulTotals(KeyValue store, boolean loads) {
        this.store = store;
        this.loads = loads;
    }

    /** A key as a bucket key (a subject token): its bytes in hex. */
    public static String token(byte[] key) {
        return "k" + HexFormat.of().formatHex(key);
    }

    /** Applies one record. */
    public void handle(ConsumerRecord r) throws Exception {
        if (r.key() == null) {
            return;
        }
        long amount = Long.parseLong(new String(r.value(), StandardCharsets.UTF_8));
        String k = token(r.key());
        State st = local.get(k);
        if (st != null && st.partition() == r.partition() && r.sequence() <= st.seq()) {
            duplicates.incrementAndGet();
            return; // applied before a crash, delivered again
        }
        State next = new State((st == null ? 0 : st.total()) + amount, (st == null ? 0 : st.count()) + 1, r.partition(), r.sequence());
        store.put(k, next.encode().getBytes(StandardCharsets.UTF_8));
        local.put(k, next);
        applied.incrementAndGet();
    }

    /** Installs the bucket's state of the keys (a key the bucket does not have starts at zero). */
    @Override
    public void load(KeySet ks) throws Exception {
        loadCalls.incrementAndGet();
        for (byte[] key : ks.keys()) {
            String k = token(key);
            local.remove(k);
            if (!loads) {
                continue;
            }
            KeyValueEntry e = store.get(k);
            if (e != null && e.getOperation() == KeyValueOperation.PUT && e.getValue() != null) {
                local.put(k, State.decode(e.getValue()));
            }
        }
    }

    /** Drops the keys: the bucket already holds their state, written before each acknowledgement. */
    @Override
    public void flush(KeySet ks) {
        flushCalls.incrementAndGet();
        for (byte[] key : ks.keys()) {
            local.remove(token(key));
        }
    }

    public static void main(String[] args) throws Exception {
        String topic = args.length > 0 ? args[0] : "payments";
        try (PctlClient c = PctlClient.connect()) {
            String bucket = topic + "-totals";
            try {
                c.connection().keyValueManagement().create(KeyValueConfiguration.builder().name(bucket).maxHistoryPerKey(1).build());
            } catch (Exception e) {
                // it exists
            }
            StatefulTotals rt = new StatefulTotals(c.connection().keyValue(bucket), true);
            try (Consumer cn = c.consumer(topic, ConsumerOptions.builder("totals").fromBeginning(true).assignor("sticky").state(rt).build())) {
                while (true) {
                    for (ConsumerRecord r : cn.poll(Duration.ofSeconds(1))) {
                        rt.handle(r);
                    }
                }
            }
        }
    }
}
