package dev.pctl;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP proxy in front of the test broker whose connections a test can cut at any moment (both
 * sockets closed at once, as a network failure does to a client). Clients connect to {@link #url}.
 */
final class CutProxy implements AutoCloseable {
    private final ServerSocket server;
    private final String host;
    private final int port;
    private final List<Socket> open = new CopyOnWriteArrayList<>();
    private final List<Socket> fromServer = new CopyOnWriteArrayList<>();
    private final List<Socket> fromClient = new CopyOnWriteArrayList<>();
    private volatile boolean holdReplies;
    private volatile boolean holdRequests;
    final AtomicInteger cuts = new AtomicInteger();
    final String url;

    CutProxy(String target) throws IOException {
        URI u = URI.create(target);
        this.host = u.getHost();
        this.port = u.getPort();
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        url = "nats://127.0.0.1:" + server.getLocalPort();
        Thread t = new Thread(this::accept, "cut-proxy");
        t.setDaemon(true);
        t.start();
    }

    private void accept() {
        while (!server.isClosed()) {
            try {
                Socket in = server.accept();
                Socket out = new Socket();
                out.connect(new InetSocketAddress(host, port), 5000);
                in.setTcpNoDelay(true);
                out.setTcpNoDelay(true);
                open.add(in);
                open.add(out);
                fromServer.add(out);
                fromClient.add(in);
                pump(in, out);
                pump(out, in);
            } catch (IOException e) {
                // closed, or the broker refused
            }
        }
    }

    private void pump(Socket from, Socket to) {
        Thread t = new Thread(() -> {
            byte[] buf = new byte[1 << 16];
            try (InputStream i = from.getInputStream(); OutputStream o = to.getOutputStream()) {
                int n;
                while (true) {
                    while (holdReplies && fromServer.contains(from) || holdRequests && fromClient.contains(from)) {
                        Thread.sleep(5); // the bytes wait in the socket (nothing is lost yet)
                    }
                    if ((n = i.read(buf)) < 0) {
                        break;
                    }
                    o.write(buf, 0, n);
                }
            } catch (IOException | InterruptedException e) {
                // cut
            } finally {
                fromServer.remove(from);
                fromClient.remove(from);
                closeQuietly(from);
                closeQuietly(to);
                open.remove(from);
                open.remove(to);
            }
        }, "cut-proxy-pump");
        t.setDaemon(true);
        t.start();
    }

    /**
     * Holds back everything the server sends (requests still reach it: writes are applied, their
     * replies wait) until {@link #cut} drops the connections with what they held, or {@code
     * hold(false)}.
     */
    void hold(boolean on) {
        holdReplies = on;
    }

    /**
     * Holds back everything clients send (their writes succeed into the socket buffers, and reach
     * no server) until {@link #cut} drops the connections with what they held, or {@code
     * holdRequests(false)}.
     */
    void holdRequests(boolean on) {
        holdRequests = on;
    }

    /** Cuts every connection through the proxy now; clients reconnect through it. */
    void cut() {
        cuts.incrementAndGet();
        holdReplies = false;
        holdRequests = false;
        for (Socket s : open) {
            closeQuietly(s);
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // closed already
        }
    }

    @Override
    public void close() throws IOException {
        server.close();
        cut();
    }
}
