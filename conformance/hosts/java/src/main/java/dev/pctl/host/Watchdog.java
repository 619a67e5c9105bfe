package dev.pctl.host;

/**
 * Enforces the time limit of spec/abi-v1.md §7 as wall-clock time per crossing.
 *
 * <p>Chicory checks the calling thread's interrupt flag at every function call and every
 * backward branch of the code its compiler generates, and at calls and {@code br} in its
 * interpreter (the host adds {@code br_if} and {@code br_table}, see {@link Plugin}); it then
 * throws {@code ChicoryInterruptedException}. So a call that runs too long, whether it loops
 * ({@code loop-forever.wasm}) or recurses without loops ({@code exponential.wasm}), is stopped by
 * interrupting the thread that runs it. A daemon thread wakes every {@link #TICK_MS} ms and
 * interrupts the worker when the current call has run past its limit.
 *
 * <p>Should a call not stop within {@link #GRACE_NANOS} of the interrupt (an engine path that
 * never checks the flag), the watchdog prints a time-limit error and halts the process with
 * status 1: the command never hangs and never prints a partition for that key.
 *
 * <p>Per call the worker pays two volatile writes, one {@code System.nanoTime()} and one
 * uncontended lock; the daemon never wakes the worker. {@link #end} clears the interrupt flag
 * under the same lock the daemon interrupts under, so an interrupt meant for one call can never
 * land in the next.
 */
final class Watchdog {
    static final long TICK_MS = 5;
    static final long GRACE_NANOS = 2_000_000_000L;

    private final Thread worker;
    private final Object lock = new Object();
    private volatile long started;
    private volatile long limitNanos;
    private volatile boolean active;
    private volatile String who = "the module";
    private boolean fired; // guarded by lock
    private long firedAt; // guarded by lock

    /** Watches calls made by the given thread (the one that will call begin and end). */
    Watchdog(Thread worker) {
        this.worker = worker;
        Thread t = new Thread(this::watch, "pctl-watchdog");
        t.setDaemon(true);
        t.start();
    }

    /** Names the module in the message printed if a call cannot be stopped. */
    void describe(String who) {
        this.who = who;
    }

    /** Marks the start of a call that may run for limitNanos. */
    void begin(long limitNanos) {
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
            Thread.interrupted(); // clear a flag set for this call
        }
        return f;
    }

    private void watch() {
        while (true) {
            try {
                Thread.sleep(TICK_MS);
            } catch (InterruptedException e) {
                return;
            }
            synchronized (lock) {
                long now = System.nanoTime();
                if (active && !fired && now - started > limitNanos) {
                    fired = true;
                    firedAt = now;
                    worker.interrupt();
                } else if (active && fired && now - firedAt > GRACE_NANOS) {
                    System.err.printf("pctl-java run: %s: time limit exceeded: a call ran past its limit of %d ms and did not stop "
                            + "within %d ms of being interrupted; exiting%n", who, limitNanos / 1_000_000, GRACE_NANOS / 1_000_000);
                    System.err.flush();
                    Runtime.getRuntime().halt(Main.EXIT_FAILURE);
                }
            }
        }
    }
}
