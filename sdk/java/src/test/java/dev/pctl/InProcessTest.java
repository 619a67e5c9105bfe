package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The rule for JetStream 10158, "duplicate message id is in process" (spec/protocol.md §5.1.5): a
 * sender counts, per message id, its 10158 answers; at 4 the id is stuck; other answers in between
 * (a wrong last sequence, no answer) do not start the count again. The expected decisions are
 * written out by hand from the spec's text, not computed with the rule. A stuck record fails with
 * {@link MsgIdInProcessException}, an {@link UnavailableException} whose message says what to do.
 */
class InProcessTest {
    private static final int IN_PROC = 10158;
    private static final int WRONG_LAST = 10071;
    private static final int NONE = 0;
    private static final boolean F = false;
    private static final boolean T = true;

    private record Case(String name, int[] answers, boolean[] stuck) {}

    @Test
    void stuckAtTheFourth10158WhateverCameBetween() {
        assertEquals(4, InProcess.LIMIT);
        Case[] cases = {
            new Case("four in a row", new int[] {IN_PROC, IN_PROC, IN_PROC, IN_PROC}, new boolean[] {F, F, F, T}),
            new Case("by turns with a wrong last sequence", new int[] {IN_PROC, WRONG_LAST, IN_PROC, WRONG_LAST, IN_PROC, WRONG_LAST, IN_PROC},
                    new boolean[] {F, F, F, F, F, F, T}),
            new Case("with no answer between", new int[] {IN_PROC, NONE, IN_PROC, NONE, IN_PROC, IN_PROC}, new boolean[] {F, F, F, F, F, T}),
            new Case("three, then other answers", new int[] {IN_PROC, IN_PROC, IN_PROC, WRONG_LAST, NONE}, new boolean[] {F, F, F, F, F}),
            new Case("stays stuck", new int[] {IN_PROC, IN_PROC, IN_PROC, IN_PROC, IN_PROC, WRONG_LAST}, new boolean[] {F, F, F, T, T, T}),
            new Case("other answers never count", new int[] {WRONG_LAST, NONE, 10211, 10054, WRONG_LAST}, new boolean[] {F, F, F, F, F}),
        };
        for (Case c : cases) {
            InProcess r = new InProcess();
            boolean[] got = new boolean[c.answers.length];
            for (int i = 0; i < got.length; i++) {
                got[i] = r.note(c.answers[i]);
            }
            assertArrayEquals(c.stuck, got, c.name);
            assertEquals(c.stuck[c.stuck.length - 1], r.stuck(), c.name + ": stuck");
        }
    }

    @Test
    void aRenewedIdCountsAfresh() {
        InProcess r = new InProcess();
        for (int i = 0; i < 3; i++) {
            r.note(IN_PROC);
        }
        r.renewed();
        assertEquals(0, r.count());
        boolean[] got = {r.note(IN_PROC), r.note(IN_PROC), r.note(IN_PROC), r.note(IN_PROC)};
        assertArrayEquals(new boolean[] {F, F, F, T}, got);
    }

    @Test
    void theErrorIsUnavailableTypedAndSaysWhatToDo() {
        MsgIdInProcessException e = InProcess.error(7, "p-7-abc", 2, 4);
        assertInstanceOf(UnavailableException.class, e);
        assertEquals(ErrorCode.UNAVAILABLE, e.code());
        assertEquals("unavailable", e.wireCode());
        assertEquals("p-7-abc", e.msgId());
        assertEquals(2, e.partition());
        assertEquals(4, e.answers());
        for (String want : new String[] {"10158", "record 7", "p-7-abc", "refused 4 times by partition 2", "fate is unknown", "read partition 2"}) {
            assertTrue(e.getMessage().contains(want), e.getMessage() + " does not say " + want);
        }
        // Across the wire (the produce service) the code is unavailable: it maps back to an UnavailableException.
        assertInstanceOf(UnavailableException.class, PctlException.fromReply(e.wireCode(), e.getMessage(), null));
    }

    @Test
    void anUnavailableWithoutTheInProcessDetailStaysRetryable() {
        // spec/protocol.md §3: only "in_process": true makes an unavailable reply the in-process error.
        PctlException e = PctlException.fromReply("unavailable", "no stream", "{\"in_process\":false}");
        assertEquals(UnavailableException.class, e.getClass());
    }
}
