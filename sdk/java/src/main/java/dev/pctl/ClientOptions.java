package dev.pctl;

import dev.pctl.runtime.Plugin;
import java.nio.file.Path;
import java.time.Duration;

/**
 * How {@link PctlClient#connect(ClientOptions)} connects. Immutable; build one with {@link
 * #builder()}. Every setting documents its default.
 *
 * <pre>{@code
 * ClientOptions o = ClientOptions.builder()
 *         .server("nats://127.0.0.1:4222")
 *         .creds(Path.of("/var/lib/pctl/producer.nk"))
 *         .build();
 * }</pre>
 */
public final class ClientOptions {
    private final String server;
    private final Path creds;
    private final String connectionName;
    private final Duration requestTimeout;
    private final Duration ackTimeout;
    private final Duration reconnectWait;
    private final Plugin.Options runtime;
    private final boolean sharedInbox;
    private final boolean nativeBuiltins;

    private ClientOptions(Builder b) {
        this.sharedInbox = b.sharedInbox;
        this.nativeBuiltins = b.nativeBuiltins;
        this.server = b.server;
        this.creds = b.creds;
        this.connectionName = b.connectionName;
        this.requestTimeout = b.requestTimeout;
        this.ackTimeout = b.ackTimeout;
        this.reconnectWait = b.reconnectWait;
        this.runtime = b.runtime.copy();
    }

    /** A builder with every setting at its default. */
    public static Builder builder() {
        return new Builder();
    }

    /** The defaults: {@code $PCTL_SERVER} and {@code $PCTL_CREDS}, see {@link Builder}. */
    public static ClientOptions defaults() {
        return builder().build();
    }

    /** The broker's URL. */
    public String server() {
        return server;
    }

    /** The NKey seed file, or null to connect without credentials. */
    public Path creds() {
        return creds;
    }

    /** The connection name the NATS server shows. */
    public String connectionName() {
        return connectionName;
    }

    /** How long a broker API request may take. */
    public Duration requestTimeout() {
        return requestTimeout;
    }

    /** How long a publish waits for its acknowledgement before it counts as ambiguous. */
    public Duration ackTimeout() {
        return ackTimeout;
    }

    /** The pause between reconnection attempts. */
    public Duration reconnectWait() {
        return reconnectWait;
    }

    /** The WebAssembly runtime's settings for the topics' partitioners (a copy). */
    public Plugin.Options runtime() {
        return runtime.copy();
    }

    /** Whether replies go to the shared {@code _INBOX.} prefix instead of the private one. */
    public boolean sharedInbox() {
        return sharedInbox;
    }

    /** Whether a built-in's epochs are partitioned by its Java implementation (see {@link Builder#nativeBuiltins}). */
    public boolean nativeBuiltins() {
        return nativeBuiltins;
    }

    /** Builds {@link ClientOptions}. */
    public static final class Builder {
        private String server;
        private Path creds;
        private String connectionName = "pctl-java";
        private Duration requestTimeout = Duration.ofSeconds(30);
        private Duration ackTimeout = Duration.ofSeconds(5);
        private Duration reconnectWait = Duration.ofMillis(250);
        private Plugin.Options runtime = new Plugin.Options();
        private boolean sharedInbox;
        private boolean nativeBuiltins;

        private Builder() {
            String s = System.getenv("PCTL_SERVER");
            this.server = s == null || s.isEmpty() ? "nats://127.0.0.1:4222" : s;
            String c = System.getenv("PCTL_CREDS");
            this.creds = c == null || c.isEmpty() ? null : Path.of(c);
        }

        /** The broker's URL. Default: {@code $PCTL_SERVER}, else {@code nats://127.0.0.1:4222}. */
        public Builder server(String url) {
            this.server = url;
            return this;
        }

        /**
         * An NKey seed file from the broker's data directory: {@code admin.nk}, {@code producer.nk}
         * or {@code consumer.nk} (spec/protocol.md §8). Default: {@code $PCTL_CREDS}; null (or
         * unset) connects without credentials.
         */
        public Builder creds(Path seedFile) {
            this.creds = seedFile;
            return this;
        }

        /** The connection name the NATS server shows. Default {@code pctl-java}. */
        public Builder connectionName(String name) {
            this.connectionName = name;
            return this;
        }

        /** How long a broker API request (topic, plugin) may take. Default 30 s. */
        public Builder requestTimeout(Duration d) {
            this.requestTimeout = d;
            return this;
        }

        /**
         * How long a publish waits for its JetStream acknowledgement; after it the publish is
         * ambiguous and retried with the same deduplication id (spec/protocol.md §5.1). Default 5 s.
         */
        public Builder ackTimeout(Duration d) {
            this.ackTimeout = d;
            return this;
        }

        /** The pause between reconnection attempts after the broker went away. Default 250 ms. */
        public Builder reconnectWait(Duration d) {
            this.reconnectWait = d;
            return this;
        }

        /** The WebAssembly runtime's settings (limits, engine). Default: the spec's limits, compiled. */
        public Builder runtime(Plugin.Options options) {
            this.runtime = options.copy();
            return this;
        }

        /**
         * Replies (API answers, acknowledgements, the records a consumer reads) go to the inbox
         * prefix {@code _INBOX_<public key>} of the credentials, which only they may read
         * (spec/protocol.md §8.3), unless this is set: then to the shared {@code _INBOX.}, for a
         * server configured before private inboxes existed. A scoped credential needs the private
         * inbox. Default false.
         */
        public Builder sharedInbox(boolean shared) {
            this.sharedInbox = shared;
            return this;
        }

        /**
         * Producers and consumers partition with the Java implementation of a built-in when an
         * epoch's module has exactly the digest of the built-in module embedded in this library,
         * without config (the native fast path of spec/builtins.md; pinned to the modules by
         * NativeBuiltinsTest). Any other module, one that computes the same function included,
         * still runs as WebAssembly. Default false: the module, the reference, runs.
         */
        public Builder nativeBuiltins(boolean nativeBuiltins) {
            this.nativeBuiltins = nativeBuiltins;
            return this;
        }

        /** The options. */
        public ClientOptions build() {
            if (server == null || server.isEmpty()) {
                throw new IllegalArgumentException("server URL is empty");
            }
            for (Duration d : new Duration[] {requestTimeout, ackTimeout, reconnectWait}) {
                if (d == null || d.isNegative() || d.isZero()) {
                    throw new IllegalArgumentException("timeouts and waits must be positive");
                }
            }
            return new ClientOptions(this);
        }
    }
}
