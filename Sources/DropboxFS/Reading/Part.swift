// One Range request's worth of a file at one rev: a buffer filled front to back by whoever runs
// its fetch, while readers copy out what has arrived. A reader waits only for the bytes it needs,
// not for the whole part, so the first byte of a stream is served one round trip after the read.

import CPartMemory
import DropboxClient
import Foundation

/// `@unchecked Sendable`: the storage is written only by the one thread that won `claim()`, and
/// only at and beyond `filled`; readers look only below `filled`. `filled` and the status change
/// under `condition`'s lock after the bytes are copied, so a reader that sees a count also sees
/// the bytes. The lock orders ordinary stores before the count, not streaming ones: that takes
/// the store fence `dbx_streaming_copy` ends with, so a plain copy may replace it but not a
/// streaming copy without its fence.
final class Part: @unchecked Sendable {
    enum Status: Equatable {
        case queued, running, done, cancelled
        case failed(FSError)
    }

    enum Wait { case ready, cancelled }

    let range: Range<UInt64>
    let length: Int
    /// At least `length` bytes: a budgeted part's buffer is a recycled size class.
    private let storage: UnsafeMutableRawBufferPointer
    /// Whose memory this is: given back when the part goes (nil for unbudgeted one-off reads).
    private let budget: ReadBudget?
    private let condition = NSCondition()
    private var filled = 0
    private var status = Status.queued
    private var served = 0
    /// The smallest prefix a blocked reader waits for (`Int.max` when none waits). An append
    /// wakes readers only once it reaches that: over TLS bytes arrive in 16 KiB records, and
    /// waking a reader for each (which finds too few bytes and sleeps again) cost more CPU than
    /// the copy.
    private var wanted = Int.max
    /// Cancelled with the part: its download, stalled or not, ends within a second (the transport
    /// checks it), so a closed file does not keep a connection and a fetch thread until the deadline.
    let downloads = CallCancellation()

    /// A part outside the budget (a one-off read): its own buffer, freed with it.
    init(range: Range<UInt64>) {
        self.range = range
        budget = nil
        length = Int(range.upperBound - range.lowerBound)
        storage = .allocate(byteCount: max(length, 1), alignment: 4096)
    }

    /// A part of the budget, in `buffer` from `budget.reserveBuffer(ReadBudget.bufferSize(for:))`.
    init(range: Range<UInt64>, buffer: UnsafeMutableRawBufferPointer, budget: ReadBudget) {
        self.range = range
        self.budget = budget
        length = Int(range.upperBound - range.lowerBound)
        precondition(buffer.count >= length, "a part's buffer is smaller than the part")
        storage = buffer
    }

    deinit {
        if let budget { budget.returnBuffer(storage) } else { storage.deallocate() }
    }

    var filledCount: Int { condition.withLock { filled } }

    var isCancelled: Bool { condition.withLock { status == .cancelled } }

    /// Bytes still to come while the part is being fetched (or waits to be); none once it ended.
    var bytesToArrive: UInt64 {
        condition.withLock {
            switch status {
            case .queued, .running: UInt64(length - filled)
            case .done, .cancelled, .failed: 0
            }
        }
    }

    var isFinished: Bool {
        condition.withLock {
            switch status {
            case .queued, .running: false
            case .done, .cancelled, .failed: true
            }
        }
    }

    /// queued → running. Exactly one caller gets true, and must then run the fetch.
    func claim() -> Bool {
        condition.withLock {
            guard status == .queued else { return false }
            status = .running
            return true
        }
    }

    /// The fetcher's next bytes. Returns false when the part was cancelled (stop downloading).
    /// One lock per chunk, after the copy: only the claimant appends, so `filled` changes only
    /// here and its own read of it needs no lock. A chunk that arrives after a cancel is copied
    /// in vain but never counted.
    func append(_ chunk: UnsafeRawBufferPointer) -> Bool {
        let start = filled
        guard chunk.count <= length - start else { return false }
        if let base = chunk.baseAddress, chunk.count > 0 {
            // Streaming stores: the bytes are read again only when the reader gets here, long
            // after they would have left the cache (StreamingCopy.c).
            dbx_streaming_copy(storage.baseAddress!.advanced(by: start), base, chunk.count)
        }
        return publish(filledUpTo: start + chunk.count)
    }

    /// The fetcher's next `count` bytes, written in place by `write` into the buffer it is given
    /// (exactly the `count` bytes after those already there), so that bytes read from a file need
    /// no buffer of their own and no second copy. `write` returns false when it could not fill it
    /// all; then nothing is counted. Returns false when the bytes do not fit, `write` failed or
    /// the part was cancelled. `write` stores as any code does, so the lock orders its bytes
    /// before the count.
    func append(count: Int, writingWith write: (UnsafeMutableRawBufferPointer) -> Bool) -> Bool {
        let start = filled
        guard count >= 0, count <= length - start else { return false }
        guard write(UnsafeMutableRawBufferPointer(rebasing: storage[start..<(start + count)])) else { return false }
        return publish(filledUpTo: start + count)
    }

    /// Counts the bytes below `end` as arrived, and wakes readers waiting for them.
    private func publish(filledUpTo end: Int) -> Bool {
        condition.withLock {
            guard status == .running else { return false }
            filled = end
            if filled >= wanted {
                wanted = Int.max
                condition.broadcast()
            }
            return true
        }
    }

    func finish() { settle(.done) }
    func fail(_ error: FSError) { settle(.failed(error)) }
    func cancel() {
        settle(.cancelled)
        downloads.cancel()
    }

    private func settle(_ outcome: Status) {
        condition.withLock {
            switch status {
            case .queued, .running: status = outcome
            case .done, .cancelled, .failed: return
            }
            wanted = Int.max
            condition.broadcast()
        }
    }

    /// Blocks until the first `count` bytes have arrived. Throws the fetch's failure; returns
    /// `.cancelled` when the part was dropped before they came (the caller fetches them itself).
    func wait(forPrefix count: Int) throws(FSError) -> Wait {
        condition.lock()
        defer { condition.unlock() }
        while filled < count {
            switch status {
            case .queued, .running:
                // Woken readers all come back here and register again, so `wanted` stays the
                // least any of them needs.
                wanted = min(wanted, count)
                condition.wait()
            case .done: return filled >= count ? .ready : .cancelled
            case .cancelled: return .cancelled
            case .failed(let error): throw error
            }
        }
        return .ready
    }

    /// Bytes `offsets` (relative to the part's start) that have already arrived.
    func bytes(_ offsets: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(storage)[offsets])
    }

    var isFullyServed: Bool { condition.withLock { served >= length } }

    /// Counts bytes handed to readers; true once every byte has been (the stream may drop the part).
    func markServed(_ count: Int) -> Bool {
        condition.withLock {
            served += count
            return served >= length
        }
    }
}
