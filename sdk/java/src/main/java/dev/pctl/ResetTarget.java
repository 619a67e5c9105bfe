package dev.pctl;

import java.time.Instant;
import java.util.Objects;

/**
 * Where a seek moves a consumer group (spec/protocol.md §6.6): the beginning, the end, or a time
 * (the first records stored at or after it, millisecond precision), in every partition stream of
 * every epoch.
 */
public final class ResetTarget {
    private static final ResetTarget BEGINNING = new ResetTarget("beginning", 0);
    private static final ResetTarget END = new ResetTarget("end", 0);

    private final String kind;
    private final long timeMillis;

    private ResetTarget(String kind, long timeMillis) {
        this.kind = kind;
        this.timeMillis = timeMillis;
    }

    /** Every record of every partition, again. */
    public static ResetTarget beginning() {
        return BEGINNING;
    }

    /** Only records stored from now on. */
    public static ResetTarget end() {
        return END;
    }

    /** The records stored at or after {@code t}. */
    public static ResetTarget time(Instant t) {
        Objects.requireNonNull(t, "time");
        long ms = t.toEpochMilli();
        if (ms < 0) {
            throw new BadRequestException("seek to " + t + ": a time before 1970 holds no records; give a later one");
        }
        return new ResetTarget("time", ms);
    }

    /**
     * {@code beginning} (or {@code earliest}), {@code end} (or {@code latest}), or an RFC 3339 time.
     *
     * @throws BadRequestException for anything else
     */
    public static ResetTarget parse(String s) {
        switch (s == null ? "" : s) {
            case "beginning":
            case "earliest":
                return BEGINNING;
            case "end":
            case "latest":
                return END;
            default:
                try {
                    return time(Instant.parse(s));
                } catch (java.time.format.DateTimeParseException e) {
                    throw new BadRequestException("seek to \"" + s + "\": give beginning, end or an RFC 3339 time such as 2026-01-02T15:04:05Z");
                }
        }
    }

    /** {@code beginning}, {@code end} or {@code time}: the reset's {@code to} (spec/protocol.md §6.6). */
    public String kind() {
        return kind;
    }

    /** For a time, the unix milliseconds; else 0. */
    public long timeMillis() {
        return timeMillis;
    }

    @Override
    public String toString() {
        return kind.equals("time") ? Instant.ofEpochMilli(timeMillis).toString() : kind;
    }
}
