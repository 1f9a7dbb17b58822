@testable import DropboxFS
import Foundation
import Synchronization
import Testing

/// The pool of threads for blocking Dropbox calls: every job runs, and `drain` (at unmount)
/// returns once the running ones have ended.
@Suite("Worker pool")
struct WorkerPoolTests {
    @Test func everyJobRunsOnAtMostTheLimitOfThreads() {
        let pool = WorkerPool(name: "test", limit: 3)
        let ran = Mutex(0)
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<200 {
            pool.submit(urgent: false) {
                ran.withLock { $0 += 1 }
                done.signal()
            }
        }
        for _ in 0..<200 { #expect(done.wait(timeout: .now() + 10) == .success) }
        #expect(ran.withLock { $0 } == 200)
        #expect(pool.threadCount <= 3)
    }

    @Test func drainWaitsForTheRunningJobAndDropsTheQueuedOnes() {
        let pool = WorkerPool(name: "test", limit: 1)
        let started = DispatchSemaphore(value: 0)
        let finished = Mutex(false)
        let queuedRan = Mutex(false)
        pool.submit(urgent: true) {
            started.signal()
            Thread.sleep(forTimeInterval: 0.3)
            finished.withLock { $0 = true }
        }
        pool.submit(urgent: false) { queuedRan.withLock { $0 = true } }
        #expect(started.wait(timeout: .now() + 10) == .success)
        // The job's end wakes the drain: it does not sit out its deadline (a liveness bound, far
        // above the job's 0.3 s).
        let drainStarted = ContinuousClock.now
        pool.drain(timeout: 60)
        #expect(ContinuousClock.now - drainStarted < .seconds(30), "drain waited out its deadline")
        #expect(finished.withLock { $0 }, "drain returned before the running job ended")
        Thread.sleep(forTimeInterval: 0.1)
        #expect(!queuedRan.withLock { $0 }, "a job queued behind it still ran")
    }
}
