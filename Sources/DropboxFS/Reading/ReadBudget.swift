// One memory budget for all read-ahead of a mount. Every part a stream schedules reserves its
// length here first and gives it back when its buffer is freed, so the bytes held for read-ahead
// never exceed `capacity`, however many files are open. Fairness comes from `share`: a stream may
// hold at most the capacity divided by the streams holding read-ahead, so with many readers the
// windows shrink instead of the process growing (mountpoint-s3 bounds memory per handle, rclone
// per open file; neither bounds the sum).

//
// Buffers are recycled. A fresh multi-MiB buffer costs a page fault and a zeroed page per 4 KiB on
// first touch, which at a GB/s is a large share of the CPU; so a freed part buffer is parked here
// and handed to the next part of its size class. Parked buffers count against the same capacity
// (reserved + parked never exceeds it), so recycling never lets the process grow past the budget.
// A buffer of a recycled size none is parked for takes the place of parked buffers of other
// sizes, so the memory the process touches follows what it holds, not every part size it has used.
// Pinned folders use a ReadBudget of their own the same way, as a pool of their 8 MiB buffers.

import Synchronization

#if canImport(Glibc)
import Glibc
#endif

public final class ReadBudget: Sendable {
    public let capacity: UInt64
    private let state = Mutex(Counts())

    private struct Counts {
        var reserved: UInt64 = 0
        var peak: UInt64 = 0
        var streams = 0
        /// Free buffers by size, kept for reuse.
        var parked: [Int: [RawBuffer]] = [:]
        var parkedBytes: UInt64 = 0

        /// Takes a parked buffer of `size` out of the pool.
        mutating func unpark(_ size: Int) -> RawBuffer? {
            guard let buffer = parked[size]?.popLast() else { return nil }
            if parked[size]!.isEmpty { parked[size] = nil }
            parkedBytes -= UInt64(size)
            return buffer
        }

        /// Takes a parked buffer of the largest size parked, the one that frees most at once.
        mutating func unparkLargest() -> RawBuffer? {
            parked.keys.max().flatMap { unpark($0) }
        }
    }

    public init(capacity: UInt64) { self.capacity = capacity }

    /// Buffers at least this large are recycled; smaller ones are plain allocations.
    static let recycledSize = 512 << 10

    /// The size class a part of `length` bytes uses: the next power of two (recycled), or exactly
    /// `length` when small.
    static func bufferSize(for length: Int) -> Int {
        guard length >= recycledSize else { return max(length, 1) }
        var size = recycledSize
        while size < length { size <<= 1 }
        return size
    }

    /// Reserves a buffer of size class `size` and hands it over: a parked one of that size if
    /// there is one (no page faults), else a fresh allocation. Nil when it does not fit under the
    /// capacity. Other parked buffers are freed as far as the capacity needs, and for a fresh
    /// allocation as far as its size (below); doing this in one step matters, since freeing first
    /// would often free the very buffer about to be reused.
    ///
    /// A fresh allocation of a recycled size first frees parked buffers of other sizes, largest
    /// first, as far as its own size: the kernel then hands the new buffer the pages just given back, which cost no
    /// more than zeroing, instead of memory the process never touched (on a VM that returns free
    /// memory to its host, a page fault there and a zeroed page: per 4 KiB, 0.4 GB/s measured). A
    /// stream's part size follows the link, so one stream can use several sizes: through 300 MB/s
    /// at 50 ms its parts went from 16 MiB to 8 MiB once they shared the link, and with parked
    /// buffers kept by size, 128 MiB of read-ahead touched 223 MiB of fresh memory.
    func reserveBuffer(_ size: Int) -> UnsafeMutableRawBufferPointer? {
        var freed: [RawBuffer] = []
        let outcome = state.withLock { counts -> (ok: Bool, reused: RawBuffer?) in
            let bytes = UInt64(size)
            guard counts.reserved + bytes <= capacity else { return (false, nil) }
            counts.reserved += bytes
            counts.peak = max(counts.peak, counts.reserved)
            let reused = counts.unpark(size)
            // Only a buffer of a recycled size: a smaller one comes from malloc, not from the
            // pages given back, and would free a parked buffer for nothing (the last small part of
            // each file, every small file a pin fetches).
            if reused == nil, size >= Self.recycledSize {
                var given = 0
                while given < size, let buffer = counts.unparkLargest() {
                    freed.append(buffer)
                    given += buffer.pointer.count
                }
            }
            while counts.reserved + counts.parkedBytes > capacity, let buffer = counts.unparkLargest() {
                freed.append(buffer)
            }
            return (true, reused)
        }
        for buffer in freed { PartMemory.free(buffer.pointer) }   // outside the lock
        guard outcome.ok else { return nil }
        return outcome.reused?.pointer ?? PartMemory.allocate(size)
    }

    /// Gives back a part's buffer and its reservation together: parked for reuse if it fits under
    /// the capacity, else freed.
    func returnBuffer(_ buffer: UnsafeMutableRawBufferPointer) {
        let size = buffer.count
        let keep = state.withLock { counts -> Bool in
            counts.reserved -= min(counts.reserved, UInt64(size))
            guard size >= Self.recycledSize, counts.reserved + counts.parkedBytes + UInt64(size) <= capacity else { return false }
            counts.parked[size, default: []].append(RawBuffer(pointer: buffer))
            counts.parkedBytes += UInt64(size)
            return true
        }
        if !keep { PartMemory.free(buffer) }
    }

    /// Bytes of free buffers kept for reuse.
    var parkedBytes: UInt64 { state.withLock { $0.parkedBytes } }

    /// Frees every parked buffer: memory kept for reuse goes back to the system.
    func freeParked() {
        let freed = state.withLock { counts -> [RawBuffer] in
            let all = counts.parked.values.flatMap { $0 }
            counts.parked = [:]
            counts.parkedBytes = 0
            return all
        }
        for buffer in freed { PartMemory.free(buffer.pointer) }   // outside the lock
    }

    /// How much read-ahead one stream may hold now.
    var share: UInt64 {
        state.withLock { capacity / UInt64(max(1, $0.streams)) }
    }

    func streamStarted() { state.withLock { $0.streams += 1 } }
    func streamEnded() { state.withLock { $0.streams = max(0, $0.streams - 1) } }

    /// Bytes reserved now, the most ever reserved at once, and the streams holding read-ahead.
    public var usage: (reserved: UInt64, peak: UInt64, streams: Int) {
        state.withLock { ($0.reserved, $0.peak, $0.streams) }
    }
}

/// Memory for part buffers. Buffers of 2 MiB and more are mapped on their own, aligned to 2 MiB
/// and marked for transparent huge pages: a fresh buffer then costs one page fault per 2 MiB
/// instead of per 4 KiB (at a GB/s, faults on fresh 4 KiB pages took about 8% of the mount's CPU),
/// and the kernel's copy out of it into the page cache walks fewer pages. Where THP is off the
/// advice is ignored and the buffer is an ordinary mapping.
enum PartMemory {
    static let hugePage = 2 << 20

    static func allocate(_ size: Int) -> UnsafeMutableRawBufferPointer {
        guard size >= hugePage, let buffer = mapAligned(size) else {
            return .allocate(byteCount: size, alignment: 4096)
        }
        return buffer
    }

    static func free(_ buffer: UnsafeMutableRawBufferPointer) {
        if buffer.count >= hugePage {
            munmap(buffer.baseAddress, buffer.count)
        } else {
            buffer.deallocate()
        }
    }

    /// `size` bytes at a 2 MiB boundary: maps one huge page more and unmaps what lies outside.
    private static func mapAligned(_ size: Int) -> UnsafeMutableRawBufferPointer? {
        let span = size + hugePage
        guard let raw = mmap(nil, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              raw != MAP_FAILED else { return nil }
        let address = UInt(bitPattern: raw)
        let aligned = (address + UInt(hugePage) - 1) & ~(UInt(hugePage) - 1)
        let head = Int(aligned - address)
        if head > 0 { munmap(raw, head) }
        let tail = span - head - size
        if tail > 0 { munmap(UnsafeMutableRawPointer(bitPattern: aligned + UInt(size)), tail) }
        let base = UnsafeMutableRawPointer(bitPattern: aligned)!
        _ = madvise(base, size, MADV_HUGEPAGE)
        return UnsafeMutableRawBufferPointer(start: base, count: size)
    }
}

/// A parked buffer. `@unchecked Sendable`: a parked buffer belongs to nobody until `reserveBuffer`
/// hands it to exactly one part; it is only moved in and out under the budget's lock.
struct RawBuffer: @unchecked Sendable {
    let pointer: UnsafeMutableRawBufferPointer
}
