// Work nobody waits for (saving the tree) at the lowest CPU priority. On a small machine the
// first save of a large tree (about a CPU-second for 100,000 entries) came while the user's first
// reads ran and took a third of the mount's CPU from them; at nice 19 the scheduler gives it what
// the readers leave.

#if canImport(Glibc)
import Glibc

enum BackgroundPriority {
    /// Runs `work` with the calling thread at nice 19, then puts the thread's nice back where the
    /// system allows (raising it again needs CAP_SYS_NICE or RLIMIT_NICE; without either the
    /// thread, the change feed's, stays low, which only delays the feed's own background work).
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
}
#endif
