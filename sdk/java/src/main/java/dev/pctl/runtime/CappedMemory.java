package dev.pctl.runtime;

import com.dylibso.chicory.runtime.ByteArrayMemory;
import com.dylibso.chicory.runtime.Instance;
import com.dylibso.chicory.runtime.Memory;
import com.dylibso.chicory.wasm.types.DataSegment;
import com.dylibso.chicory.wasm.types.MemoryLimits;

/**
 * A module's linear memory, capped at the host's page limit (spec/abi-v1.md §7: 512 pages,
 * initial and grown). {@code memory.grow} beyond the cap fails with -1, as in core WebAssembly;
 * the memory remembers that it refused a grow, so that a trap that follows is reported as the
 * memory limit rather than a bare trap (hostile/memory-grow.wasm).
 *
 * <p>Everything else is Chicory's {@link ByteArrayMemory}. Atomics and waits are not forwarded:
 * modules that use threads are refused at load.
 */
@SuppressWarnings({"removal", "deprecation"})
final class CappedMemory implements Memory {
    private final ByteArrayMemory mem;
    private boolean growRefused;

    /** declared: the module's own limits; maxPages: the host's cap. */
    CappedMemory(MemoryLimits declared, int maxPages) {
        int max = Math.min(declared.maximumPages(), maxPages);
        this.mem = new ByteArrayMemory(new MemoryLimits(declared.initialPages(), Math.max(max, declared.initialPages())));
    }

    /** Whether memory.grow has failed at least once in this instance. */
    boolean growRefused() {
        return growRefused;
    }

    @Override
    public int grow(int size) {
        int r = mem.grow(size);
        if (r < 0) {
            growRefused = true;
        }
        return r;
    }

    @Override
    public int pages() {
        return mem.pages();
    }

    @Override
    public int initialPages() {
        return mem.initialPages();
    }

    @Override
    public int maximumPages() {
        return mem.maximumPages();
    }

    @Override
    public boolean shared() {
        return false;
    }

    @Override
    public Object lock(int address) {
        return mem.lock(address);
    }

    @Override
    public int waitOn(int address, int expected, long timeout) {
        throw new UnsupportedOperationException("atomics are refused at load");
    }

    @Override
    public int waitOn(int address, long expected, long timeout) {
        throw new UnsupportedOperationException("atomics are refused at load");
    }

    @Override
    public int notify(int address, int maxThreads) {
        throw new UnsupportedOperationException("atomics are refused at load");
    }

    @Override
    public void initialize(Instance instance, DataSegment[] dataSegments) {
        mem.initialize(instance, dataSegments);
    }

    @Override
    public void initialize(Instance instance, DataSegment[] dataSegments, int memoryIndex) {
        mem.initialize(instance, dataSegments, memoryIndex);
    }

    @Override
    public void initPassiveSegment(int segmentId, int dest, int offset, int size) {
        mem.initPassiveSegment(segmentId, dest, offset, size);
    }

    @Override
    public void write(int addr, byte[] data, int offset, int size) {
        mem.write(addr, data, offset, size);
    }

    @Override
    public byte read(int addr) {
        return mem.read(addr);
    }

    @Override
    public byte[] readBytes(int addr, int len) {
        return mem.readBytes(addr, len);
    }

    @Override
    public void writeI32(int addr, int data) {
        mem.writeI32(addr, data);
    }

    @Override
    public int readInt(int addr) {
        return mem.readInt(addr);
    }

    @Override
    public void writeLong(int addr, long data) {
        mem.writeLong(addr, data);
    }

    @Override
    public long readLong(int addr) {
        return mem.readLong(addr);
    }

    @Override
    public void writeShort(int addr, short data) {
        mem.writeShort(addr, data);
    }

    @Override
    public short readShort(int addr) {
        return mem.readShort(addr);
    }

    @Override
    public long readU16(int addr) {
        return mem.readU16(addr);
    }

    @Override
    public void writeByte(int addr, byte data) {
        mem.writeByte(addr, data);
    }

    @Override
    public void writeF32(int addr, float data) {
        mem.writeF32(addr, data);
    }

    @Override
    public long readF32(int addr) {
        return mem.readF32(addr);
    }

    @Override
    public float readFloat(int addr) {
        return mem.readFloat(addr);
    }

    @Override
    public void writeF64(int addr, double data) {
        mem.writeF64(addr, data);
    }

    @Override
    public double readDouble(int addr) {
        return mem.readDouble(addr);
    }

    @Override
    public long readF64(int addr) {
        return mem.readF64(addr);
    }

    @Override
    public void zero() {
        mem.zero();
    }

    @Override
    public void fill(byte value, int fromIndex, int toIndex) {
        mem.fill(value, fromIndex, toIndex);
    }

    @Override
    public void copy(int dest, int src, int size) {
        mem.copy(dest, src, size);
    }

    @Override
    public void drop(int segment) {
        mem.drop(segment);
    }
}
