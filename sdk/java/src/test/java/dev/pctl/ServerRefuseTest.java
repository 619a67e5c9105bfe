package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.api.StreamInfoOptions;
import io.nats.client.api.Subject;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A consumer refuses, before it writes any group key, a nats-server older than 2.14.0
 * (spec/protocol.md §6.1, "The server version a consumer needs"), and so does the producer
 * (§5.1): against a real broker, through a TCP proxy that rewrites the version of the server's
 * INFO lines (nats-server cannot be told to report another version), the consumer and the
 * producer throw {@link UnavailableException} naming the proxy, the claimed version, the minimum
 * and what to do, and the group has no key; the proxy claiming 2.14.0 passes, and so does the real
 * server directly. Keys are read back with jnats's stream info.
 */
@Tag("broker")
class ServerRefuseTest {
    private static Broker broker;
    private static final List<java.io.Closeable> OPEN = new CopyOnWriteArrayList<>();

    @BeforeAll
    static void start() throws Exception {
        broker = Broker.start();
        broker.pctlOk(null, "topic", "create", "t", "--partitions", "2", "--partitioner", "kafka-murmur2");
    }

    @AfterAll
    static void stop() throws Exception {
        for (java.io.Closeable c : OPEN) {
            c.close();
        }
        if (broker != null) {
            broker.close();
        }
    }

    /** A proxy to the broker's NATS port that rewrites "version" in every INFO line to {@code claim}; returns its URL. */
    private static String proxy(String claim) throws Exception {
        URI target = URI.create(broker.url);
        ServerSocket ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        OPEN.add(ss);
        Thread t = new Thread(() -> {
            while (!ss.isClosed()) {
                try {
                    Socket c = ss.accept();
                    Socket s = new Socket(target.getHost(), target.getPort());
                    OPEN.add(c);
                    OPEN.add(s);
                    pump(new BufferedInputStream(s.getInputStream()), c.getOutputStream(), claim, c, s);
                    pump(c.getInputStream(), s.getOutputStream(), null, c, s);
                } catch (Exception e) {
                    return;
                }
            }
        }, "version-proxy");
        t.setDaemon(true);
        t.start();
        return "nats://127.0.0.1:" + ss.getLocalPort();
    }

    private static void pump(InputStream in, OutputStream out, String claim, Socket a, Socket b) {
        Thread t = new Thread(() -> {
            try {
                ByteArrayOutputStream line = new ByteArrayOutputStream();
                int ch;
                while ((ch = in.read()) >= 0) {
                    if (claim == null) {
                        out.write(ch);
                        if (in.available() == 0) {
                            out.flush();
                        }
                        continue;
                    }
                    line.write(ch);
                    if (ch == '\n') {
                        String l = line.toString(StandardCharsets.ISO_8859_1);
                        if (l.startsWith("INFO ")) {
                            l = l.replaceFirst("\"version\":\"[^\"]*\"", "\"version\":\"" + claim + "\"");
                        }
                        out.write(l.getBytes(StandardCharsets.ISO_8859_1));
                        out.flush();
                        line.reset();
                    } else if (in.available() == 0 && line.size() > 0 && !line.toString(StandardCharsets.ISO_8859_1).startsWith("INFO")) {
                        out.write(line.toByteArray());
                        out.flush();
                        line.reset();
                    }
                }
            } catch (Exception e) {
                // the connection ended
            } finally {
                try {
                    a.close();
                    b.close();
                } catch (Exception e) {
                    // closed already
                }
            }
        }, "version-proxy-pump");
        t.setDaemon(true);
        t.start();
    }

    private static List<String> groupKeys(PctlClient admin, String tid, String group) throws Exception {
        List<String> keys = new ArrayList<>();
        List<Subject> subs = admin.connection().jetStreamManagement()
                .getStreamInfo("KV_" + GroupKv.BUCKET, StreamInfoOptions.filterSubjects("$KV." + GroupKv.BUCKET + "." + tid + "." + group + ".>"))
                .getStreamState().getSubjects();
        if (subs != null) {
            for (Subject s : subs) {
                keys.add(s.getName());
            }
        }
        return keys;
    }

    @Test
    void refusesOlderServers() throws Exception {
        try (PctlClient admin = PctlClient.connect(broker.options(broker.admin))) {
            String tid = Consumer.fetchTopic(admin, "t", java.time.Duration.ofSeconds(10)).id();
            for (String claim : new String[] {"2.10.22", "2.11.0-RC.1", "2.13.9", "2.14.0"}) {
                String url = proxy(claim);
                String group = "g" + claim.replace('.', '_').replace('-', '_');
                try (PctlClient c = PctlClient.connect(ClientOptions.builder().server(url).creds(broker.consumer).build());
                        PctlClient pc = PctlClient.connect(ClientOptions.builder().server(url).creds(broker.producer).build())) {
                    assertEquals(claim, c.connection().getServerInfo().getVersion());
                    if (claim.equals("2.14.0")) {
                        c.consumer("t", ConsumerOptions.builder(group).build()).close();
                        pc.producer("t", ProducerOptions.builder().build()).close();
                        c.resetGroup("t", group + "_reset", ResetTarget.beginning());
                        continue;
                    }
                    UnavailableException e = assertThrows(UnavailableException.class, () -> c.consumer("t", ConsumerOptions.builder(group).build()), claim);
                    for (String part : new String[] {url, "\"" + claim + "\"", "pctl's consumer needs 2.14.0 or later", "§6.1", "upgrade the NATS servers"}) {
                        assertTrue(e.getMessage().contains(part), claim + ": " + e.getMessage() + " does not say " + part);
                    }
                    assertEquals(List.of(), groupKeys(admin, tid, group), claim);
                    UnavailableException pe = assertThrows(UnavailableException.class, () -> pc.producer("t", ProducerOptions.builder().build()), claim);
                    assertTrue(pe.getMessage().contains("pctl's producer needs 2.14.0 or later"), pe.getMessage());
                    // A reset of a group that does not exist would create it (§6.6): refused before any key.
                    UnavailableException re = assertThrows(UnavailableException.class, () -> c.resetGroup("t", group + "_reset", ResetTarget.beginning()), claim);
                    assertTrue(re.getMessage().contains("pctl's group reset needs 2.14.0 or later"), re.getMessage());
                    assertEquals(List.of(), groupKeys(admin, tid, group + "_reset"), claim);
                }
            }
            try (PctlClient c = PctlClient.connect(broker.options(broker.consumer))) {
                c.consumer("t", ConsumerOptions.builder("real").build()).close();
            }
            assertTrue(groupKeys(admin, tid, "real").stream().anyMatch(k -> k.endsWith(".g.created")), "the real server's member created its group");
        }
    }
}
