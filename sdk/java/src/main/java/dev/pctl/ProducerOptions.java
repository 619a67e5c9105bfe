package dev.pctl;

import io.nats.client.NUID;
import java.util.regex.Pattern;

/**
 * How a {@link Producer} behaves. Immutable; build one with {@link #builder()}. Every setting
 * documents its default.
 */
public final class ProducerOptions {
    private static final Pattern ID = Pattern.compile("[A-Za-z0-9_-]{1,64}");

    private final String id;
    private final int maxInFlight;
    private final int maxBuffered;

    private ProducerOptions(Builder b) {
        this.id = b.id == null ? NUID.nextGlobal() : b.id;
        this.maxInFlight = b.maxInFlight;
        this.maxBuffered = b.maxBuffered;
    }

    /** A builder with every setting at its default. */
    public static Builder builder() {
        return new Builder();
    }

    /** Every setting at its default. */
    public static ProducerOptions defaults() {
        return builder().build();
    }

    /** The producer id. */
    public String id() {
        return id;
    }

    /** Most unacknowledged publishes per partition. */
    public int maxInFlight() {
        return maxInFlight;
    }

    /** Most records sent but not yet acknowledged or failed. */
    public int maxBuffered() {
        return maxBuffered;
    }

    /** Builds {@link ProducerOptions}. */
    public static final class Builder {
        private String id;
        private int maxInFlight = 1024;
        private int maxBuffered = 65536;

        private Builder() {}

        /**
         * The producer id, in every record's {@code Pctl-Producer} header and deduplication id
         * ({@code Nats-Msg-Id: <id>-<seq>}): 1 to 64 of {@code A-Z a-z 0-9 _ -}. Records are
         * deduplicated by (id, sequence) for two minutes, so reusing an id for the same input
         * after a failure stores nothing twice; never reuse one for different input within two
         * minutes. Default: random.
         */
        public Builder id(String id) {
            if (id != null && !ID.matcher(id).matches()) {
                throw new BadRequestException("producer id \"" + id + "\": 1 to 64 characters of A-Z a-z 0-9 _ - (no dots, wildcards or spaces)");
            }
            this.id = id;
            return this;
        }

        /** Most unacknowledged publishes per partition (pipelining). Default 1024. */
        public Builder maxInFlight(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("maxInFlight must be at least 1");
            }
            this.maxInFlight = n;
            return this;
        }

        /** Most records sent but not yet acknowledged; {@code send} blocks beyond it. Default 65536. */
        public Builder maxBuffered(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("maxBuffered must be at least 1");
            }
            this.maxBuffered = n;
            return this;
        }

        /** The options. */
        public ProducerOptions build() {
            return new ProducerOptions(this);
        }
    }
}
