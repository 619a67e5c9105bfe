package dev.pctl;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * Offline partitioning throughput: plugins/builtin/kafka-murmur2.wasm through the SDK's
 * {@link Partitioner} (Chicory, compiled to JVM bytecode), single calls and batches, against the
 * same function in plain Java ({@link NativeMurmur2}, from spec/builtins.md), measured in the same
 * run. A plain harness (no JMH): warm-up rounds, then the best of several timed rounds for each.
 *
 * <pre>
 *   sdk/java/bench [keys (200000)] [rounds (25)]
 * </pre>
 */
public final class PartitionBench {
    private PartitionBench() {}

    private interface Body {
        long run();
    }

    public static void main(String[] args) throws Exception {
        int nKeys = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 25;
        int n = 1000;
        Random rnd = new Random(42);
        List<byte[]> keys = new ArrayList<>(nKeys);
        for (int i = 0; i < nKeys; i++) {
            byte[] k = new byte[8 + rnd.nextInt(33)]; // 8 to 40 bytes, like ids and user names
            rnd.nextBytes(k);
            keys.add(k);
        }
        Path wasm = Repo.path("plugins/builtin/kafka-murmur2.wasm");
        try (Partitioner p = Partitioner.load(wasm)) {
            long check = 0;
            for (int i = 0; i < 2000; i++) {
                if (p.partition(keys.get(i), n) != NativeMurmur2.partition(keys.get(i), n)) {
                    throw new AssertionError("key " + i + ": the module and the native function disagree");
                }
            }
            System.out.printf("kafka-murmur2, %d random keys of 8-40 bytes, n=%d, best of %d rounds after warm-up (%s, %d cores)%n",
                    nKeys, n, rounds, System.getProperty("java.vm.name") + " " + System.getProperty("java.version"), Runtime.getRuntime().availableProcessors());
            double nat = best("native Java (spec/builtins.md)", nKeys, rounds, () -> {
                long s = 0;
                for (byte[] k : keys) {
                    s += NativeMurmur2.partition(k, n);
                }
                return s;
            });
            double single = best("SDK Partitioner.partition (WASM, one call per key)", nKeys, rounds, () -> {
                long s = 0;
                for (byte[] k : keys) {
                    s += p.partition(k, n);
                }
                return s;
            });
            double batch = best("SDK Partitioner.partitionAll (WASM, batches of 4096)", nKeys, rounds, () -> {
                long s = 0;
                for (int x : p.partitionAll(keys, n)) {
                    s += x;
                }
                return s;
            });
            check += (long) nat;
            System.out.printf("ratio: single calls %.1fx the native time, batches %.1fx%n", single / nat, batch / nat);
            if (check < 0) {
                System.out.println();
            }
        }
    }

    /** Runs body 3 times to warm up, then rounds times; prints and returns the best ns per key. */
    private static double best(String name, int nKeys, int rounds, Body body) {
        long sink = 0;
        for (int i = 0; i < 3; i++) {
            sink += body.run();
        }
        long bestNs = Long.MAX_VALUE;
        for (int i = 0; i < rounds; i++) {
            long t0 = System.nanoTime();
            sink += body.run();
            bestNs = Math.min(bestNs, System.nanoTime() - t0);
        }
        double perKey = (double) bestNs / nKeys;
        System.out.printf("  %-55s %8.1f ns/key  %7.2f M keys/s  (checksum %d)%n", name, perKey, 1e3 / perKey, sink % 1000);
        return perKey;
    }
}
