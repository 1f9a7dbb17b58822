import DropboxClient
@testable import DropboxFS
import Foundation
import TestSupport
import Testing

/// Folders carry no time in Dropbox; each shows the newest mtime of the files below it, the same
/// on every mount of the same tree.
@Suite("Folder times")
struct FolderTimeTests {
    func file(_ modified: Int64, rev: String = "r1") -> FileDetails {
        FileDetails(size: 1, modified: modified, id: "id:\(modified)", rev: rev)
    }

    /// root / a / b / c, with one file in b.
    func chain(_ tree: inout Tree) -> (a: Slot, b: Slot, c: Slot) {
        let a = tree.upsert(parent: .root, name: "a", details: nil).0
        let b = tree.upsert(parent: a, name: "b", details: nil).0
        let c = tree.upsert(parent: b, name: "c", details: nil).0
        return (a, b, c)
    }

    @Test func aFolderShowsTheNewestFileBelowItAtAnyDepth() {
        var tree = Tree()
        let (a, b, c) = chain(&tree)
        tree.upsert(parent: b, name: "old.txt", details: file(100))
        tree.upsert(parent: c, name: "new.txt", details: file(300))
        tree.upsert(parent: a, name: "middle.txt", details: file(200))
        #expect(tree.folderTime(c) == 300)
        #expect(tree.folderTime(b) == 300)
        #expect(tree.folderTime(a) == 300)
        #expect(tree.folderTime(.root) == 300)
        // An older file elsewhere raises nothing.
        let d = tree.upsert(parent: .root, name: "d", details: nil).0
        tree.upsert(parent: d, name: "older.txt", details: file(50))
        #expect(tree.folderTime(d) == 50)
        #expect(tree.folderTime(.root) == 300)
        #expect(tree.settleFolderTimes().contains(d))
    }

    @Test func aFolderWithNoFileBelowTakesTheTimeOfTheNearestFolderAboveThatHasOne() {
        var tree = Tree()
        #expect(tree.folderTime(.root) == nil, "an empty tree leaves the time to the mount")
        let (a, b, c) = chain(&tree)
        #expect(tree.folderTime(c) == nil)
        tree.upsert(parent: a, name: "f.txt", details: file(400))
        #expect(tree.folderTime(c) == 400)
        #expect(tree.folderTime(b) == 400)
        tree.upsert(parent: c, name: "g.txt", details: file(10))
        #expect(tree.folderTime(c) == 10)
        #expect(tree.folderTime(b) == 10)
        #expect(tree.folderTime(a) == 400)
    }

    @Test func removingTheNewestFileBringsTheFoldersAboveBackOnceSettled() {
        var tree = Tree()
        let (a, b, c) = chain(&tree)
        tree.upsert(parent: b, name: "old.txt", details: file(100))
        let newest = tree.upsert(parent: c, name: "new.txt", details: file(300)).0
        _ = tree.settleFolderTimes()
        tree.remove(newest)
        let retimed = tree.settleFolderTimes()
        #expect(tree.folderTime(b) == 100)
        #expect(tree.folderTime(a) == 100)
        #expect(tree.folderTime(.root) == 100)
        #expect(tree.folderTime(c) == 100, "c, now empty, shows b's time")
        #expect(Set(retimed) == [.root, a, b, c])
        #expect(tree.settleFolderTimes().isEmpty, "each change is reported once")
    }

    @Test func removingAFolderOrAFileThatWasNotTheNewestChangesOnlyWhatItMust() {
        var tree = Tree()
        let (a, b, c) = chain(&tree)
        tree.upsert(parent: a, name: "newest.txt", details: file(500))
        tree.upsert(parent: c, name: "deep.txt", details: file(300))
        let other = tree.upsert(parent: b, name: "other.txt", details: file(200)).0
        _ = tree.settleFolderTimes()
        tree.remove(other)
        #expect(tree.settleFolderTimes().isEmpty)
        tree.remove(c)
        let retimed = tree.settleFolderTimes()
        #expect(retimed == [b], "b had only c's file; a keeps its own newer one")
        #expect(tree.folderTime(b) == 500, "now empty below, b shows a's time")
        #expect(tree.folderTime(a) == 500)
    }

    @Test func aFileGivenAnEarlierOrLaterTimeMovesTheFoldersAboveIt() {
        var tree = Tree()
        let (a, b, _) = chain(&tree)
        tree.upsert(parent: a, name: "x.txt", details: file(100))
        tree.upsert(parent: b, name: "y.txt", details: file(300, rev: "r1"))
        _ = tree.settleFolderTimes()
        tree.upsert(parent: b, name: "y.txt", details: file(50, rev: "r2"))
        #expect(Set(tree.settleFolderTimes()) == [.root, a, b])
        #expect(tree.folderTime(b) == 50)
        #expect(tree.folderTime(a) == 100)
        tree.upsert(parent: b, name: "y.txt", details: file(700, rev: "r3"))
        #expect(Set(tree.settleFolderTimes()) == [.root, a, b])
        #expect(tree.folderTime(.root) == 700)
    }

    @Test func manyRemovalsInOneBatchSettleEachFolderOnce() {
        var tree = Tree()
        let big = tree.upsert(parent: .root, name: "big", details: nil).0
        let files = (0..<1000).map { tree.upsert(parent: big, name: "f\($0)", details: file(Int64(1000 + $0))).0 }
        _ = tree.settleFolderTimes()
        for slot in files.reversed().prefix(999) { tree.remove(slot) }   // newest first: each was the newest
        #expect(Set(tree.settleFolderTimes()) == [.root, big])
        #expect(tree.folderTime(big) == 1000)
    }

    @Test func theSameTreeListedInAnotherOrderShowsTheSameTimes() {
        let entries: [(String, Int64)] = [("a/b/1", 10), ("a/2", 30), ("c/3", 20), ("a/b/d/4", 40), ("e/5", 5)]
        func build(_ order: [(String, Int64)]) -> Tree {
            var tree = Tree()
            for (path, time) in order {
                var folder = Slot.root
                let parts = path.split(separator: "/").map(String.init)
                for name in parts.dropLast() { folder = tree.upsert(parent: folder, name: name, details: nil).0 }
                tree.upsert(parent: folder, name: parts.last!, details: file(time))
            }
            _ = tree.settleFolderTimes()
            return tree
        }
        let one = build(entries)
        let other = build(entries.reversed())
        for path in ["", "a", "a/b", "a/b/d", "c", "e"] {
            let time = { (tree: Tree) in tree.folderTime(tree.slot(atPath: "/" + path, below: "")!) }
            #expect(time(one) == time(other), "\(path)")
        }
        #expect(one.folderTime(one.slot(atPath: "/a/b", below: "")!) == 40)
        #expect(one.folderTime(.root) == 40)
    }
}

/// Folder times through the core: what `stat` shows, and what the kernel is told to forget.
@Suite("Folder times through the change feed")
struct FolderTimeFeedTests {
    let dropbox = FakeDropbox(pageSize: 50)
    let clock = ManualClock()
    let invalidations = Recorder()

    func makeFS() -> DropboxFilesystem {
        var options = FilesystemOptions(metadataTTL: .seconds(60))
        options.listingConcurrency = 1
        let fs = DropboxFilesystem(api: dropbox, options: options, folderModified: 1_234, now: clock.now)
        fs.onInvalidation { [invalidations] batch in invalidations.withLock { $0.append(contentsOf: batch) } }
        return fs
    }

    func resolve(_ fs: DropboxFilesystem, _ path: String) throws -> NodeAttributes {
        var attributes = try fs.attributes(of: .root)
        for name in path.split(separator: "/") {
            attributes = try fs.lookup(parent: attributes.inode, name: String(name))
        }
        return attributes
    }

    @Test func foldersShowTheNewestFileBelowAndTheKernelForgetsTheOldTime() throws {
        dropbox.addFolder("/Photos")
        dropbox.addFolder("/Photos/2024")
        dropbox.addFolder("/Empty")
        dropbox.addFile("/Photos/2024/a.jpg", [1], modified: 1_700_000_000)
        dropbox.addFile("/Photos/b.jpg", [2], modified: 1_600_000_000)
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive })
        #expect(try resolve(fs, "Photos/2024").modified == 1_700_000_000)
        #expect(try resolve(fs, "Photos").modified == 1_700_000_000)
        #expect(try fs.attributes(of: .root).modified == 1_700_000_000)
        #expect(try resolve(fs, "Empty").modified == 1_700_000_000, "an empty folder shows its parent's time")
        let year = try resolve(fs, "Photos/2024").inode
        let photos = try resolve(fs, "Photos").inode
        invalidations.withLock { $0.removeAll() }

        dropbox.addFile("/Photos/2024/new.jpg", [3], modified: 1_800_000_000)
        #expect(eventually { (try? resolve(fs, "Photos").modified) == 1_800_000_000 })
        #expect(try fs.attributes(of: .root).modified == 1_800_000_000)
        let told = invalidations.withLock { $0 }
        #expect(told.contains(.inode(photos)), "the kernel forgets the time it cached for a folder above")
        #expect(told.contains(.inode(.root)))
        #expect(told.contains(.inode(year)))
        invalidations.withLock { $0.removeAll() }

        dropbox.remove("/Photos/2024/new.jpg")
        #expect(eventually { (try? resolve(fs, "Photos").modified) == 1_700_000_000 })
        #expect(try fs.attributes(of: .root).modified == 1_700_000_000)
        #expect(invalidations.withLock { $0 }.contains(.inode(.root)))
    }

    @Test func aTreeWithNoFileShowsTheMountTime() throws {
        dropbox.addFolder("/only")
        let fs = makeFS()
        #expect(try fs.attributes(of: .root).modified == 1_234)
        #expect(try resolve(fs, "only").modified == 1_234)
    }
}
