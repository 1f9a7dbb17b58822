// One memory budget for all read-ahead of a mount. Every part a stream schedules reserves its
// length here first and gives it back when its buffer is freed, so the bytes held for read-ahead
// never exceed `capacity`, however many files are open. Fairness comes from `share`: a stream may
// hold at most the capacity divided by the streams holding read-ahead, so with many readers the
// windows shrink instead of the process growing (mountpoint-s3 bounds memory per handle, rclone
// per open file; neither bounds the sum).

//
// Buffers are recycled. A fresh multi-MiB buffer costs a page fault and a zeroed page on first
// touch, which at a GB/s is a large share of the CPU; so a freed part buffer is parked here for
// the next part. Parked memory counts against the same capacity (reserved + parked never exceeds
// it), so recycling never lets the process grow past the budget. A stream's part size follows
// the link, so parts come in several sizes: buffers of 2 MiB and more are therefore parked as
// 2 MiB blocks, and a buffer of any such size is assembled from whichever blocks are parked
// (their pages moved into place, not copied), so the memory the process touches is what it
// holds at most, not every part size it has used. Smaller recycled sizes are parked by size.
// Pinned folders use a ReadBudget of their own the same way, as a pool of their 8 MiB buffers.

import CPartMemory
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
        /// Free buffers under 2 MiB by size, kept for reuse.
        var parked: [Int: [RawBuffer]] = [:]
        /// Free 2 MiB blocks, kept for buffers of 2 MiB and more.
        var blocks: [RawBuffer] = []
        var parkedBytes: UInt64 = 0

        /// Takes a parked buffer of `size` (under 2 MiB) out of the pool.
        mutating func unpark(_ size: Int) -> RawBuffer? {
            guard let buffer = parked[size]?.popLast() else { return nil }
            if parked[size]!.isEmpty { parked[size] = nil }
            parkedBytes -= UInt64(size)
            return buffer
        }

        /// Takes up to `count` parked blocks, the most recently parked last: a buffer just given
        /// back comes out whole and in order, so it needs no move.
        mutating func unparkBlocks(_ count: Int) -> [RawBuffer] {
            let taken = Array(blocks.suffix(count))
            blocks.removeLast(taken.count)
            parkedBytes -= UInt64(taken.count * PartMemory.block)
            return taken
        }

        /// Takes a block if one is parked, else a buffer of the largest size parked: the one
        /// that frees most at once.
        mutating func unparkLargest() -> RawBuffer? {
            if !blocks.isEmpty { return unparkBlocks(1).first }
            return parked.keys.max().flatMap { unpark($0) }
        }

        /// Parks `buffer` as far as the capacity allows: as blocks if it is made of them, else
        /// whole if of a recycled size. Returns what did not fit, to be freed.
        mutating func park(_ buffer: UnsafeMutableRawBufferPointer, capacity: UInt64) -> [RawBuffer] {
            if let pieces = PartMemory.blocks(of: buffer) {
                var unparked: [RawBuffer] = []
                for piece in pieces {
                    if reserved + parkedBytes + UInt64(piece.pointer.count) <= capacity {
                        blocks.append(piece)
                        parkedBytes += UInt64(piece.pointer.count)
                    } else {
                        unparked.append(piece)
                    }
                }
                return unparked
            }
            let size = buffer.count
            guard size >= ReadBudget.recycledSize, reserved + parkedBytes + UInt64(size) <= capacity else {
                return [RawBuffer(pointer: buffer)]
            }
            parked[size, default: []].append(RawBuffer(pointer: buffer))
            parkedBytes += UInt64(size)
            return []
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

    /// Reserves a buffer of size class `size` and hands it over: made of parked memory where
    /// there is some (no page faults), else fresh. Nil when it does not fit under the capacity.
    /// Other parked memory is freed as far as the capacity needs, and for fresh memory as far as
    /// its size (below); doing this in one step matters, since freeing first would often free
    /// the very memory about to be reused.
    ///
    /// Fresh memory of a recycled size first frees parked memory it cannot use (blocks, for a
    /// buffer under 2 MiB; parked buffers under 2 MiB, for one of blocks), as far as its own
    /// size: the kernel then hands the new buffer the pages just given back, which cost no more
    /// than zeroing, instead of memory the process never touched (on a VM that returns free
    /// memory to its host, a page fault there and a zeroed page: 0.4–0.6 GB/s measured). That
    /// holds only within about a second of the free, before the host takes the pages back (touched
    /// again 1–4 s later they ran at 0.7–1.7 GB/s), which is why blocks stay parked instead.
    func reserveBuffer(_ size: Int) -> UnsafeMutableRawBufferPointer? {
        var freed: [RawBuffer] = []
        let outcome = state.withLock { counts -> (ok: Bool, reused: RawBuffer?, blocks: [RawBuffer]) in
            let bytes = UInt64(size)
            guard counts.reserved + bytes <= capacity else { return (false, nil, []) }
            counts.reserved += bytes
            counts.peak = max(counts.peak, counts.reserved)
            let ofBlocks = PartMemory.isMadeOfBlocks(size)
            let blocks = ofBlocks ? counts.unparkBlocks(size / PartMemory.block) : []
            let reused = ofBlocks ? nil : counts.unpark(size)
            // Only memory of a recycled size: a smaller buffer comes from malloc, not from the
            // pages given back, and would free parked memory for nothing (the last small part of
            // each file, every small file a pin fetches).
            let fresh = reused == nil ? size - blocks.count * PartMemory.block : 0
            if fresh > 0, size >= Self.recycledSize {
                var given = 0
                while given < fresh, let buffer = counts.unparkLargest() {
                    freed.append(buffer)
                    given += buffer.pointer.count
                }
            }
            while counts.reserved + counts.parkedBytes > capacity, let buffer = counts.unparkLargest() {
                freed.append(buffer)
            }
            return (true, reused, blocks)
        }
        for buffer in freed { PartMemory.free(buffer.pointer) }   // outside the lock
        guard outcome.ok else { return nil }
        if let reused = outcome.reused { return reused.pointer }
        guard let buffer = PartMemory.allocate(size, reusing: outcome.blocks.map(\.pointer)) else {
            state.withLock { $0.reserved -= min($0.reserved, UInt64(size)) }
            return nil
        }
        return buffer
    }

    /// Gives back a part's buffer and its reservation together: parked for reuse as far as it
    /// fits under the capacity, the rest freed.
    func returnBuffer(_ buffer: UnsafeMutableRawBufferPointer) {
        let unparked = state.withLock { counts -> [RawBuffer] in
            counts.reserved -= min(counts.reserved, UInt64(buffer.count))
            return counts.park(buffer, capacity: capacity)
        }
        for piece in unparked { PartMemory.free(piece.pointer) }   // outside the lock
    }

    /// Bytes of free memory kept for reuse.
    var parkedBytes: UInt64 { state.withLock { $0.parkedBytes } }

    /// Frees all parked memory: what was kept for reuse goes back to the system.
    func freeParked() {
        let freed = state.withLock { counts -> [RawBuffer] in
            let all = counts.parked.values.flatMap { $0 } + counts.blocks
            counts.parked = [:]
            counts.blocks = []
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

/// Memory for part buffers. Buffers of whole 2 MiB blocks are mapped on their own, aligned to
/// 2 MiB and marked for transparent huge pages: a fresh buffer then costs one page fault per
/// 2 MiB instead of per 4 KiB (at a GB/s, faults on fresh 4 KiB pages took about 8% of the
/// mount's CPU), and the kernel's copy out of it into the page cache walks fewer pages. Where THP
/// is off the advice is ignored and the buffer is an ordinary mapping. Such a buffer is parked as
/// its blocks, and a later buffer of any size of blocks is assembled from them by moving their
/// pages into one mapping (`dbx_move_pages`): about 10 µs a block, where fresh pages cost
/// milliseconds.
enum PartMemory {
    static let block = 2 << 20

    /// Whether a buffer of `size` bytes is mapped as whole blocks.
    static func isMadeOfBlocks(_ size: Int) -> Bool { size >= block && size % block == 0 }

    /// A buffer of `size` bytes, its first blocks the pages of `blocks` (each one block, parked)
    /// moved into place, the rest fresh. Nil when the system has no memory to map.
    static func allocate(_ size: Int, reusing blocks: [UnsafeMutableRawBufferPointer]) -> UnsafeMutableRawBufferPointer? {
        guard isMadeOfBlocks(size) else { return .allocate(byteCount: size, alignment: 4096) }
        if let whole = adjoining(blocks), whole.count == size { return whole }
        guard let buffer = mapAligned(size) else {
            blocks.forEach(free)
            return nil
        }
        for (index, piece) in blocks.enumerated() {
            let target = buffer.baseAddress! + index * block
            // A failed move leaves fresh pages at the target, which still make a buffer.
            if dbx_move_pages(piece.baseAddress, block, target) != 0 { free(piece) }
        }
        return buffer
    }

    static func free(_ buffer: UnsafeMutableRawBufferPointer) {
        if isMadeOfBlocks(buffer.count) {
            munmap(buffer.baseAddress, buffer.count)
        } else {
            buffer.deallocate()
        }
    }

    /// A buffer's blocks, to be parked one by one; nil when it is not made of blocks.
    static func blocks(of buffer: UnsafeMutableRawBufferPointer) -> [RawBuffer]? {
        guard isMadeOfBlocks(buffer.count), let base = buffer.baseAddress else { return nil }
        return stride(from: 0, to: buffer.count, by: block).map {
            RawBuffer(pointer: UnsafeMutableRawBufferPointer(start: base + $0, count: block))
        }
    }

    /// `blocks` as one buffer when each follows the one before it in memory (a buffer parked and
    /// taken back whole).
    private static func adjoining(_ blocks: [UnsafeMutableRawBufferPointer]) -> UnsafeMutableRawBufferPointer? {
        guard let first = blocks.first?.baseAddress else { return nil }
        for (index, piece) in blocks.enumerated() where piece.baseAddress != first + index * block { return nil }
        return UnsafeMutableRawBufferPointer(start: first, count: blocks.count * block)
    }

    /// `size` bytes at a 2 MiB boundary: maps one block more and unmaps what lies outside.
    private static func mapAligned(_ size: Int) -> UnsafeMutableRawBufferPointer? {
        let span = size + block
        guard let raw = mmap(nil, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              raw != MAP_FAILED else { return nil }
        let address = UInt(bitPattern: raw)
        let aligned = (address + UInt(block) - 1) & ~(UInt(block) - 1)
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
