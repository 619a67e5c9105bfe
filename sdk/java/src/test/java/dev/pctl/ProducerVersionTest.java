package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/**
 * The server version check of spec/protocol.md §5.1 (a producer refuses nats-server older than
 * 2.14: no fast batches). Expected values are the versions nats-server releases print.
 */
class ProducerVersionTest {
    @Test
    void versionsAtLeast214() {
        Object[][] cases = {
            {"2.14.0", true}, {"2.15.2", true}, {"v2.14.1", true}, {"2.14.0-RC.1", true}, {"3.0.0", true}, {"2.20.0", true},
            {"2.13.9", false}, {"2.11.4", false}, {"2.9.25", false}, {"1.99.0", false}, {"", false}, {null, false}, {"garbage", false}, {"2", false},
        };
        for (Object[] c : cases) {
            assertEquals(c[1], Producer.versionAtLeast((String) c[0], 2, 14), "version " + c[0]);
        }
    }
}
