// One memory budget for all read-ahead of a mount. Every part a stream schedules reserves its
// length here first and gives it back when its buffer is freed, so the bytes held for read-ahead
// never exceed `capacity`, however many files are open. Fairness comes from `share`: a stream may
// hold at most the capacity divided by the streams holding read-ahead, so with many readers the
// windows shrink instead of the process growing (mountpoint-s3 bounds memory per handle, rclone
// per open file; neither bounds the sum).

import Synchronization

public final class ReadBudget: Sendable {
    public let capacity: UInt64
    private let state = Mutex(Counts())

    private struct Counts {
        var reserved: UInt64 = 0
        var peak: UInt64 = 0
        var streams = 0
    }

    public init(capacity: UInt64) { self.capacity = capacity }

    /// Takes `bytes` if they fit under the capacity.
    func reserve(_ bytes: UInt64) -> Bool {
        state.withLock { counts in
            guard counts.reserved + bytes <= capacity else { return false }
            counts.reserved += bytes
            counts.peak = max(counts.peak, counts.reserved)
            return true
        }
    }

    func release(_ bytes: UInt64) {
        state.withLock { $0.reserved -= min($0.reserved, bytes) }
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
