package dev.pctl.runtime;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiConsumer;

/**
 * Enforces the time limit of spec/abi-v1.md §7 as wall-clock time per crossing.
 *
 * <p>Chicory checks the calling thread's interrupt flag at every function call and every
 * backward branch of the code its compiler generates, and at calls and {@code br} in its
 * interpreter (the host adds {@code br_if} and {@code br_table}, see {@link Plugin}); it then
 * throws {@code ChicoryInterruptedException}. So a call that runs too long, whether it loops
 * ({@code loop-forever.wasm}) or recurses without loops ({@code exponential.wasm}), is stopped by
 * interrupting the thread that runs it. One daemon thread per JVM wakes every {@link #TICK_MS} ms
 * and interrupts the thread of every call that has run past its limit.
 *
 * <p>Calls may run on any thread, several at once (one per instance). Each {@link PluginInstance}
 * owns a {@link Slot} that is registered while the instance lives; per call the worker pays two
 * volatile writes, one {@code System.nanoTime()} and one uncontended lock. {@link Slot#end} clears
 * the interrupt flag under the same lock the watchdog interrupts under, so an interrupt meant for
 * one call can never land in the next. An interrupt that was pending on the caller's thread before
 * the call is put back afterwards, and one that arrives from elsewhere during the call is left set
 * (the call then fails as interrupted, see {@link PluginException.Kind#INTERRUPTED}).
 *
 * <p>Should a call not stop within {@link #GRACE_NANOS} of the interrupt (an engine path that
 * never checks the flag), the {@linkplain #onStuck stuck handler} runs once for it: by default it
 * logs a warning (the thread stays busy; nothing else can safely be done inside a library); the
 * conformance host's command halts the process instead, so that it never hangs.
 */
public final class Watchdog {
    static final long TICK_MS = 5;
    /** How long a call may ignore its interrupt before the stuck handler runs. */
    public static final long GRACE_NANOS = 2_000_000_000L;

    private static final Set<Slot> SLOTS = ConcurrentHashMap.newKeySet();
    private static volatile BiConsumer<String, Long> stuckHandler = Watchdog::logStuck;
    private static Thread ticker; // guarded by Watchdog.class

    private Watchdog() {}

    /**
     * Replaces what happens when a call does not stop within {@link #GRACE_NANOS} of being
     * interrupted; the handler gets the module's description and the call's limit in nanoseconds.
     */
    public static void onStuck(BiConsumer<String, Long> handler) {
        stuckHandler = handler;
    }

    private static void logStuck(String who, Long limitNanos) {
        System.getLogger("dev.pctl.runtime").log(System.Logger.Level.WARNING,
                "{0}: a call ran past its time limit of {1} ms and did not stop within {2} ms of being interrupted; its thread is still busy",
                who, limitNanos / 1_000_000, GRACE_NANOS / 1_000_000);
    }

    private static synchronized void ensureTicker() {
        if (ticker == null) {
            ticker = new Thread(Watchdog::watch, "pctl-watchdog");
            ticker.setDaemon(true);
            ticker.start();
        }
    }

    /** The watchdog's view of one instance: at most one call at a time. */
    static final class Slot {
        private final Object lock = new Object();
        private volatile String who;
        private volatile Thread worker;
        private volatile long started;
        private volatile long limitNanos;
        private volatile boolean active;
        private boolean fired; // guarded by lock
        private boolean stuckReported; // guarded by lock
        private long firedAt; // guarded by lock
        private boolean pending; // the caller's own interrupt, set before the call

        Slot(String who) {
            this.who = who;
            ensureTicker();
            SLOTS.add(this);
        }

        void describe(String who) {
            this.who = who;
        }

        /** Marks the start of a call on the current thread that may run for limitNanos. */
        void begin(long limitNanos) {
            pending = Thread.interrupted(); // a pending interrupt would stop the call at once
            this.worker = Thread.currentThread();
            this.limitNanos = limitNanos;
            this.started = System.nanoTime();
            this.active = true;
        }

        /** Marks the end of the call; returns whether the limit was hit (the worker was interrupted). */
        boolean end() {
            boolean f;
            synchronized (lock) {
                active = false;
                f = fired;
                fired = false;
                stuckReported = false;
                if (f) {
                    Thread.interrupted(); // clear the flag set for this call
                }
            }
            if (pending) {
                pending = false;
                Thread.currentThread().interrupt();
            }
            return f;
        }

        /** Stops watching this slot (its instance is discarded). */
        void close() {
            SLOTS.remove(this);
        }

        private void check(long now) {
            if (!active) {
                return;
            }
            synchronized (lock) {
                if (!active) {
                    return;
                }
                if (!fired && now - started > limitNanos) {
                    fired = true;
                    firedAt = now;
                    worker.interrupt();
                } else if (fired && !stuckReported && now - firedAt > GRACE_NANOS) {
                    stuckReported = true;
                    stuckHandler.accept(who, limitNanos);
                }
            }
        }
    }

    private static void watch() {
        while (true) {
            try {
                Thread.sleep(TICK_MS);
            } catch (InterruptedException e) {
                return;
            }
            long now = System.nanoTime();
            for (Slot s : SLOTS) {
                s.check(now);
            }
        }
    }
}
