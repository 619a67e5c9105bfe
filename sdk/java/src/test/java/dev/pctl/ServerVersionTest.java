package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The nats-server version the producer and the consumer need (spec/protocol.md §5.1: fast
 * batches; §6.1: the conditioned write that proves a group absent), offline: the comparison
 * against 2.14 on versions as nats-server releases print them in INFO, and the refusal's code and
 * message. Expected values are the release order, not this code: 2.11.0-RC.1 and 2.10.22 are
 * older than 2.14, 3.0.0 newer although its minor is 0, 1.99.0 older although its minor is 99.
 * The same rows as internal/natsver's TestAtLeast.
 */
class ServerVersionTest {
    @Test
    void versionsAtLeast214() {
        Object[][] cases = {
            {"2.14.0", true}, {"2.14.0-RC.1", true}, {"v2.15.2", true}, {"2.15.2", true}, {"v2.14.1", true}, {"3.0.0", true}, {"2.20.0", true},
            {"2.13.9", false}, {"2.11.0-RC.1", false}, {"2.11.4", false}, {"2.10.22", false}, {"2.9.25", false}, {"1.99.0", false},
            {"", false}, {null, false}, {"garbage", false}, {"2", false}, {"x.14.0", false},
        };
        for (Object[] c : cases) {
            assertEquals(c[1], ServerVersion.atLeast((String) c[0], 2, 14), "version " + c[0]);
        }
        assertEquals("2.14.0", ServerVersion.MIN);
        assertTrue(ServerVersion.atLeast(ServerVersion.MIN, 2, 14));
    }

    @Test
    void checkRefusesOlderServers() {
        for (String v : new String[] {"2.14.0", "v2.15.2", "2.14.0-RC.1"}) {
            ServerVersion.check(v, "nats://127.0.0.1:4222", "pctl's consumer", "spec/protocol.md §6.1");
        }
        for (String v : new String[] {"2.10.22", "2.11.0-RC.1", "2.13.9"}) {
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> ServerVersion.check(v, "nats://127.0.0.1:4222", "pctl's consumer", "spec/protocol.md §6.1"), v);
            assertEquals(ErrorCode.UNAVAILABLE, e.code(), v);
            for (String part : new String[] {"nats://127.0.0.1:4222", "\"" + v + "\"", "pctl's consumer needs 2.14.0 or later", "§6.1", "upgrade the NATS servers"}) {
                assertTrue(e.getMessage().contains(part), v + ": " + e.getMessage() + " does not say " + part);
            }
        }
    }
}
