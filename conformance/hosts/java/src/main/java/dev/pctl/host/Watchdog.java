package dev.pctl.host;

/**
 * Enforces the time limit of spec/abi-v1.md §7 as wall-clock time per crossing.
 *
 * <p>Chicory checks the calling thread's interrupt flag at every function call and every
 * backward branch, in its interpreter and in the code its compiler generates, and throws
 * {@code ChicoryInterruptedException} when it is set. So a call that runs too long, whether it
 * loops ({@code loop-forever.wasm}) or recurses without loops ({@code exponential.wasm}), is
 * stopped by interrupting the thread that runs it. A daemon thread wakes every {@link #TICK_MS}
 * ms and interrupts the worker when the current call has run past its limit.
 *
 * <p>Per call the worker pays two volatile writes, one {@code System.nanoTime()} and one
 * uncontended lock; the daemon never wakes the worker. {@link #end} clears the interrupt flag
 * under the same lock the daemon interrupts under, so an interrupt meant for one call can never
 * land in the next.
 */
final class Watchdog {
    static final long TICK_MS = 5;

    private final Thread worker;
    private final Object lock = new Object();
    private volatile long started;
    private volatile long limitNanos;
    private volatile boolean active;
    private boolean fired; // guarded by lock

    /** Watches calls made by the given thread (the one that will call begin and end). */
    Watchdog(Thread worker) {
        this.worker = worker;
        Thread t = new Thread(this::watch, "pctl-watchdog");
        t.setDaemon(true);
        t.start();
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
                if (active && System.nanoTime() - started > limitNanos) {
                    fired = true;
                    active = false;
                    worker.interrupt();
                }
            }
        }
    }
}
