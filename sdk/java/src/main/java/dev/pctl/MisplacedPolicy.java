package dev.pctl;

import java.util.Locale;

/** What a consumer-group member does with a misplaced record (spec/protocol.md §6.8). */
public enum MisplacedPolicy {
    /**
     * The default: the member stops before the record; {@link Consumer#poll} throws a {@link
     * MisplacedRecordException} naming it. Nothing after it in that partition is delivered until the
     * group runs with another policy.
     */
    STOP,
    /**
     * The record is delivered, flagged ({@link ConsumerRecord#misplacement()}), in its stream's
     * order; it is neither gated nor counted in key-level callbacks, and no order is promised for it.
     */
    DELIVER,
    /** The record is not delivered; the group's position moves past it. */
    SKIP;

    /** The policy's name as the command line spells it: stop, deliver or skip. */
    public String wire() {
        return name().toLowerCase(Locale.ROOT);
    }

    /**
     * Parses stop, deliver or skip.
     *
     * @throws BadRequestException for anything else
     */
    public static MisplacedPolicy parse(String s) {
        for (MisplacedPolicy p : values()) {
            if (p.wire().equals(s)) {
                return p;
            }
        }
        throw new BadRequestException("misplaced-record policy \"" + s + "\": give stop, deliver or skip");
    }
}
