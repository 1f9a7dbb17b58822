@testable import DropboxFS
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Saving the tree runs at nice 19, on a thread of its own for the change feed (BackgroundPriority.swift).
@Suite("Background priority")
struct BackgroundPriorityTests {
    /// The calling thread's nice (field 19 of /proc/thread-self/stat; on Linux nice is per thread).
    static func niceOfThisThread() -> Int32 {
        guard let text = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
              let fields = text.split(separator: ")").last?.split(separator: " "), fields.count > 17,
              let nice = Int32(fields[16]) else { return Int32.min }
        return nice
    }

    @Test func workRunsAtNice19AndTheThreadGetsItsPriorityBack() throws {
        let before = Self.niceOfThisThread()
        try #require(before != Int32.min, "no /proc/thread-self")
        let inside = BackgroundPriority.lowered { Self.niceOfThisThread() }
        #expect(inside == 19)
        if geteuid() == 0 {
            #expect(Self.niceOfThisThread() == before, "root may raise the priority again")
        }
    }

    @Test func theFeedsSaveRunsAtNice19OnAnotherThreadAndTheFeedNeverLeavesItsOwn() throws {
        let before = Self.niceOfThisThread()
        try #require(before != Int32.min, "no /proc/thread-self")
        let caller = try String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8).split(separator: " ").first.map(String.init)
        let (nice, thread) = BackgroundPriority.onALoweredThread { () -> (Int32, String?) in
            (Self.niceOfThisThread(),
             (try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8))?.split(separator: " ").first.map(String.init))
        }
        #expect(nice == 19)
        #expect(thread != nil && thread != caller, "not the caller's thread")
        // Never lowered, so never in need of a privilege to be raised again (a user's mount has none).
        #expect(Self.niceOfThisThread() == before)
    }
}
