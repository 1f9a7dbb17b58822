// A small fixed pool of threads for blocking Dropbox calls, not a `Task` or a thread per request:
// the read engine fetches its parts with one, the thumbnailer its batches with another. Each
// worker runs one blocking call at a time (libcurl on the calling thread, one pooled connection),
// so the pool size is also the number of parallel requests its user makes. Threads start on first use, which is after libfuse's daemonizing fork, and leave
// after a while without work (a test's engines do not leave threads behind for long).
//
// Two queues: urgent work (a part a reader is already waiting for, thumbnails a folder listing
// waits for) goes before background work, so a stream that starts (or restarts after a seek) is
// not stuck behind other files' prefetching.

import Foundation

final class WorkerPool: @unchecked Sendable {
    // `@unchecked Sendable`: every stored var is read and written only under `condition`'s lock.
    private let condition = NSCondition()
    private var urgent: [@Sendable () -> Void] = []
    private var background: [@Sendable () -> Void] = []
    private var urgentHead = 0
    private var backgroundHead = 0
    private var threads = 0
    private var idle = 0
    private var running = 0
    /// Callers of `drain` waiting for running jobs to end: the only ones a finished job wakes.
    private var draining = 0
    let limit: Int
    private let idleExit: TimeInterval
    /// The threads' name, as `top -H` and a debugger show it.
    private let name: String

    init(name: String, limit: Int, idleExit: TimeInterval = 30) {
        self.name = name
        self.limit = max(1, limit)
        self.idleExit = idleExit
    }

    func submit(urgent isUrgent: Bool, _ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if isUrgent { urgent.append(job) } else { background.append(job) }
        let pending = urgent.count - urgentHead + background.count - backgroundHead
        let spawn = pending > idle && threads < limit
        if spawn { threads += 1 }
        condition.signal()
        condition.unlock()
        if spawn {
            let thread = Thread { [self] in loop() }
            thread.name = name
            thread.start()
        }
    }

    /// Threads running now (for tests).
    var threadCount: Int { condition.withLock { threads } }

    /// Forgets queued jobs and waits (at most `timeout` seconds) for running ones to end, so an
    /// unmount keeps what was downloaded (the block cache) without waiting for read-ahead.
    func drain(timeout: TimeInterval) {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        urgent.removeAll()
        background.removeAll()
        urgentHead = 0
        backgroundHead = 0
        draining += 1
        while running > 0 && condition.wait(until: deadline) {}
        draining -= 1
        condition.unlock()
    }

    private func next() -> (@Sendable () -> Void)? {
        if urgentHead < urgent.count {
            defer { urgentHead += 1; compact() }
            return urgent[urgentHead]
        }
        if backgroundHead < background.count {
            defer { backgroundHead += 1; compact() }
            return background[backgroundHead]
        }
        return nil
    }

    private func compact() {
        if urgentHead == urgent.count { urgent.removeAll(keepingCapacity: true); urgentHead = 0 }
        if backgroundHead == background.count { background.removeAll(keepingCapacity: true); backgroundHead = 0 }
    }

    private func loop() {
        condition.lock()
        while true {
            if let job = next() {
                running += 1
                condition.unlock()
                job()
                condition.lock()
                running -= 1
                // Not a broadcast for every job: it woke every idle worker to find nothing to do,
                // a few hundred context switches per GiB streamed.
                if draining > 0 { condition.broadcast() }
                continue
            }
            idle += 1
            let woke = condition.wait(until: Date().addingTimeInterval(idleExit))
            idle -= 1
            if !woke, urgentHead == urgent.count, backgroundHead == background.count {
                threads -= 1
                condition.unlock()
                return
            }
        }
    }
}
