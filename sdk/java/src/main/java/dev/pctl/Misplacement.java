package dev.pctl;

/**
 * Why a stored record is not where its key belongs (spec/protocol.md §6.8). Only a producer that
 * bypasses the partitioner (a bug, or a hostile client with a producer credential) can store one:
 * pctl's producers and the produce service never do.
 *
 * @param expected the partition the record's epoch's partitioner gives its key, or -1 when the
 *     record has no usable key or epoch ({@code reason} says which)
 * @param reason what is wrong, in words
 */
public record Misplacement(int expected, String reason) {}
