package dev.pctl.crosscheck;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.internals.AppInfoParser;
import org.apache.kafka.common.utils.Utils;

/**
 * Writes spec/vectors/kafka-murmur2.json and linear-murmur2.json from the real Kafka Java
 * client. Usage: KafkaVectors KEYS_TXT OUT_DIR DATE.
 *
 * kafka-murmur2 is the client's own keyed path, BuiltInPartitioner.partitionForKey; every
 * case is also checked against Utils.toPositive(Utils.murmur2(key)) % n as builtins.md
 * states it. linear-murmur2 takes the hash from Utils.murmur2 and applies the linear
 * hashing rule, written here from spec/builtins.md in 64-bit arithmetic.
 */
public final class KafkaVectors {
    record Case(byte[] key, String hex, int n) {}

    public static void main(String[] args) throws IOException {
        if (args.length != 3) {
            System.err.println("usage: KafkaVectors KEYS_TXT OUT_DIR DATE");
            System.exit(2);
        }
        List<Case> cases = readCases(Path.of(args[0]));
        Path out = Path.of(args[1]);
        String date = args[2];
        String version = AppInfoParser.getVersion();

        List<int[]> kafka = new ArrayList<>();
        List<int[]> linear = new ArrayList<>();
        for (Case c : cases) {
            int p = BuiltInPartitioner.partitionForKey(c.key(), c.n());
            int viaUtils = Utils.toPositive(Utils.murmur2(c.key())) % c.n();
            if (p != viaUtils) {
                throw new IllegalStateException("partitionForKey and toPositive(murmur2) % n disagree for " + c.hex());
            }
            kafka.add(new int[] {c.n(), p});
            linear.add(new int[] {c.n(), linear(Utils.toPositive(Utils.murmur2(c.key())), c.n())});
        }
        write(out.resolve("kafka-murmur2.json"), "kafka-murmur2",
            "org.apache.kafka:kafka-clients:" + version
                + " BuiltInPartitioner.partitionForKey (checked = Utils.toPositive(Utils.murmur2(key)) % n)"
                + " via tools/crosscheck/java (generated " + date + ")",
            cases, kafka);
        write(out.resolve("linear-murmur2.json"), "linear-murmur2",
            "org.apache.kafka:kafka-clients:" + version
                + " Utils.toPositive(Utils.murmur2(key)) with the linear hashing rule of spec/builtins.md in Java"
                + " via tools/crosscheck/java (generated " + date + ")",
            cases, linear);
    }

    /** The linear hashing rule of spec/builtins.md, for h = toPositive(murmur2(key)). */
    static int linear(int h, int n) {
        int level = 31 - Integer.numberOfLeadingZeros(n); // floor(log2(n))
        long b = 1L << level;                             // b <= n < 2b
        long p = (long) h % (2 * b);
        if (p >= n) {
            p -= b;
        }
        return (int) p;
    }

    static List<Case> readCases(Path keys) throws IOException {
        HexFormat hexf = HexFormat.of();
        List<Case> cases = new ArrayList<>();
        for (String line : Files.readAllLines(keys, StandardCharsets.UTF_8)) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int sp = line.indexOf(' ');
            if (sp < 0 || line.charAt(sp + 1) != 'x') {
                throw new IllegalArgumentException("bad line in " + keys + ": " + line);
            }
            String hex = line.substring(sp + 2);
            byte[] key = hexf.parseHex(hex);
            for (String n : line.substring(0, sp).split(",")) {
                cases.add(new Case(key, hex, Integer.parseInt(n)));
            }
        }
        return cases;
    }

    static void write(Path file, String partitioner, String source, List<Case> cases, List<int[]> results)
            throws IOException {
        try (Writer w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            w.write("{\"partitioner\":\"" + partitioner + "\",\"source\":\"" + source + "\",\n \"cases\":[\n");
            for (int i = 0; i < cases.size(); i++) {
                w.write("  {\"key_hex\":\"" + cases.get(i).hex() + "\",\"n\":" + results.get(i)[0]
                    + ",\"partition\":" + results.get(i)[1] + "}" + (i + 1 < cases.size() ? ",\n" : "\n"));
            }
            w.write(" ]}\n");
        }
        System.err.println("KafkaVectors: " + cases.size() + " cases -> " + file);
    }
}
