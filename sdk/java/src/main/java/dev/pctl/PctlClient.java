package dev.pctl;

import dev.pctl.internal.Json;
import dev.pctl.runtime.Plugin;
import io.nats.client.AuthHandler;
import io.nats.client.AuthenticationException;
import io.nats.client.Connection;
import io.nats.client.ConnectionListener;
import io.nats.client.ErrorListener;
import io.nats.client.JetStream;
import io.nats.client.JetStreamOptions;
import io.nats.client.Message;
import io.nats.client.NKey;
import io.nats.client.Nats;
import io.nats.client.Options;
import io.nats.client.impl.Headers;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A connection to a pctl broker (spec/protocol.md): reads topics and plugins, keeps verified
 * modules and their {@link Partitioner}s cached by digest, and makes {@linkplain #producer
 * producers}.
 *
 * <pre>{@code
 * try (PctlClient client = PctlClient.connect(ClientOptions.builder()
 *         .server("nats://127.0.0.1:4222").creds(Path.of("producer.nk")).build());
 *      Producer producer = client.producer("orders")) {
 *     producer.send(ProducerRecord.keyed("user-1", "hello")).join();
 * }
 * }</pre>
 *
 * <p>Thread-safe. Closing the client closes its connection (producers made from it can no longer
 * send) and its partitioners.
 */
public final class PctlClient implements AutoCloseable {
    private static final Pattern TOPIC = Pattern.compile("[A-Za-z0-9_-]{1,64}");
    private static final Pattern DIGEST = Pattern.compile("[0-9a-f]{64}");
    private static final Pattern VIOLATION = Pattern.compile("(?i)permissions violation for (publish|subscription) to \"?([^\"\\s]+)\"?");

    private final ClientOptions opts;
    private final Connection conn;
    private final JetStream js;
    private final Map<String, byte[]> modules = new ConcurrentHashMap<>();
    private final Map<String, CompletableFuture<Partitioner>> partitioners = new ConcurrentHashMap<>();
    private final List<java.util.function.Consumer<String>> violationListeners = new CopyOnWriteArrayList<>();
    private final List<Runnable> reconnectListeners = new CopyOnWriteArrayList<>();

    private AuthHandler auth;
    private RawConn raw;

    private PctlClient(ClientOptions opts, Connection conn, JetStream js) {
        this.opts = opts;
        this.conn = conn;
        this.js = js;
    }

    /** Connects with the defaults: {@code $PCTL_SERVER} and {@code $PCTL_CREDS}. */
    public static PctlClient connect() {
        return connect(ClientOptions.defaults());
    }

    /**
     * Connects to a broker.
     *
     * @throws PermissionDeniedException if the broker refuses the credentials
     * @throws UnavailableException if the broker cannot be reached
     * @throws BadRequestException if the credentials file cannot be read or is not an NKey seed
     */
    public static PctlClient connect(ClientOptions opts) {
        PctlClient[] self = new PctlClient[1];
        AuthHandler[] authRef = new AuthHandler[1];
        Options.Builder b = new Options.Builder()
                .server(opts.server())
                .connectionName(opts.connectionName())
                .maxReconnects(-1)
                .reconnectWait(opts.reconnectWait())
                .reconnectJitter(Duration.ofMillis(50))
                .maxMessagesInOutgoingQueue(1 << 16)
                .errorListener(new ErrorListener() {
                    @Override
                    public void errorOccurred(Connection c, String error) {
                        PctlClient cl = self[0];
                        if (cl != null) {
                            cl.onServerError(error);
                        }
                    }

                    @Override
                    public void exceptionOccurred(Connection c, Exception e) {
                        // Reconnections and their causes are handled by the connection itself.
                    }
                });
        if (opts.creds() != null) {
            AuthHandler auth = nkeyAuth(opts.creds());
            authRef[0] = auth;
            b.authHandler(auth);
            if (!opts.sharedInbox()) {
                // spec/protocol.md §8.3: replies to this client go to an inbox only it may read.
                b.inboxPrefix("_INBOX_" + new String(auth.getID()));
            }
        }
        b.connectionListener((c, ev) -> {
            PctlClient cl = self[0];
            if (cl != null) {
                cl.onConnectionEvent(ev);
            }
        });
        Connection conn;
        try {
            conn = Nats.connect(b.build());
        } catch (AuthenticationException e) {
            throw new PermissionDeniedException(String.format(
                    "the broker at %s refused the credentials %s: %s; use admin.nk, producer.nk or consumer.nk from the broker's data directory (PCTL_CREDS)",
                    opts.server(), opts.creds(), e.getMessage()));
        } catch (IOException e) {
            String m = String.valueOf(e.getMessage());
            if (m.toLowerCase(java.util.Locale.ROOT).contains("authorization")) {
                throw new PermissionDeniedException(String.format(
                        "the broker at %s refused the credentials %s: %s; use admin.nk, producer.nk or consumer.nk from the broker's data directory (PCTL_CREDS)",
                        opts.server(), opts.creds(), m));
            }
            throw new UnavailableException(String.format("cannot connect to %s: %s; is 'pctl serve' running? (PCTL_SERVER)", opts.server(), m), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new UnavailableException("interrupted while connecting to " + opts.server(), e);
        }
        JetStream js;
        try {
            js = conn.jetStream(JetStreamOptions.builder().requestTimeout(opts.ackTimeout()).build());
        } catch (IOException e) {
            closeQuietly(conn);
            throw new UnavailableException("cannot use JetStream at " + opts.server() + ": " + e.getMessage(), e);
        }
        PctlClient c = new PctlClient(opts, conn, js);
        c.auth = authRef[0];
        self[0] = c;
        return c;
    }

    private static AuthHandler nkeyAuth(Path seedFile) {
        String seed;
        try {
            seed = Files.readString(seedFile, StandardCharsets.US_ASCII).trim();
        } catch (NoSuchFileException e) {
            throw new BadRequestException("credentials " + seedFile + ": no such file; use admin.nk, producer.nk or consumer.nk from the broker's data directory");
        } catch (IOException e) {
            throw new BadRequestException("credentials " + seedFile + ": " + e.getMessage(), e);
        }
        NKey key;
        try {
            key = NKey.fromSeed(seed.toCharArray());
            key.getPublicKey();
        } catch (RuntimeException | GeneralSecurityException | IOException e) {
            throw new BadRequestException("credentials " + seedFile + ": not an NKey seed (" + e.getMessage()
                    + "); use admin.nk, producer.nk or consumer.nk from the broker's data directory", e);
        }
        return new AuthHandler() {
            @Override
            public byte[] sign(byte[] nonce) {
                try {
                    return key.sign(nonce);
                } catch (GeneralSecurityException | IOException e) {
                    throw new IllegalStateException("cannot sign with " + seedFile + ": " + e.getMessage(), e);
                }
            }

            @Override
            public char[] getID() {
                try {
                    return key.getPublicKey();
                } catch (GeneralSecurityException | IOException e) {
                    throw new IllegalStateException("cannot read the public key of " + seedFile + ": " + e.getMessage(), e);
                }
            }

            @Override
            public char[] getJWT() {
                return null;
            }
        };
    }

    /** An -ERR of the raw connection (same handling as jnats' error listener's). */
    void reportServerError(String error) {
        onServerError(error);
    }

    /**
     * The raw connection consumers receive records on (see {@link RawConn}: jnats cannot parse
     * every header a record may carry), made on first use and closed with the client.
     */
    synchronized RawConn raw() {
        if (raw == null) {
            raw = new RawConn(this, opts.server(), auth, conn.getOptions().getInboxPrefix(), opts.connectionName() + " (records)");
        }
        return raw;
    }

    private void onServerError(String error) {
        Matcher m = VIOLATION.matcher(error == null ? "" : error);
        if (!m.find()) {
            return;
        }
        String subject = m.group(2);
        for (java.util.function.Consumer<String> l : violationListeners) {
            l.accept(subject);
        }
    }

    private void onConnectionEvent(ConnectionListener.Events ev) {
        if (ev == ConnectionListener.Events.RECONNECTED || ev == ConnectionListener.Events.RESUBSCRIBED) {
            for (Runnable l : reconnectListeners) {
                l.run();
            }
        }
    }

    /** Calls l after every reconnection (on a jnats thread: do not block); returns how to stop. */
    Runnable onReconnect(Runnable l) {
        reconnectListeners.add(l);
        return () -> reconnectListeners.remove(l);
    }

    /** Calls l with the subject of every publish the server refuses; returns how to stop. */
    Runnable onViolation(java.util.function.Consumer<String> l) {
        violationListeners.add(l);
        return () -> violationListeners.remove(l);
    }

    /** The options the client was made with. */
    public ClientOptions options() {
        return opts;
    }

    /** The underlying NATS connection (jnats), for what the SDK does not cover. */
    public Connection connection() {
        return conn;
    }

    JetStream jetStream() {
        return js;
    }

    // ---- broker API (spec/protocol.md §3) ------------------------------------------------------

    /**
     * Sends a request and returns the reply; a broker error reply is raised as its {@link
     * PctlException}; a publish the server refuses as {@link PermissionDeniedException}.
     */
    Message request(String subject, byte[] body) {
        return request(subject, body, opts.requestTimeout());
    }

    /** {@link #request(String, byte[])} with its own time limit. */
    Message request(String subject, byte[] body, Duration timeout) {
        Message m = rawRequest(subject, null, body, timeout);
        String code = m.getHeaders() == null ? null : m.getHeaders().getFirst("Pctl-Error");
        if (code != null) {
            throw remoteError(code, m.getData());
        }
        if (m.isStatusMessage()) {
            if (m.getStatus().getCode() == 503) {
                throw noBroker(subject);
            }
            throw new UnavailableException(subject + ": " + m.getStatus().getMessageWithCode());
        }
        return m;
    }

    /**
     * Sends a request and returns the reply as it is (a status reply included, except no
     * responders); a publish the server refuses raises {@link PermissionDeniedException}, no
     * reply in time or no responders {@link UnavailableException}.
     */
    Message rawRequest(String subject, Headers headers, byte[] body, Duration timeout) {
        CompletableFuture<Void> refused = new CompletableFuture<>();
        Runnable stop = onViolation(s -> {
            if (s.equals(subject)) {
                refused.complete(null);
            }
        });
        try {
            CompletableFuture<Message> reply = conn.requestWithTimeout(subject, headers, body == null ? new byte[0] : body, timeout);
            CompletableFuture.anyOf(reply, refused).get(timeout.toMillis() + 1000, TimeUnit.MILLISECONDS);
            if (refused.isDone()) {
                throw PermissionDeniedException.forSubject("publish to", subject);
            }
            Message m = reply.join();
            if (m.isStatusMessage() && m.getStatus().getCode() == 503) {
                throw noBroker(subject);
            }
            return m;
        } catch (ExecutionException | CompletionException e) {
            Throwable c = e.getCause() == null ? e : e.getCause();
            if (refused.isDone()) {
                throw PermissionDeniedException.forSubject("publish to", subject);
            }
            if (c instanceof CancellationException || String.valueOf(c.getMessage()).contains("503")) {
                throw noBroker(subject);
            }
            if (c instanceof TimeoutException) {
                throw timedOut(subject, timeout);
            }
            throw new UnavailableException(subject + ": " + c, c);
        } catch (CancellationException e) {
            throw noBroker(subject);
        } catch (TimeoutException e) {
            throw timedOut(subject, timeout);
        } catch (IllegalStateException e) {
            throw new UnavailableException(subject + ": " + e.getMessage() + " (the client is closed?)", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new UnavailableException("interrupted while waiting for " + subject, e);
        } finally {
            stop.run();
        }
    }

    private UnavailableException noBroker(String subject) {
        return new UnavailableException(String.format("no broker answers %s; is 'pctl serve' running and connected to %s?", subject, opts.server()));
    }

    private static UnavailableException timedOut(String subject, Duration timeout) {
        return new UnavailableException(String.format("the broker did not answer %s within %d ms", subject, timeout.toMillis()));
    }

    private static PctlException remoteError(String code, byte[] body) {
        String message = null;
        String detail = null;
        try {
            Object v = Json.parse(new String(body, StandardCharsets.UTF_8));
            if (v instanceof Map) {
                Map<?, ?> m = (Map<?, ?>) v;
                if (m.get("code") instanceof String) {
                    code = (String) m.get("code");
                }
                if (m.get("message") instanceof String) {
                    message = (String) m.get("message");
                }
                if (m.get("detail") != null) {
                    detail = Json.write(m.get("detail"));
                }
            }
        } catch (Json.JsonException e) {
            message = null;
        }
        return PctlException.fromReply(code, message, detail);
    }

    private static byte[] json(Map<String, Object> m) {
        return Json.write(m).getBytes(StandardCharsets.UTF_8);
    }

    /**
     * The topic's descriptor ({@code pctl.api.topic.get}).
     *
     * @throws NotFoundException if there is no such topic
     * @throws BadRequestException if the name is not a topic name
     */
    public TopicDescriptor topic(String name) {
        return topic(name, opts.requestTimeout());
    }

    /** {@link #topic(String)} with its own time limit. */
    TopicDescriptor topic(String name, Duration timeout) {
        if (name == null || !TOPIC.matcher(name).matches()) {
            throw new BadRequestException(String.format("%s: a topic name is 1 to 64 characters of A-Z a-z 0-9 _ -", Json.quote(String.valueOf(name))));
        }
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("topic", name);
        Message m = request("pctl.api.topic.get", json(req), timeout);
        try {
            return TopicDescriptor.fromReply(Json.parse(new String(m.getData(), StandardCharsets.UTF_8)));
        } catch (Json.JsonException e) {
            throw new InternalException("bad reply to pctl.api.topic.get: " + e.getMessage(), e);
        }
    }

    /**
     * A module's bytes by digest ({@code pctl.api.plugin.get}), verified: their SHA-256 must be
     * the digest asked for (and the reply's {@code Pctl-Digest}), or they are never run. Cached
     * for the life of the client.
     *
     * @throws NotFoundException if the broker has no such plugin
     * @throws PluginRejectedException if the bytes do not match the digest
     */
    public byte[] plugin(String digest) {
        if (digest == null || !DIGEST.matcher(digest).matches()) {
            throw new BadRequestException("plugin digest " + Json.quote(String.valueOf(digest)) + ": expected 64 lowercase hex digits");
        }
        byte[] cached = modules.get(digest);
        if (cached != null) {
            return cached;
        }
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("plugin", digest);
        Message m = request("pctl.api.plugin.get", json(req));
        byte[] bytes = m.getData() == null ? new byte[0] : m.getData();
        String got = Plugin.sha256(bytes);
        String header = m.getHeaders() == null ? null : m.getHeaders().getFirst("Pctl-Digest");
        if (!got.equals(digest) || (header != null && !header.equals(digest))) {
            throw new PluginRejectedException(String.format(
                    "plugin sha256:%s: the broker sent %d bytes whose SHA-256 is %s (Pctl-Digest: %s); refusing to run them (spec/protocol.md §3)",
                    digest, bytes.length, got, header), null, digest, null, null, null);
        }
        modules.put(digest, bytes);
        return bytes;
    }

    /**
     * The partitioner of an epoch: its module (fetched and verified once per digest) prepared
     * with the epoch's config. Cached per (digest, config) for the life of the client, and closed
     * with it: do not close it yourself.
     */
    public Partitioner partitioner(TopicDescriptor.PartitionerRef ref) {
        String key = ref.digest() + "/" + java.util.HexFormat.of().formatHex(ref.configRef());
        CompletableFuture<Partitioner> mine = new CompletableFuture<>();
        CompletableFuture<Partitioner> f = partitioners.putIfAbsent(key, mine);
        if (f == null) {
            try {
                byte[] bytes = plugin(ref.digest());
                String source = "plugin " + (ref.name().isEmpty() ? ref.digest().substring(0, 12) : ref.name());
                Partitioner nat = opts.nativeBuiltins() ? NativeBuiltins.nativeFor(ref.digest(), ref.configRef(), bytes, opts.runtime()) : null;
                mine.complete(nat != null ? nat : Partitioner.fromBytes(bytes, source, ref.configRef(), opts.runtime()));
            } catch (RuntimeException e) {
                partitioners.remove(key, mine);
                mine.completeExceptionally(e);
                throw e;
            }
            f = mine;
        }
        try {
            return f.join();
        } catch (CompletionException e) {
            if (e.getCause() instanceof PctlException) {
                throw (PctlException) e.getCause();
            }
            throw e;
        }
    }

    /** A producer for a topic with a random producer id. */
    public Producer producer(String topic) {
        return producer(topic, ProducerOptions.defaults());
    }

    /**
     * A producer for a topic: fetches the descriptor and the current epoch's partitioner.
     *
     * @throws NotFoundException if there is no such topic
     */
    public Producer producer(String topic, ProducerOptions options) {
        return new Producer(this, topic, options);
    }

    /**
     * Joins a consumer group on a topic: a {@link Consumer} (spec/protocol.md §6). Creates the
     * group if it does not exist yet ({@link ConsumerOptions.Builder#fromBeginning}). Needs the
     * consumer or admin role, or a consumer credential for this topic and group.
     *
     * @throws NotFoundException if there is no such topic
     * @throws PermissionDeniedException if the credentials may not consume it as this group
     */
    public Consumer consumer(String topic, ConsumerOptions options) {
        TopicDescriptor t = Consumer.fetchTopic(this, topic, opts.requestTimeout());
        return new Consumer(this, t, options);
    }

    /**
     * Moves consumer group {@code group} of {@code topic} as a whole (spec/protocol.md §6.6) to
     * the beginning, the end or a time, in every partition stream the topic has ever had. Writes
     * the group's next generation (the commit point), then every partition's position; the
     * members follow within a heartbeat, with their gates closed again, so per-key order holds
     * among the records delivered afterwards. Creates the group if it does not exist. Members that
     * do not implement group generations (pctl's Go consumer, for now) must not be in a group that
     * is reset. Returns the new generation.
     */
    public int resetGroup(String topic, String group, ResetTarget to) {
        return Consumer.reset(this, topic, group, to, "pctl-java");
    }

    /**
     * Closes the connection (waiting up to a few seconds for its outgoing messages to be written)
     * and the partitioners.
     */
    @Override
    public void close() {
        for (CompletableFuture<Partitioner> f : partitioners.values()) {
            Partitioner p = f.getNow(null);
            if (p != null) {
                p.close();
            }
        }
        partitioners.clear();
        synchronized (this) {
            if (raw != null) {
                raw.close();
            }
        }
        closeQuietly(conn);
    }

    private static void closeQuietly(Connection c) {
        try {
            c.flush(Duration.ofSeconds(2));
        } catch (TimeoutException | InterruptedException | RuntimeException e) {
            if (e instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
        }
        try {
            c.close();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
