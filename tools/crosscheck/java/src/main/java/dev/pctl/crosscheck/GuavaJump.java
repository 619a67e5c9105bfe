package dev.pctl.crosscheck;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;

import com.google.common.hash.Hashing;

/**
 * Reads lines "KEY N" (KEY an unsigned 64-bit decimal) from stdin and prints Guava's
 * Hashing.consistentHash(KEY, N) for each. Informative only: Guava's floating-point step
 * differs from the paper's, and spec/builtins.md pins the paper's; tools/crosscheck uses
 * this to count where the two disagree.
 */
public final class GuavaJump {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split(" ");
            long key = Long.parseUnsignedLong(f[0]);
            int n = Integer.parseInt(f[1]);
            out.write(Integer.toString(Hashing.consistentHash(key, n)));
            out.write('\n');
        }
        out.flush();
    }
}
