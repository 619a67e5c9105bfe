package dev.pctl;

import io.nats.client.NUID;
import java.time.Duration;
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
    private final int batchSize;
    private final Duration stallTimeout;

    private ProducerOptions(Builder b) {
        this.id = b.id == null ? NUID.nextGlobal() : b.id;
        this.maxInFlight = b.maxInFlight;
        this.maxBuffered = b.maxBuffered;
        this.batchSize = b.batchSize;
        this.stallTimeout = b.stallTimeout;
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

    /** Most records of a partition sent beyond the last one the server confirmed persisted. */
    public int maxInFlight() {
        return maxInFlight;
    }

    /** Most records sent but not yet acknowledged or failed. */
    public int maxBuffered() {
        return maxBuffered;
    }

    /** Most records in one fast batch. */
    public int batchSize() {
        return batchSize;
    }

    /** How long records of a partition may see no reply before the producer re-reads the descriptor. */
    public Duration stallTimeout() {
        return stallTimeout;
    }

    /** Builds {@link ProducerOptions}. */
    public static final class Builder {
        private String id;
        private int maxInFlight = 1024;
        private int maxBuffered = 65536;
        private int batchSize = 4096;
        private Duration stallTimeout = Duration.ofMillis(250);

        private Builder() {}

        /**
         * The producer id, in every record's {@code Pctl-Producer} header and deduplication id
         * ({@code Nats-Msg-Id: <id>-<seq>-<token>}, the token random for each record:
         * spec/protocol.md §5.1.4): 1 to 64 of {@code A-Z a-z 0-9 _ -}. An id must belong to one
         * producer at a time. Default: random.
         */
        public Builder id(String id) {
            if (id != null && !ID.matcher(id).matches()) {
                throw new BadRequestException("producer id \"" + id + "\": 1 to 64 characters of A-Z a-z 0-9 _ - (no dots, wildcards or spaces)");
            }
            this.id = id;
            return this;
        }

        /**
         * Most records of a partition in flight beyond the last one the server confirmed
         * persisted (pipelining inside a fast batch; the server acknowledges every quarter of it).
         * Default 1024.
         */
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

        /**
         * Most records in one fast batch before the producer commits it (it also commits whenever
         * its queue for the partition runs empty). Default 4096.
         */
        public Builder batchSize(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("batchSize must be at least 1");
            }
            this.batchSize = n;
            return this;
        }

        /**
         * When records of a partition see no reply for this long, the producer re-reads the topic's
         * descriptor (a fenced subject on a cluster may answer nothing). After the client's
         * acknowledgement timeout without a reply the producer settles the batch. Default 250 ms.
         */
        public Builder stallTimeout(Duration d) {
            if (d == null || d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException("stallTimeout must be positive");
            }
            this.stallTimeout = d;
            return this;
        }

        /** The options. */
        public ProducerOptions build() {
            return new ProducerOptions(this);
        }
    }
}
