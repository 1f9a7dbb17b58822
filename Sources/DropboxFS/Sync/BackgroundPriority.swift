// Work nobody waits for (saving the tree) at the lowest CPU priority. On a small machine the
// first save of a large tree (about a CPU-second for 100,000 entries) came while the user's first
// reads ran and took a third of the mount's CPU from them; at nice 19 the scheduler gives it what
// the readers leave.

import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc

enum BackgroundPriority {
    /// Runs `work` at nice 19 on a thread of its own and waits for it, for a caller that must go
    /// on at its own priority: the change feed. Without CAP_SYS_NICE or RLIMIT_NICE (a user's
    /// mount) a thread lowered once stays low, and the feed lowered by its first periodic save
    /// applied every later change at nice 19, minutes late while the user's work held the CPU.
    static func onALoweredThread<T: Sendable>(_ work: @escaping @Sendable () -> T) -> T {
        let finished = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        let thread = Thread {
            let value = lowered(work)
            result.withLock { $0 = value }
            finished.signal()
        }
        thread.name = "dbx-save"
        thread.start()
        finished.wait()
        return result.withLock { $0 }!
    }

    /// Runs `work` with the calling thread at nice 19, then puts the thread's nice back where the
    /// system allows (raising it again needs CAP_SYS_NICE or RLIMIT_NICE; without either the
    /// thread stays low: for threads that end after the work, or see `onALoweredThread`).
    static func lowered<T>(_ work: () -> T) -> T {
        guard let thread = threadID() else { return work() }
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        errno = 0
        let previous = getpriority(which, thread)
        let known = errno == 0
        _ = setpriority(which, thread, 19)
        defer { if known { _ = setpriority(which, thread, previous) } }
        return work()
    }

    /// The calling thread's id, which nice applies to on Linux: `/proc/thread-self` links to
    /// `PID/task/TID` (gettid is not in Swift's Glibc module).
    private static func threadID() -> id_t? {
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        let link = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return link.split(separator: "/").last.flatMap { id_t($0) }
    }
}
#else
enum BackgroundPriority {
    static func lowered<T>(_ work: () -> T) -> T { work() }
    static func onALoweredThread<T: Sendable>(_ work: @escaping @Sendable () -> T) -> T { work() }
}
#endif
