package dev.pctl;

/**
 * A record is stored outside its key's partition (spec/protocol.md §6.8) and the member's policy
 * is {@link MisplacedPolicy#STOP}: the member stopped before it (every record before it was
 * delivered; nothing after it in that partition is, until the group runs with {@link
 * MisplacedPolicy#DELIVER} or {@link MisplacedPolicy#SKIP}). Names the topic, partition, sequence,
 * epoch, key and why. Code {@code internal}.
 */
public final class MisplacedRecordException extends PctlException {
    private static final long serialVersionUID = 1L;

    private final String topic;
    private final int partition;
    private final long sequence;
    private final int epoch;
    private final byte[] key;
    private final Misplacement misplacement;

    MisplacedRecordException(String topic, int partition, long sequence, int epoch, byte[] key, Misplacement mp) {
        super(ErrorCode.INTERNAL, String.format(
                "misplaced record in topic %s partition %d at sequence %d (epoch %d, key %s): %s. A producer bypassed the partitioner; "
                        + "the group stopped before this record. To go on, consume with MisplacedPolicy.DELIVER (flagged) or SKIP "
                        + "(consume --misplaced deliver|skip)",
                topic, partition, sequence, epoch, ConsumerRecord.show(key), mp.reason()));
        this.topic = topic;
        this.partition = partition;
        this.sequence = sequence;
        this.epoch = epoch;
        this.key = key;
        this.misplacement = mp;
    }

    /** The topic. */
    public String topic() {
        return topic;
    }

    /** The partition whose stream holds the record. */
    public int partition() {
        return partition;
    }

    /** The record's stream sequence. */
    public long sequence() {
        return sequence;
    }

    /** The record's epoch (from its subject; 0 if it has none). */
    public int epoch() {
        return epoch;
    }

    /** The record's key, or null when its key header could not be decoded. */
    public byte[] key() {
        return key == null ? null : key.clone();
    }

    /** Where the key belongs, and why the record is misplaced. */
    public Misplacement misplacement() {
        return misplacement;
    }
}
