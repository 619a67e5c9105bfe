package dev.pctl;

/**
 * The nats-server version pctl's clients need, and the check that refuses an older server
 * (spec/protocol.md §5.1 for the producer: fast batches; §6.1 for a consumer: the conditioned
 * write that proves a group absent, which a server older than 2.11 ignores). The producer and the
 * consumer share it: one minimum, one comparison, one form of message. Internal.
 */
final class ServerVersion {
    /** The oldest nats-server the producer and the consumer work with. */
    static final String MIN = "2.14.0";

    private ServerVersion() {}

    /**
     * Whether a "major.minor.patch[-suffix]" version (a leading "v" allowed) is at least
     * major.minor. The patch and a pre-release suffix are not compared: "2.14.0-RC.1" is 2.14.
     */
    static boolean atLeast(String v, int major, int minor) {
        if (v == null) {
            return false;
        }
        if (v.startsWith("v")) {
            v = v.substring(1);
        }
        String[] parts = v.split("\\.", 3);
        if (parts.length < 2) {
            return false;
        }
        try {
            int ma = Integer.parseInt(parts[0]);
            int mi = Integer.parseInt(parts[1].split("-", 2)[0]);
            return ma > major || ma == major && mi >= minor;
        } catch (NumberFormatException e) {
            return false;
        }
    }

    /**
     * Throws {@link UnavailableException} when {@code v} (what the server at {@code server} reports
     * in INFO) is older than {@link #MIN}; {@code who} needs it ("pctl's consumer"), for {@code why}
     * (the feature, the spec).
     */
    static void check(String v, String server, String who, String why) {
        if (!atLeast(v, 2, 14)) {
            throw new UnavailableException(String.format(
                    "the server at %s runs nats-server \"%s\"; %s needs %s or later on every node (%s): upgrade the NATS servers",
                    server, v, who, MIN, why));
        }
    }

    /** {@link #check} on the server a client is connected to. */
    static void require(PctlClient client, String who, String why) {
        String v = client.connection().getServerInfo() == null ? null : client.connection().getServerInfo().getVersion();
        check(v, client.options().server(), who, why);
    }
}
