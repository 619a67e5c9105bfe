package dev.pctl;

/**
 * Where an acknowledged record is stored. Once a record has its metadata (and no error), the
 * broker has stored it and will deliver it to every consumer group (spec/protocol.md §5.1). A
 * {@link Producer.Callback} also gets metadata for a failed record: then {@code sequence} is -1,
 * and {@code partition} and {@code epoch} are those of its last attempt, or -1.
 *
 * @param producerSeq the record's sequence number in its producer (its {@code Pctl-Seq}: 1, 2, ... in send order)
 * @param partition the partition (stream) it is stored in
 * @param epoch the epoch it was produced under
 * @param sequence its sequence in the partition's stream when the producer learned it (a fast batch's PubAck
 *     names only its last message's), 0 for "stored, sequence not reported", -1 for not stored
 * @param duplicate true when a retry found it already stored (no second copy was written)
 */
public record RecordMetadata(long producerSeq, int partition, int epoch, long sequence, boolean duplicate) {}
