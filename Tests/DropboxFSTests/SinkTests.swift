@testable import DropboxFS
import Synchronization
import TestSupport
import Testing

/// The mount's callbacks (`Sinks` in DropboxFilesystem.swift) are called at the same depth however
/// often they were called before. Kept as a lock's generic argument, each call wrapped the stored
/// closure in two more thunks: the 10,000th invalidation ran 20,000 frames deep, and a mount that
/// streamed a few TiB would have overflowed the stack of the thread that dropped its pages.
@Suite("The mount's callbacks")
struct SinkTests {
    static let calls = 2_000

    /// Where `body` finds the stack when called from the sink: the address of one of its locals.
    @inline(never)
    static func stackDepth() -> Int {
        var local = 0
        return withUnsafeMutablePointer(to: &local) { Int(bitPattern: $0) }
    }

    func makeFS() -> DropboxFilesystem {
        DropboxFilesystem(api: FakeDropbox(), options: FilesystemOptions(metadataTTL: .seconds(60)),
                          folderModified: 0, now: ManualClock().now)
    }

    /// The stack address a sink saw on its first and its last call, `calls` calls apart, all made
    /// by `call` from this one frame.
    static func depths(of call: () -> Void, recordedBy depths: borrowing Mutex<[Int]>) -> (first: Int, last: Int) {
        for _ in 0..<calls { call() }
        let seen = depths.withLock { $0 }
        return (seen.first ?? 0, seen.last ?? 0)
    }

    @Test func invalidationsReachTheMountAtTheSameDepthEveryTime() {
        let fs = makeFS()
        let depths = Mutex<[Int]>([])
        let delivered = Mutex(0)
        fs.onInvalidation { batch in
            delivered.withLock { $0 += batch.count }
            depths.withLock { $0.append(Self.stackDepth()) }
        }
        let (first, last) = Self.depths(of: { fs.invalidate([.pages(InodeNumber(7), 0..<(8 << 20))]) },
                                        recordedBy: depths)
        #expect(delivered.withLock { $0 } == Self.calls, "every batch was delivered")
        // Before: 64 bytes of thunks per earlier call in a debug build, 125 KiB here.
        #expect(abs(first - last) < 1024, "call \(Self.calls) ran \(first - last) bytes deeper than the first")
    }

    @Test func bulkWorkNoticesReachTheMountAtTheSameDepthEveryTime() {
        let fs = makeFS()
        let depths = Mutex<[Int]>([])
        fs.onBulkWorkDone { depths.withLock { $0.append(Self.stackDepth()) } }
        let (first, last) = Self.depths(of: { fs.bulkWorkDone() }, recordedBy: depths)
        #expect(depths.withLock { $0.count } == Self.calls)
        #expect(abs(first - last) < 1024, "call \(Self.calls) ran \(first - last) bytes deeper than the first")
    }
}
