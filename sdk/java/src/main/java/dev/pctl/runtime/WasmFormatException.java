package dev.pctl.runtime;

/** Bytes that are not a well-formed module, or that use a feature spec/abi-v1.md §7.1 forbids. */
final class WasmFormatException extends Exception {
    private static final long serialVersionUID = 1L;

    final boolean unsupportedFeature;

    WasmFormatException(boolean unsupportedFeature, String where, int offset, String msg) {
        super(where + ": " + msg + " at byte " + offset);
        this.unsupportedFeature = unsupportedFeature;
    }
}
