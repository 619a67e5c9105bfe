package dev.pctl;

/**
 * kafka-murmur2 in plain Java, from spec/builtins.md (Kafka's Utils.murmur2 and toPositive): the
 * baseline of the partitioning benchmark and a second reference in the tests; the code is
 * NativeBuiltins', the native fast path, pinned to the module and to spec/vectors by
 * NativeBuiltinsTest.
 */
final class NativeMurmur2 {
    private NativeMurmur2() {}

    static int murmur2(byte[] k) {
        return NativeBuiltins.murmur2(k);
    }

    static int partition(byte[] key, int n) {
        return NativeBuiltins.kafkaMurmur2(key, n);
    }
}
