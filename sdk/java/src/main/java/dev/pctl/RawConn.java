package dev.pctl;

import io.nats.client.AuthHandler;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

/**
 * A minimal NATS client connection (the text protocol: CONNECT with NKey, SUB, UNSUB, PUB, MSG,
 * HMSG, PING/PONG) for what a consumer-group member receives: stream records, pull statuses,
 * group-state entries and topic events. Internal.
 *
 * <p>Why not jnats: jnats 2.26 accepts only ASCII header values and throws inside its
 * connection reader on a message whose header holds any other byte. spec/protocol.md §5.3 allows
 * UTF-8 values (the other SDKs send them), and a producer can store any bytes; through jnats
 * such a record would make the member re-read it forever (and stop every other subscription of
 * the connection). Here header blocks are handed over as bytes and parsed by the consumer.
 *
 * <p>Handlers run on the connection's reader thread and must not block. The connection pings the
 * server every two seconds and reconnects (with the same subscriptions) when a pong is missing or
 * the socket fails; reconnect listeners then run (readers re-create their consumers).
 */
final class RawConn implements AutoCloseable {
    /** A message as received. {@code headers} is the raw header block (null for MSG). */
    record Msg(String subject, String reply, byte[] headers, byte[] data) {
        /** The status code of a status message ("NATS/1.0 408 ..."), or 0. */
        int status() {
            if (headers == null || headers.length < 12 || headers[8] != ' ') {
                return 0;
            }
            int code = 0;
            for (int i = 9; i < 12; i++) {
                int d = headers[i] - '0';
                if (d < 0 || d > 9) {
                    return 0;
                }
                code = code * 10 + d;
            }
            return code;
        }

        /** The description of a status message. */
        String statusDescription() {
            int end = indexOfCrlf(headers, 0);
            return end <= 13 ? "" : new String(headers, 13, end - 13, StandardCharsets.UTF_8).trim();
        }

        /** The first value of a header (exact name), or null. */
        String header(String name) {
            return RecordHeaders.first(headers, name);
        }
    }

    private static final byte[] CRLF = {'\r', '\n'};

    private final PctlClient client;
    private final List<URI> servers = new ArrayList<>();
    private final AuthHandler auth;
    private final String name;
    final String inboxPrefix;
    private final Map<Integer, Sub> subs = new ConcurrentHashMap<>();
    private final AtomicInteger sids = new AtomicInteger();
    private final List<Runnable> reconnectListeners = new CopyOnWriteArrayList<>();
    private final List<Runnable> disconnectListeners = new CopyOnWriteArrayList<>();
    private boolean connectedNow; // reader thread only
    private final Map<String, CompletableFuture<Msg>> replies = new ConcurrentHashMap<>();
    private final AtomicLong replyIds = new AtomicLong();
    private final String replyPrefix;
    private final Object writeLock = new Object();
    private volatile Socket socket;
    private volatile OutputStream out;
    private volatile boolean closed;
    private volatile long lastPong = System.nanoTime();
    private final Thread readerThread;
    private final Thread pinger;
    private final Thread flusher;
    private boolean dirty; // guarded by writeLock: written, not flushed
    private final CompletableFuture<Void> firstConnect = new CompletableFuture<>();

    private record Sub(String subject, Consumer<Msg> handler) {}

    RawConn(PctlClient client, String serverList, AuthHandler auth, String inboxPrefix, String name) {
        this.client = client;
        this.auth = auth;
        this.name = name;
        this.inboxPrefix = inboxPrefix.endsWith(".") ? inboxPrefix.substring(0, inboxPrefix.length() - 1) : inboxPrefix;
        for (String s : serverList.split(",")) {
            s = s.trim();
            if (!s.contains("://")) {
                s = "nats://" + s;
            }
            servers.add(URI.create(s));
        }
        this.replyPrefix = newInbox() + ".";
        readerThread = new Thread(this::run, "pctl-raw-conn");
        readerThread.setDaemon(true);
        pinger = new Thread(this::pingLoop, "pctl-raw-conn-ping");
        pinger.setDaemon(true);
        flusher = new Thread(this::flushLoop, "pctl-raw-conn-flush");
        flusher.setDaemon(true);
        readerThread.start();
        try {
            firstConnect.get(Math.max(5000, client.options().requestTimeout().toMillis()), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            close();
            Throwable c = e.getCause();
            if (c instanceof PctlException) {
                throw (PctlException) c;
            }
            throw new UnavailableException("cannot connect to " + serverList + ": " + c.getMessage(), c);
        } catch (TimeoutException e) {
            close();
            throw new UnavailableException("cannot connect to " + serverList + " in time");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            close();
            throw new UnavailableException("interrupted while connecting", e);
        }
        pinger.start();
        flusher.start();
        subscribe(replyPrefix + "*", m -> {
            CompletableFuture<Msg> f = replies.remove(m.subject());
            if (f != null) {
                f.complete(m);
            }
        });
    }

    /** A new inbox subject, under this client's (private, §8.3) inbox prefix. */
    String newInbox() {
        return inboxPrefix + "." + io.nats.client.NUID.nextGlobal();
    }

    Runnable onReconnect(Runnable l) {
        reconnectListeners.add(l);
        return () -> reconnectListeners.remove(l);
    }

    /** Subscribes; returns the subscription id. */
    int subscribe(String subject, Consumer<Msg> handler) {
        int sid = sids.incrementAndGet();
        subs.put(sid, new Sub(subject, handler));
        try {
            write(("SUB " + subject + " " + sid + "\r\n").getBytes(StandardCharsets.UTF_8), null);
        } catch (IOException e) {
            // not connected: the reconnect subscribes it
        }
        return sid;
    }

    void unsubscribe(int sid) {
        if (subs.remove(sid) != null) {
            try {
                write(("UNSUB " + sid + "\r\n").getBytes(StandardCharsets.US_ASCII), null);
            } catch (IOException e) {
                // not connected: nothing to unsubscribe
            }
        }
    }

    /** Publishes (no headers). */
    void publish(String subject, String reply, byte[] data) {
        String line = "PUB " + subject + (reply != null ? " " + reply : "") + " " + data.length + "\r\n";
        try {
            write(line.getBytes(StandardCharsets.UTF_8), data);
        } catch (IOException e) {
            throw new UnavailableException("publish to " + subject + ": not connected (" + e.getMessage() + ")", e);
        }
    }

    /** Publishes with a header block given as bytes (for the tests: any bytes a producer may send). */
    void hpublish(String subject, String reply, byte[] headers, byte[] data) {
        String line = "HPUB " + subject + (reply != null ? " " + reply : "") + " " + headers.length + " " + (headers.length + data.length) + "\r\n";
        byte[] payload = new byte[headers.length + data.length];
        System.arraycopy(headers, 0, payload, 0, headers.length);
        System.arraycopy(data, 0, payload, headers.length, data.length);
        try {
            write(line.getBytes(StandardCharsets.UTF_8), payload);
        } catch (IOException e) {
            throw new UnavailableException("publish to " + subject + ": not connected (" + e.getMessage() + ")", e);
        }
    }

    /**
     * Publishes without flushing at once (the flusher thread flushes soon: the publishes of a
     * burst share one flush). {@code headers} is a header block or null (then a plain PUB). Throws
     * {@link IOException} when not connected: the message was not written. A message written
     * before a lost connection is never written again (jnats would re-send what it buffered, after
     * later messages of the new connection could be stored: spec/protocol.md §5.1.2 needs to know
     * that what was lost stays lost).
     */
    void publishDeferred(String subject, String reply, byte[] headers, byte[] data) throws IOException {
        String line = headers == null
                ? "PUB " + subject + " " + reply + " " + data.length + "\r\n"
                : "HPUB " + subject + " " + reply + " " + headers.length + " " + (headers.length + data.length) + "\r\n";
        writeDeferred(line.getBytes(StandardCharsets.UTF_8), headers == null ? new byte[0] : headers, data);
    }

    /** True once closed (it never connects again). */
    boolean isClosed() {
        return closed;
    }

    /** True while a connection is up (publishes can be written). */
    boolean connected() {
        return out != null && !closed;
    }

    /** Calls l (on the reader thread: do not block) whenever a connection is lost; returns how to stop. */
    Runnable onDisconnect(Runnable l) {
        disconnectListeners.add(l);
        return () -> disconnectListeners.remove(l);
    }

    /** Writes without flushing at once: the flusher thread flushes soon (writes in a burst share one flush). */
    private void writeDeferred(byte[] line, byte[] a, byte[] b) throws IOException {
        synchronized (writeLock) {
            OutputStream o = out;
            if (o == null || closed) {
                throw new IOException("not connected");
            }
            try {
                o.write(line);
                o.write(a);
                o.write(b);
                o.write(CRLF);
            } catch (IOException e) {
                Socket s = socket;
                if (s != null) {
                    try {
                        s.close();
                    } catch (IOException ignored) {
                        // closing
                    }
                }
                throw e;
            }
            if (!dirty) {
                dirty = true;
                writeLock.notifyAll();
            }
        }
    }

    private void flushLoop() {
        while (!closed) {
            synchronized (writeLock) {
                while (!dirty && !closed) {
                    try {
                        writeLock.wait(1000);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                dirty = false;
                OutputStream o = out;
                if (o != null) {
                    try {
                        o.flush();
                    } catch (IOException e) {
                        Socket s = socket;
                        if (s != null) {
                            try {
                                s.close();
                            } catch (IOException ignored) {
                                // the reader reconnects
                            }
                        }
                    }
                }
            }
        }
    }

    /** A request: the reply, whatever it is (a status message included). */
    Msg request(String subject, byte[] data, Duration timeout) {
        String reply = replyPrefix + replyIds.incrementAndGet();
        CompletableFuture<Msg> f = new CompletableFuture<>();
        replies.put(reply, f);
        CompletableFuture<Void> refused = new CompletableFuture<>();
        Runnable stop = client.onViolation(s -> {
            if (s.equals(subject)) {
                refused.complete(null);
            }
        });
        try {
            publish(subject, reply, data);
            CompletableFuture.anyOf(f, refused).get(timeout.toMillis(), TimeUnit.MILLISECONDS);
            if (refused.isDone()) {
                throw PermissionDeniedException.forSubject("publish to", subject);
            }
            Msg m = f.join();
            if (m.status() == 503) {
                throw new UnavailableException("no responders for " + subject);
            }
            return m;
        } catch (TimeoutException e) {
            throw new UnavailableException(String.format("no answer to %s within %d ms", subject, timeout.toMillis()));
        } catch (ExecutionException e) {
            throw new UnavailableException(subject + ": " + e.getCause(), e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new UnavailableException("interrupted while waiting for " + subject, e);
        } finally {
            replies.remove(reply);
            stop.run();
        }
    }

    private void write(byte[] line, byte[] payload) throws IOException {
        synchronized (writeLock) {
            OutputStream o = out;
            if (o == null || closed) {
                throw new IOException("not connected");
            }
            try {
                o.write(line);
                if (payload != null) {
                    o.write(payload);
                    o.write(CRLF);
                }
                o.flush();
            } catch (IOException e) {
                Socket s = socket;
                if (s != null) {
                    try {
                        s.close(); // the reader thread notices and reconnects
                    } catch (IOException ignored) {
                        // closing
                    }
                }
                throw e;
            }
        }
    }

    @Override
    public void close() {
        closed = true;
        Socket s = socket;
        if (s != null) {
            try {
                s.close();
            } catch (IOException e) {
                // closing
            }
        }
        readerThread.interrupt();
        pinger.interrupt();
        flusher.interrupt();
    }

    // ---- connection and reading ----------------------------------------------------------------

    private void pingLoop() {
        while (!closed) {
            try {
                Thread.sleep(2000);
            } catch (InterruptedException e) {
                return;
            }
            if (out == null) {
                continue;
            }
            if (System.nanoTime() - lastPong > TimeUnit.SECONDS.toNanos(7)) {
                Socket s = socket;
                if (s != null) {
                    try {
                        s.close(); // no pong for a while: a dead connection; the reader reconnects
                    } catch (IOException e) {
                        // closing
                    }
                }
                continue;
            }
            try {
                write("PING\r\n".getBytes(StandardCharsets.US_ASCII), null);
            } catch (IOException e) {
                // the reader reconnects
            }
        }
    }

    private void run() {
        long backoff = 100;
        boolean connectedOnce = false;
        int next = 0;
        while (!closed) {
            URI uri = servers.get(next++ % servers.size());
            Socket s = null;
            try {
                s = new Socket();
                s.setTcpNoDelay(true);
                s.connect(new InetSocketAddress(uri.getHost(), uri.getPort() < 0 ? 4222 : uri.getPort()), 5000);
                Reader r = new Reader(s.getInputStream());
                String info = r.line();
                if (!info.startsWith("INFO ")) {
                    throw new IOException("the server did not send INFO: " + info);
                }
                Map<String, Object> inf = JsApi.parseObject(info.substring(5).getBytes(StandardCharsets.UTF_8), "INFO");
                if (Boolean.TRUE.equals(inf.get("tls_required")) || "tls".equals(uri.getScheme())) {
                    SSLSocket tls = (SSLSocket) ((SSLSocketFactory) SSLSocketFactory.getDefault()).createSocket(s, uri.getHost(), s.getPort(), true);
                    tls.startHandshake();
                    s = tls;
                    r = new Reader(s.getInputStream());
                }
                OutputStream o = new BufferedOutputStream(s.getOutputStream(), 1 << 16);
                StringBuilder connect = new StringBuilder("{\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true,\"protocol\":1,");
                connect.append("\"lang\":\"java-pctl\",\"version\":\"0.1.0\",\"name\":").append(dev.pctl.internal.Json.quote(name));
                if (auth != null) {
                    String nonce = inf.get("nonce") instanceof String ? (String) inf.get("nonce") : "";
                    byte[] sig = auth.sign(nonce.getBytes(StandardCharsets.UTF_8));
                    connect.append(",\"nkey\":\"").append(new String(auth.getID())).append("\",\"sig\":\"")
                            .append(Base64.getUrlEncoder().withoutPadding().encodeToString(sig)).append('"');
                }
                if (uri.getUserInfo() != null) {
                    String[] up = uri.getUserInfo().split(":", 2);
                    connect.append(",\"user\":").append(dev.pctl.internal.Json.quote(up[0]));
                    if (up.length > 1) {
                        connect.append(",\"pass\":").append(dev.pctl.internal.Json.quote(up[1]));
                    }
                }
                connect.append('}');
                StringBuilder hello = new StringBuilder("CONNECT ").append(connect).append("\r\nPING\r\n");
                for (Map.Entry<Integer, Sub> e : subs.entrySet()) {
                    hello.append("SUB ").append(e.getValue().subject()).append(' ').append(e.getKey()).append("\r\n");
                }
                o.write(hello.toString().getBytes(StandardCharsets.UTF_8));
                o.flush();
                // The first answer: PONG (accepted) or -ERR (refused).
                while (true) {
                    String l = r.line();
                    if (l.startsWith("PONG")) {
                        break;
                    }
                    if (l.startsWith("-ERR")) {
                        String why = l.substring(4).trim();
                        if (why.toLowerCase(java.util.Locale.ROOT).contains("authorization")) {
                            throw new PermissionDeniedException("the broker refused the credentials: " + why);
                        }
                        throw new IOException(why);
                    }
                }
                synchronized (writeLock) {
                    socket = s;
                    out = o;
                }
                lastPong = System.nanoTime();
                connectedNow = true;
                backoff = 100;
                if (!connectedOnce) {
                    connectedOnce = true;
                    firstConnect.complete(null);
                } else {
                    for (Runnable l : reconnectListeners) {
                        try {
                            l.run();
                        } catch (RuntimeException e) {
                            // a listener's problem
                        }
                    }
                }
                readLoop(r);
            } catch (PermissionDeniedException e) {
                if (!connectedOnce) {
                    firstConnect.completeExceptionally(e);
                    return;
                }
            } catch (IOException | RuntimeException e) {
                if (!connectedOnce && next >= servers.size() * 3) {
                    firstConnect.completeExceptionally(e);
                    return;
                }
            } finally {
                synchronized (writeLock) {
                    out = null;
                    socket = null;
                    dirty = false;
                }
                if (connectedNow) {
                    connectedNow = false;
                    for (Runnable l : disconnectListeners) {
                        try {
                            l.run();
                        } catch (RuntimeException e) {
                            // a listener's problem
                        }
                    }
                }
                if (s != null) {
                    try {
                        s.close();
                    } catch (IOException e) {
                        // closing
                    }
                }
            }
            if (closed) {
                return;
            }
            try {
                Thread.sleep(backoff);
            } catch (InterruptedException e) {
                return;
            }
            backoff = Math.min(backoff * 2, 2000);
        }
    }

    private void readLoop(Reader r) throws IOException {
        while (!closed) {
            String l = r.line();
            if (l.startsWith("HMSG ") || l.startsWith("MSG ")) {
                boolean h = l.charAt(0) == 'H';
                String[] t = l.split(" ");
                // MSG subject sid [reply] size; HMSG subject sid [reply] hdrlen total
                int n = t.length;
                String subject = t[1];
                int sid = Integer.parseInt(t[2]);
                String reply;
                int hdr = 0;
                int total;
                if (h) {
                    reply = n == 6 ? t[3] : null;
                    hdr = Integer.parseInt(t[n - 2]);
                    total = Integer.parseInt(t[n - 1]);
                } else {
                    reply = n == 5 ? t[3] : null;
                    total = Integer.parseInt(t[n - 1]);
                }
                byte[] payload = r.bytes(total);
                r.bytes(2); // CRLF
                byte[] headers = null;
                byte[] data = payload;
                if (h) {
                    headers = java.util.Arrays.copyOfRange(payload, 0, hdr);
                    data = java.util.Arrays.copyOfRange(payload, hdr, total);
                }
                Sub sub = subs.get(sid);
                if (sub != null) {
                    try {
                        sub.handler().accept(new Msg(subject, reply, headers, data));
                    } catch (RuntimeException e) {
                        // a handler's bug must not stop the connection
                    }
                }
            } else if (l.startsWith("PING")) {
                write("PONG\r\n".getBytes(StandardCharsets.US_ASCII), null);
            } else if (l.startsWith("PONG")) {
                lastPong = System.nanoTime();
            } else if (l.startsWith("-ERR")) {
                client.reportServerError(l.substring(4).trim());
            }
            // +OK and INFO (cluster updates) need nothing
        }
    }

    /** A byte-level reader of the protocol. */
    private static final class Reader {
        private final InputStream in;
        private final byte[] buf = new byte[1 << 16];
        private int pos;
        private int end;

        Reader(InputStream in) {
            this.in = in;
        }

        private void fill() throws IOException {
            if (pos == end) {
                pos = 0;
                end = 0;
            }
            int n = in.read(buf, end, buf.length - end);
            if (n < 0) {
                throw new IOException("connection closed by the server");
            }
            end += n;
        }

        String line() throws IOException {
            java.io.ByteArrayOutputStream partial = null;
            while (true) {
                for (int i = pos; i + 1 < end; i++) {
                    if (buf[i] == '\r' && buf[i + 1] == '\n') {
                        String s;
                        if (partial == null) {
                            s = new String(buf, pos, i - pos, StandardCharsets.UTF_8);
                        } else {
                            partial.write(buf, pos, i - pos);
                            s = partial.toString(StandardCharsets.UTF_8);
                        }
                        pos = i + 2;
                        return s;
                    }
                }
                // No full line buffered: keep what is there (but for a trailing '\r') and read more.
                int keep = end > pos && buf[end - 1] == '\r' ? 1 : 0;
                if (end - keep > pos) {
                    if (partial == null) {
                        partial = new java.io.ByteArrayOutputStream();
                    }
                    partial.write(buf, pos, end - keep - pos);
                }
                if (keep == 1) {
                    buf[0] = '\r';
                    pos = 0;
                    end = 1;
                } else {
                    pos = 0;
                    end = 0;
                }
                fill();
            }
        }

        byte[] bytes(int n) throws IOException {
            byte[] out = new byte[n];
            int got = 0;
            while (got < n) {
                if (pos == end) {
                    pos = 0;
                    end = 0;
                    fill();
                }
                int k = Math.min(n - got, end - pos);
                System.arraycopy(buf, pos, out, got, k);
                pos += k;
                got += k;
            }
            return out;
        }
    }

    static int indexOfCrlf(byte[] b, int from) {
        if (b == null) {
            return -1;
        }
        for (int i = from; i + 1 < b.length; i++) {
            if (b[i] == '\r' && b[i + 1] == '\n') {
                return i;
            }
        }
        return -1;
    }
}
