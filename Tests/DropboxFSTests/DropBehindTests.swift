import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

/// Dropping from the kernel's page cache what a long sequential read has passed (`DropBehind`).
@Suite("Drop-behind of a long stream's pages")
struct DropBehindTests {
    let dropbox = FakeDropbox()
    let clock = ManualClock()
    static let MiB = UInt64(1 << 20)

    /// The policy at a small scale: files of 8 MiB or more, 1 MiB kept at the head, 4 MiB behind
    /// the reader, dropped 2 MiB at a time.
    static var small: DropBehind {
        var policy = DropBehind()
        policy.largeFile = 8 * MiB
        policy.keepHead = 1 * MiB
        policy.keepBehind = 4 * MiB
        policy.step = 2 * MiB
        return policy
    }

    // MARK: - The policy

    @Test func aSmallFileKeepsEveryPage() {
        let policy = DropBehind()
        #expect(policy.due(fileSize: 511 * Self.MiB, runStart: 0, dropped: 0, furthest: 511 * Self.MiB, read: 511 * Self.MiB) == nil)
    }

    @Test func aLargeFileDropsWholeStepsFromItsHeadToWellBehindTheReader() {
        let policy = DropBehind()
        let size = 1024 * Self.MiB
        // Nothing until a whole step lies between the kept head and the 32 MiB behind the reader,
        // ending on a multiple of the step.
        #expect(policy.due(fileSize: size, runStart: 0, dropped: 0, furthest: 47 * Self.MiB, read: 47 * Self.MiB) == nil)
        #expect(policy.due(fileSize: size, runStart: 0, dropped: 0, furthest: 48 * Self.MiB, read: 48 * Self.MiB) == 4 * Self.MiB..<16 * Self.MiB)
        // What was dropped is not dropped again, and the next range waits for a whole step.
        #expect(policy.due(fileSize: size, runStart: 0, dropped: 16 * Self.MiB, furthest: 55 * Self.MiB, read: 55 * Self.MiB) == nil)
        #expect(policy.due(fileSize: size, runStart: 0, dropped: 16 * Self.MiB, furthest: 300 * Self.MiB, read: 300 * Self.MiB)
                == 16 * Self.MiB..<264 * Self.MiB)
    }

    @Test func aRunThatBeganPastTheHeadDropsOnlyWhatItRead() {
        let policy = DropBehind()
        // A reader that seeked to 600 MiB drops nothing before 600 MiB (another reader's pages,
        // or none), and nothing until 32 MiB and a step past where it began.
        let size = 2048 * Self.MiB
        #expect(policy.due(fileSize: size, runStart: 600 * Self.MiB, dropped: 600 * Self.MiB, furthest: 639 * Self.MiB, read: 39 * Self.MiB) == nil)
        #expect(policy.due(fileSize: size, runStart: 600 * Self.MiB, dropped: 600 * Self.MiB, furthest: 640 * Self.MiB, read: 40 * Self.MiB)
                == 600 * Self.MiB..<608 * Self.MiB)
    }

    @Test func aRunThatSkippedAheadRatherThanReadDropsNothing() {
        let policy = DropBehind()
        let size = 1024 * Self.MiB
        // Reads reached 48 MiB but added up to less than the 16 MiB that would be dropped.
        #expect(policy.due(fileSize: size, runStart: 0, dropped: 0, furthest: 48 * Self.MiB, read: 16 * Self.MiB - 1) == nil)
        #expect(policy.due(fileSize: size, runStart: 0, dropped: 0, furthest: 48 * Self.MiB, read: 16 * Self.MiB)
                == 4 * Self.MiB..<16 * Self.MiB)
    }

    // MARK: - Through the filesystem

    func makeFS(dropBehind: DropBehind?) -> DropboxFilesystem {
        var options = FilesystemOptions(metadataTTL: .seconds(60))
        options.readAhead.dropBehind = dropBehind
        return DropboxFilesystem(api: dropbox, options: options, folderModified: 0, now: clock.now)
    }

    func readSequentially(_ fs: DropboxFilesystem, _ handle: FileHandleID, size: Int, chunk: Int = 128 << 10) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(size)
        while out.count < size {
            let bytes = try fs.read(handle, offset: UInt64(out.count), size: chunk)
            if bytes.isEmpty { break }
            out += bytes
        }
        return out
    }

    /// Reads `name` whole through `fs` (with `alsoOpen` more handles of it open meanwhile) and
    /// returns what was read and the ranges the kernel was told to drop.
    func streamAndCollectDrops(_ fs: DropboxFilesystem, _ name: String, size: Int, alsoOpen: Int = 0)
        throws -> (bytes: [UInt8], drops: [Range<UInt64>], inode: InodeNumber) {
        let drops = Mutex<[KernelInvalidation]>([])
        fs.onInvalidation { batch in drops.withLock { $0 += batch } }
        let inode = try fs.lookup(parent: .root, name: name).inode
        let others = try (0..<alsoOpen).map { _ in try fs.open(inode).handle }
        let handle = try fs.open(inode).handle
        let bytes = try readSequentially(fs, handle, size: size)
        fs.release(handle)
        for other in others { fs.release(other) }
        let ranges = drops.withLock { all in
            all.compactMap { invalidation -> Range<UInt64>? in
                guard case .pages(let dropped, let range) = invalidation, dropped == inode else { return nil }
                return range
            }
        }
        return (bytes, ranges, inode)
    }

    @Test func aStreamedLargeFileDropsItsPassedPagesInOrderAndOnce() throws {
        let content = ReadEngineTests.content(24 << 20)
        dropbox.addFile("/movie.bin", content)
        let fs = makeFS(dropBehind: Self.small)
        let (bytes, drops, _) = try streamAndCollectDrops(fs, "movie.bin", size: content.count)
        #expect(bytes == content)
        #expect(drops.first?.lowerBound == Self.MiB, "the first 1 MiB stays: \(drops)")
        for (before, after) in zip(drops, drops.dropFirst()) {
            #expect(before.upperBound == after.lowerBound, "contiguous, each page once: \(drops)")
        }
        // The reader reached 24 MiB: everything up to 4 MiB behind it, in whole 2 MiB steps.
        #expect(drops.last?.upperBound == 20 * Self.MiB, "\(drops)")
        #expect(drops.allSatisfy { $0.lowerBound % 4096 == 0 && $0.upperBound % (2 * Self.MiB) == 0 })
        #expect(dropbox.downloadedBytes == UInt64(content.count), "dropping pages downloads nothing")
    }

    @Test func nothingIsDroppedWhileAnotherHandleHasTheFileOpen() throws {
        let content = ReadEngineTests.content(24 << 20)
        dropbox.addFile("/movie.bin", content)
        let fs = makeFS(dropBehind: Self.small)
        let (bytes, drops, _) = try streamAndCollectDrops(fs, "movie.bin", size: content.count, alsoOpen: 1)
        #expect(bytes == content)
        #expect(drops.isEmpty, "another reader may still need these pages: \(drops)")
    }

    @Test func smallFilesAndAMountThatKeepsItsPagesDropNothing() throws {
        let small = ReadEngineTests.content(7 << 20)
        let large = ReadEngineTests.content(24 << 20)
        dropbox.addFile("/small.bin", small)
        dropbox.addFile("/large.bin", large)
        let dropping = makeFS(dropBehind: Self.small)
        let (smallBytes, smallDrops, _) = try streamAndCollectDrops(dropping, "small.bin", size: small.count)
        #expect(smallBytes == small)
        #expect(smallDrops.isEmpty, "a file under largeFile keeps every page: \(smallDrops)")
        let keeping = makeFS(dropBehind: nil)     // --keep-page-cache, --direct-io
        let (largeBytes, largeDrops, _) = try streamAndCollectDrops(keeping, "large.bin", size: large.count)
        #expect(largeBytes == large)
        #expect(largeDrops.isEmpty, "\(largeDrops)")
    }

    @Test func aHandleThatBypassesThePageCacheDropsNothing() throws {
        // The file grew after the kernel was told its size: the handle opens with direct_io
        // (`kernelSizeMayBeStale`), so none of its bytes are in the page cache to drop.
        dropbox.addFile("/grown.bin", [1])
        let fs = makeFS(dropBehind: Self.small)
        let inode = try fs.lookup(parent: .root, name: "grown.bin").inode
        let content = ReadEngineTests.content(24 << 20)
        dropbox.addFile("/grown.bin", content)
        clock.advance(by: 61)
        let drops = Mutex<[KernelInvalidation]>([])
        fs.onInvalidation { batch in drops.withLock { $0 += batch } }
        let opened = try fs.open(inode)
        #expect(opened.kernelSizeMayBeStale)
        #expect(try readSequentially(fs, opened.handle, size: content.count) == content)
        fs.release(opened.handle)
        #expect(!drops.withLock { $0 }.contains { if case .pages = $0 { true } else { false } })
    }

    /// The size of the file `invalidationsWhileReading` reads: 24 MiB.
    static let readFileSize = 24 << 20

    /// Reads 4 KiB at each of `offsets` of a `readFileSize` file, in that order and through one
    /// handle, and returns what the kernel was told to invalidate meanwhile.
    func invalidationsWhileReading(at offsets: [Int]) throws -> [KernelInvalidation] {
        let content = ReadEngineTests.content(Self.readFileSize)
        dropbox.addFile("/db.bin", content)
        let fs = makeFS(dropBehind: Self.small)
        let drops = Mutex<[KernelInvalidation]>([])
        fs.onInvalidation { batch in drops.withLock { $0 += batch } }
        let handle = try fs.open(try fs.lookup(parent: .root, name: "db.bin").inode).handle
        for offset in offsets {
            #expect(try fs.read(handle, offset: UInt64(offset), size: 4096) == Array(content[offset..<offset + 4096]))
        }
        fs.release(handle)
        return drops.withLock { $0 }
    }

    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func randomReadsDropNothing(seed: UInt64) throws {
        // In a 24 MiB file most random reads land within the stream's reach (16 MiB) of the one
        // before, so they carry its furthest read forward as a stream's would.
        var rng = SeededGenerator(seed: seed)
        let offsets = (0..<200).map { _ in Int.random(in: 0..<(Self.readFileSize - 4096), using: &rng) / 4096 * 4096 }
        let drops = try invalidationsWhileReading(at: offsets)
        #expect(drops.isEmpty, "\(drops)")
    }

    @Test func readsThatSkipAheadWithinTheStreamsReachDropNothing() throws {
        // A reader that reads 4 KiB every 3 MiB stays in the stream and reaches the end, but has
        // passed over the pages rather than read them: none are its to drop.
        let drops = try invalidationsWhileReading(at: Array(stride(from: 0, to: Self.readFileSize, by: 3 << 20)))
        #expect(drops.isEmpty, "\(drops)")
    }
}
