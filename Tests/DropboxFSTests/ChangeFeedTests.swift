import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

/// Collects what the core asks the kernel to forget.
final class Recorder: Sendable {
    private let items = Mutex<[KernelInvalidation]>([])
    func withLock<T>(_ body: (inout [KernelInvalidation]) -> T) -> T { items.withLock { body(&$0) } }
}

/// Counts calls from any thread.
final class CallCount: Sendable {
    private let calls = Mutex(0)
    /// Counts one more call; its number, from 1.
    func next() -> Int { calls.withLock { $0 += 1; return $0 } }
    var count: Int { calls.withLock { $0 } }
}

/// The metadata engine (issue 5): one recursive listing, then a change feed applied in place.
@Suite("Recursive fill and change feed")
struct ChangeFeedTests {
    let dropbox = FakeDropbox(pageSize: 50)
    let clock = ManualClock()
    let invalidations = Recorder()

    /// The feed's semantics with the first listing as one recursive chain (`listingConcurrency`
    /// 1), so call counts are those of one cursor; ParallelFillTests covers the split listing.
    func makeFS(_ options: FilesystemOptions = FilesystemOptions(metadataTTL: .seconds(60)),
                store: (any MetadataStore)? = nil, api: FakeDropbox? = nil) -> DropboxFilesystem {
        var options = options
        options.listingConcurrency = 1
        let fs = DropboxFilesystem(api: api ?? dropbox, options: options, folderModified: 0, now: clock.now, store: store)
        fs.onInvalidation { [invalidations] batch in invalidations.withLock { $0.append(contentsOf: batch) } }
        return fs
    }

    func startLive(_ fs: DropboxFilesystem) throws {
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive }, "the fill finishes and the feed goes live")
    }

    func resolve(_ fs: DropboxFilesystem, _ path: String) throws -> NodeAttributes {
        var attributes = try fs.attributes(of: .root)
        for name in path.split(separator: "/") {
            attributes = try fs.lookup(parent: attributes.inode, name: String(name))
        }
        return attributes
    }

    func names(_ fs: DropboxFilesystem, _ folder: InodeNumber) throws -> [String] {
        let handle = try fs.openDirectory(folder)
        defer { fs.releaseDirectory(handle) }
        return try fs.readDirectory(handle, from: 2).map(\.name)
    }

    func seedTree() {
        for f in 0..<20 {
            dropbox.addFolder("/F\(f)")
            for i in 0..<10 { dropbox.addFile("/F\(f)/file\(i).txt", Array("\(f)-\(i)".utf8)) }
        }
        dropbox.addFolder("/F0/deep")
        dropbox.addFile("/F0/deep/leaf.txt", [1, 2, 3])
    }

    @Test func oneRecursiveListingAnswersEveryFolderWithoutFurtherCalls() throws {
        seedTree()
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let total = 20 + 200 + 2
        #expect(dropbox.counters.recursiveListFolder == 1)
        #expect(dropbox.counters.listContinue <= Int((Double(total) / 50).rounded(.up)))
        let before = dropbox.counters
        for f in 0..<20 { #expect(try names(fs, try resolve(fs, "F\(f)").inode).count == (f == 0 ? 11 : 10)) }
        #expect(try resolve(fs, "F0/deep/leaf.txt").size == 3)
        #expect(throws: FSError.notFound) { try resolve(fs, "F3/missing.txt") }
        clock.advance(by: 3600)   // far past the TTL: a live feed keeps folders fresh
        #expect(try resolve(fs, "F7/file3.txt").size == 3)
        #expect(dropbox.counters.listFolder == before.listFolder, "no per-folder listing once the tree is filled")
        #expect(dropbox.counters.metadata == 0)
        #expect(try fs.attributes(of: try resolve(fs, "F1").inode).linkCount == 2)
        #expect(try fs.attributes(of: .root).linkCount == 22)
    }

    @Test func aFolderOpenedDuringTheFillIsListedOnItsOwnAtOnce() throws {
        let release = DispatchSemaphore(value: 0)
        let gated = FakeDropbox(pageSize: 50, recursiveGate: { release.wait() })
        gated.addFolder("/Photos")
        gated.addFile("/Photos/cat.jpg", [1, 2])
        let fs = makeFS(api: gated)
        defer { fs.stopChangeFeed(); release.signal() }
        fs.startChangeFeed()
        // The recursive listing is held; the user's folder is listed on its own.
        #expect(try names(fs, try resolve(fs, "Photos").inode) == ["cat.jpg"])
        #expect(gated.counters.listFolder == 2, "the root and /Photos, each once")
        #expect(!fs.isFeedLive)
        release.signal()
        #expect(eventually { fs.isFeedLive })
        #expect(try names(fs, try resolve(fs, "Photos").inode) == ["cat.jpg"])
        #expect(gated.counters.listFolder == 2)
    }

    @Test func changesAreAppliedInPlaceAndTheKernelIsTold() throws {
        seedTree()
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let folder = try resolve(fs, "F2")
        let old = try resolve(fs, "F2/file1.txt")
        let deleted = try resolve(fs, "F2/file2.txt")
        invalidations.withLock { $0.removeAll() }

        dropbox.addFile("/F2/new.txt", Array("fresh".utf8))
        dropbox.addFile("/F2/file1.txt", Array("rewritten!".utf8))
        dropbox.remove("/F2/file2.txt")
        #expect(eventually { (try? resolve(fs, "F2/new.txt").size) == 5 })
        #expect(eventually { (try? resolve(fs, "F2/file1.txt").size) == 10 })
        #expect(eventually { (try? resolve(fs, "F2/file2.txt")) == nil })
        #expect(try resolve(fs, "F2/file1.txt").inode == old.inode, "a rewrite keeps the inode")
        let opened = try fs.open(old.inode)
        #expect(try fs.read(opened.handle, offset: 0, size: 100) == Array("rewritten!".utf8))
        let told = invalidations.withLock { $0 }
        #expect(told.contains(.entry(parent: folder.inode, name: "new.txt")))
        #expect(told.contains(.inode(old.inode)))
        #expect(told.contains(.removed(parent: folder.inode, name: "file2.txt", node: deleted.inode)),
                "a deleted file's node is told gone, so one still open shows no link")
        #expect(told.contains(.inode(folder.inode)))
        #expect(dropbox.counters.listFolder == 0)
    }

    @Test func aFileReplacesAFolderAndAFolderReplacesAFile() throws {
        dropbox.addFolder("/x")
        dropbox.addFile("/x/inner.txt", [1])
        dropbox.addFile("/y", [2])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let oldFolder = try resolve(fs, "x").inode
        // Dropbox sends only the new entry: a file at a folder's path replaces the subtree.
        dropbox.journal([
            .file(FileMetadata(name: "x", id: "id:x2", pathLower: "/x", pathDisplay: "/x", clientModified: 5,
                               serverModified: 5, rev: "aaaaaaaaa1", size: 7)),
            .folder(FolderMetadata(name: "y", id: "id:y2", pathLower: "/y", pathDisplay: "/y")),
            .file(FileMetadata(name: "z.txt", id: "id:z", pathLower: "/y/z.txt", pathDisplay: "/y/z.txt",
                               clientModified: 5, serverModified: 5, rev: "aaaaaaaaa2", size: 3)),
        ])
        #expect(eventually { (try? resolve(fs, "x").kind) == .file })
        let x = try resolve(fs, "x")
        #expect(x.size == 7 && x.inode != oldFolder)
        #expect(throws: FSError.self) { try resolve(fs, "x/inner.txt") }
        #expect(eventually { (try? resolve(fs, "y/z.txt").size) == 3 })
        #expect(try resolve(fs, "y").kind == .directory)
    }

    @Test func aNewRevOfAnOpenFileIsANewNodeAndTheOpenHandleReadsOnAtItsRev() throws {
        // As a file replaced on a local disk (a sync, an editor's save by rename): a handle open on
        // it reads on what it opened, new opens read the new bytes, and the kernel's page cache,
        // which is per node, never holds both.
        let first = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) }
        let second = Array(repeating: UInt8(9), count: 2 << 20)
        dropbox.addFile("/movie.mp4", first)
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let before = try resolve(fs, "movie.mp4")
        let old = try fs.open(before.inode).handle
        #expect(try fs.read(old, offset: 0, size: 4096) == Array(first[0..<4096]))
        invalidations.withLock { $0.removeAll() }
        dropbox.addFile("/movie.mp4", second)
        #expect(eventually { (try? resolve(fs, "movie.mp4").size) == UInt64(second.count) })
        let after = try resolve(fs, "movie.mp4")
        #expect(after.inode != before.inode, "a node of its own")
        #expect(after.serialNumber != before.serialNumber, "another inode number, as a file replaced by a rename")
        #expect(invalidations.withLock { $0 }.contains(.removed(parent: .root, name: "movie.mp4", node: before.inode)),
                "the kernel's entry, which leads to the old node, goes, and the old node shows no link")
        let far = first.count - 4096
        #expect(try fs.read(old, offset: UInt64(far), size: 4096) == Array(first[far...]), "the handle reads on at its rev")
        // The kernel may still have the old entry for a moment: opening the old node says ESTALE,
        // and the kernel looks the name up again.
        #expect(throws: FSError.nodeGone) { try fs.open(before.inode) }
        // fstat on the open handle: the old file, its number, no link, as a file replaced by a
        // rename on a disk; the kernel is told to forget what it showed before.
        let leftBehind = try fs.attributes(of: before.inode)
        #expect(leftBehind.size == UInt64(first.count) && leftBehind.linkCount == 0)
        #expect(leftBehind.serialNumber == before.serialNumber)
        #expect(invalidations.withLock { $0 }.contains(.attributes(before.inode)))
        #expect(!invalidations.withLock { $0 }.contains(.inode(before.inode)), "its pages stay for its handle")
        let new = try fs.open(after.inode)
        #expect(new.contentUnchanged == false)
        #expect(try fs.read(new.handle, offset: 0, size: 16) == Array(second[0..<16]))
        fs.release(old)
        fs.release(new.handle)
        #expect(throws: FSError.nodeGone, "no handle has the old node open now") { try fs.attributes(of: before.inode) }
        // Nothing open: the next rev changes the node in place, and its pages go.
        invalidations.withLock { $0.removeAll() }
        dropbox.addFile("/movie.mp4", first)
        #expect(eventually { (try? resolve(fs, "movie.mp4").size) == UInt64(first.count) })
        #expect(try resolve(fs, "movie.mp4").inode == after.inode)
        #expect(try resolve(fs, "movie.mp4").serialNumber == after.serialNumber, "its number stays while mounted")
        #expect(invalidations.withLock { $0 }.contains(.inode(after.inode)))
        #expect(try fs.open(after.inode).contentUnchanged == false)
    }

    @Test func aFolderDeletedWhileOpenIsToldGoneAndItsHandleShowsItWithNoLink() throws {
        // As `rmdir` of a folder a program has open on a disk: the kernel is told the node is
        // gone (it then shows it with no link, and lists nothing in it), and `fstat` of the
        // handle, which reaches the mount once the kernel's attributes are forgotten, answers what
        // the folder showed at open, with no link.
        seedTree()
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let folder = try resolve(fs, "F3")
        let handle = try fs.openDirectory(folder.inode)
        invalidations.withLock { $0.removeAll() }
        dropbox.remove("/F3")
        #expect(eventually { (try? resolve(fs, "F3")) == nil })
        #expect(eventually { invalidations.withLock { $0 }.contains(.removed(parent: .root, name: "F3", node: folder.inode)) })
        let leftBehind = try fs.attributes(of: folder.inode)
        #expect(leftBehind.kind == .directory && leftBehind.linkCount == 0)
        #expect(leftBehind.serialNumber == folder.serialNumber)
        fs.releaseDirectory(handle)
        #expect(throws: FSError.nodeGone, "no handle has it open now") { try fs.attributes(of: folder.inode) }
    }

    @Test func anExportDeletedWhileOpenReadsOnAndItsHandleShowsItWithNoLink() throws {
        dropbox.addFile("/Plan.paper", Array("<h1>plan</h1>".utf8), downloadable: false)
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let export = try resolve(fs, "Plan.html")
        let handle = try fs.open(export.inode).handle
        defer { fs.release(handle) }
        dropbox.remove("/Plan.paper")
        #expect(eventually { (try? resolve(fs, "Plan.html")) == nil })
        let leftBehind = try fs.attributes(of: export.inode)
        #expect(leftBehind.size == 22 && leftBehind.linkCount == 0, "what it showed at open, where it said ESTALE")
        #expect(try fs.read(handle, offset: 0, size: 100) == Array("exported:<h1>plan</h1>".utf8), "its own bytes")
    }

    @Test func aRenameThatOnlyChangesCaseKeepsTheInode() throws {
        dropbox.addFile("/Notes.txt", [1])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let before = try resolve(fs, "Notes.txt").inode
        invalidations.withLock { $0.removeAll() }
        dropbox.journal([.file(FileMetadata(name: "NOTES.txt", id: "id:/notes.txt", pathLower: "/notes.txt",
                                            pathDisplay: "/NOTES.txt", clientModified: 0, serverModified: 0,
                                            rev: "aaaaaaaaa9", size: 1))])
        #expect(eventually { (try? resolve(fs, "NOTES.txt")) != nil })
        #expect(try resolve(fs, "NOTES.txt").inode == before)
        #expect(throws: FSError.notFound) { try resolve(fs, "Notes.txt") }
        #expect(try names(fs, .root) == ["NOTES.txt"])
        #expect(invalidations.withLock { $0 }.contains(.entry(parent: .root, name: "Notes.txt")))
        #expect(invalidations.withLock { $0 }.contains(.entry(parent: .root, name: "NOTES.txt")),
                "a \"no such name\" the kernel holds for the new spelling goes too")
    }

    @Test func aDeletedDocumentRemovesItsExport() throws {
        dropbox.addFile("/Plan.paper", [1], downloadable: false)
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        #expect(try resolve(fs, "Plan.html").size == 1)
        dropbox.remove("/Plan.paper")
        #expect(eventually { (try? resolve(fs, "Plan.html")) == nil })
    }

    @Test func aDeleteUnderAPathNeverListedChangesNothing() throws {
        dropbox.addFile("/a.txt", [1])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        dropbox.journal([.deleted(DeletedMetadata(name: "x", pathLower: "/never/listed/x", pathDisplay: "/never/listed/x"))])
        dropbox.addFile("/b.txt", [2])   // a marker that the delete was processed before it
        #expect(eventually { (try? resolve(fs, "b.txt")) != nil })
        #expect(try names(fs, .root).sorted() == ["a.txt", "b.txt"])
        #expect(fs.cacheFootprint.entries == 3, "the root and two files; no folders were created for the delete")
    }

    @Test func resetListsAgainAndDropsWhatVanished() throws {
        dropbox.addFile("/keep.txt", [1])
        dropbox.addFolder("/gone")
        dropbox.addFile("/gone/inside.txt", [2])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let keep = try resolve(fs, "keep.txt").inode
        _ = try resolve(fs, "gone/inside.txt")
        dropbox.silentlyRemove("/gone")
        let held = DispatchSemaphore(value: 0)
        dropbox.setGates(listing: nil, recursive: { held.wait() })
        dropbox.resetCursors()
        #expect(eventually { !fs.isFeedLive }, "not live while the mounted folder is listed again")
        held.signal(); held.signal(); held.signal(); held.signal()
        dropbox.setGates(listing: nil, recursive: nil)
        #expect(eventually { dropbox.counters.recursiveListFolder == 2 }, "reset starts a fresh recursive listing")
        #expect(eventually { (try? resolve(fs, "gone")) == nil })
        #expect(try resolve(fs, "keep.txt").inode == keep, "what survives keeps its inode")
        #expect(eventually { fs.isFeedLive })
        // Sent once the tree's lock is let go: maybe just after the feed went live.
        #expect(eventually { invalidations.withLock { $0 }.containsRemoval(of: "gone", in: .root) })
    }

    @Test func aMountedFolderThatContinueCannotFindIsShownEmptyUntilItIsBack() throws {
        dropbox.addFolder("/Photos")
        dropbox.addFile("/Photos/a.jpg", [1])
        let fs = makeFS(FilesystemOptions(rootPath: "/Photos", metadataTTL: .seconds(60)))
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        #expect(try names(fs, .root) == ["a.jpg"])
        // Deleted or moved away: Dropbox answers the folder's cursor with path/not_found.
        dropbox.silentlyRemove("/Photos")
        dropbox.fail(with: .route(tags: ["path", "not_found"], summary: "path/not_found/"))
        #expect(eventually { (try? names(fs, .root)) == [] }, "not its old tree for good")
        #expect(eventually { invalidations.withLock { $0 }.containsRemoval(of: "a.jpg", in: .root) })
        #expect(!fs.isFeedLive)
        dropbox.fail(with: nil)
        dropbox.addFolder("/Photos")
        dropbox.addFile("/Photos/b.jpg", [2])
        #expect(eventually(within: 10) { (try? names(fs, .root)) == ["b.jpg"] }, "listed afresh once it is back")
        #expect(eventually { fs.isFeedLive })
    }

    @Test func aDeletedEntryForTheMountedFolderTakesItsContents() throws {
        dropbox.addFolder("/Photos")
        dropbox.addFolder("/Photos/Album")
        dropbox.addFile("/Photos/Album/a.jpg", [1])
        let fs = makeFS(FilesystemOptions(rootPath: "/Photos", metadataTTL: .seconds(60)))
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        _ = try resolve(fs, "Album/a.jpg")
        dropbox.journal([.deleted(DeletedMetadata(name: "Photos", pathLower: "/photos", pathDisplay: "/Photos"))])
        #expect(eventually { (try? names(fs, .root)) == [] })
        #expect(eventually { invalidations.withLock { $0 }.containsRemoval(of: "Album", in: .root) })
    }

    @Test func aFolderListedAgainKeepsAChangeTheFeedAppliedWhileItWasListed() throws {
        // A listing shows the folder at some moment while it runs. The feed may apply a change
        // made after that moment before the listing returns; replacing the folder's children
        // with the listing then brought back a deleted file for good (the feed does not send the
        // deletion twice). The listing is made again instead.
        dropbox.addFolder("/F")
        dropbox.addFile("/F/a.txt", [1])
        dropbox.addFile("/F/b.txt", [2])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let folder = try resolve(fs, "F")
        // What Dropbox answers a listing taken before b.txt is deleted.
        dropbox.injectListing("/F", try dropbox.listFolder(path: "/F", recursive: false, limit: nil).entries)
        clock.advance(by: 1)
        fs.dropCaches()   // SIGHUP: folders are listed again when next used
        let calls = CallCount()
        dropbox.setPathGate { [dropbox, invalidations] path, recursive in
            guard !recursive, path.lowercased() == "/f" else { return }
            if calls.next() == 1 {
                // While this listing is on its way back, b.txt is deleted and the feed applies it.
                dropbox.remove("/F/b.txt")
                _ = eventually { invalidations.withLock { $0 }.containsRemoval(of: "b.txt", in: folder.inode) }
            } else {
                dropbox.injectListing("/F", nil)
            }
        }
        #expect(try names(fs, folder.inode) == ["a.txt"])
        #expect(calls.count == 2, "the listing the feed overtook was made again")
        #expect(throws: FSError.notFound) { try resolve(fs, "F/b.txt") }
    }

    @Test func whileTheFeedIsDownTTLRulesApply() throws {
        dropbox.addFile("/a.txt", [1])
        let fs = makeFS(FilesystemOptions(metadataTTL: .seconds(10)))
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        dropbox.fail(with: .transport(code: 7, message: "connection refused"))
        #expect(eventually { !fs.isFeedLive })
        #expect(fs.kernelCacheSeconds == 1)
        let attempts = dropbox.counters.listFolder
        clock.advance(by: 5)
        #expect(try resolve(fs, "a.txt").size == 1, "within the TTL the tree answers without asking")
        #expect(dropbox.counters.listFolder == attempts)
        clock.advance(by: 10)
        // Past the TTL the folder is listed again; with Dropbox unreachable, its last answer stands
        // (issue 8: cached folders still list while the server is down).
        #expect(try resolve(fs, "a.txt").size == 1)
        dropbox.fail(with: nil)
        #expect(eventually { fs.isFeedLive })
        #expect(try resolve(fs, "a.txt").size == 1)
    }

    @Test func aRemountLoadsTheSavedTreeAndCatchesUpWithContinueOnly() throws {
        seedTree()
        let store = InMemoryStore()
        let first = makeFS(store: store)
        try startLive(first)
        first.stopChangeFeed()
        first.persist()
        // The sync thread saves once the fill is done; if it was saving as the feed stopped, this
        // persist() found nothing unsaved, and that save is still being written.
        #expect(eventually { store.load()?.entries.count == 222 })

        dropbox.addFile("/F5/added-while-unmounted.txt", [9, 9])
        let before = dropbox.counters
        let second = makeFS(store: store)
        defer { second.stopChangeFeed() }
        second.startChangeFeed()
        #expect(try resolve(second, "F5/added-while-unmounted.txt").size == 2)
        #expect(try names(second, try resolve(second, "F9").inode).count == 10)
        #expect(dropbox.counters.listFolder == before.listFolder, "no folder listing")
        #expect(dropbox.counters.recursiveListFolder == before.recursiveListFolder, "no full listing")
        #expect(dropbox.counters.listContinue > before.listContinue, "caught up with continue")
    }

    @Test func aFolderReadFromTheStartShowsChangesMadeSinceItWasOpened() throws {
        // The kernel caches what a read from offset 0 returns until an invalidation; a change that
        // landed (and was invalidated) between opendir and that read must be in it.
        dropbox.addFile("/a.txt", [1])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let handle = try fs.openDirectory(.root)
        defer { fs.releaseDirectory(handle) }
        dropbox.addFile("/b.txt", [2])
        #expect(eventually { (try? resolve(fs, "b.txt")) != nil })
        let listed = try fs.readDirectory(handle, from: 2)
        #expect(listed.map(\.name) == ["a.txt", "b.txt"])
        // Read on from where it was, the snapshot holds; from the start again (rewinddir), it is
        // taken anew.
        dropbox.addFile("/c.txt", [3])
        #expect(eventually { (try? resolve(fs, "c.txt")) != nil })
        #expect(try fs.readDirectory(handle, from: listed[0].offset).map(\.name) == ["b.txt"])
        #expect(try fs.readDirectory(handle, from: 0).map(\.name) == [".", "..", "a.txt", "b.txt", "c.txt"])
    }

    /// A live mount of twenty files, f00 to f19, in the root.
    func liveWithTwentyFiles() throws -> (DropboxFilesystem, [String]) {
        let names = (0..<20).map { String(format: "f%02d", $0) }
        for name in names { dropbox.addFile("/" + name, [1]) }
        let fs = makeFS()
        try startLive(fs)
        return (fs, names)
    }

    @Test func aListingGoneOnFromAnotherSnapshotMissesNothingThatWasThereAllAlong() throws {
        // The kernel answers a second `ls` from its cached listing, with our offsets; dropped for a
        // change, it asks this handle to go on from where it was, and this handle has no snapshot.
        let (fs, names) = try liveWithTwentyFiles()
        defer { fs.stopChangeFeed() }
        let first = try fs.openDirectory(.root)
        let cached = try fs.readDirectory(first, from: 0)
        fs.releaseDirectory(first)
        let second = try fs.openDirectory(.root)
        defer { fs.releaseDirectory(second) }
        for name in names.prefix(6) { dropbox.remove("/" + name) }
        #expect(eventually { (try? resolve(fs, "f05")) == nil })
        let goneOnFrom = try #require(cached.first { $0.name == "f09" }).offset
        #expect(try fs.readDirectory(second, from: goneOnFrom).map(\.name) == Array(names[10...]))
    }

    @Test func entriesRemovedSinceTheSnapshotDoNotEndTheListing() throws {
        // A reply with no entry is the folder's end to the kernel: a batch whose entries were all
        // removed must still bring the live ones after them.
        let (fs, names) = try liveWithTwentyFiles()
        defer { fs.stopChangeFeed() }
        let handle = try fs.openDirectory(.root)
        defer { fs.releaseDirectory(handle) }
        let dots = try fs.readDirectory(handle, from: 0, limit: 2)
        #expect(dots.map(\.name) == [".", ".."])
        for name in names.prefix(10) { dropbox.remove("/" + name) }
        #expect(eventually { (try? resolve(fs, "f09")) == nil })
        #expect(try fs.readDirectory(handle, from: dots[1].offset, limit: 5).map(\.name) == Array(names[10..<15]))
    }

    @Test func aDeletedDocumentTakesItsExportAwayWhateverItsFormatAlsoAfterARemount() throws {
        // A deleted entry names the document ("Budget.gdoc"), never the export the mount shows.
        dropbox.addFile("/Budget.gsheet", [1], downloadable: false, exportAs: "xlsx")
        dropbox.addFile("/Budget.gdoc", [2], downloadable: false, exportAs: "docx")
        dropbox.addFile("/Notes.paper", [3], downloadable: false, exportAs: "markdown")
        dropbox.addFile("/Notes.html", [4])
        let store = InMemoryStore()
        let first = makeFS(store: store)
        try startLive(first)
        #expect(try names(first, .root).sorted() == ["Budget.docx", "Budget.xlsx", "Notes.html", "Notes.md"])
        dropbox.remove("/Budget.gdoc")
        #expect(eventually { (try? names(first, .root).sorted()) == ["Budget.xlsx", "Notes.html", "Notes.md"] })
        first.stopChangeFeed()
        first.persist()
        #expect(eventually { store.load()?.entries.count == 3 })

        // From the saved tree, which keeps each export's document name.
        dropbox.remove("/Budget.gsheet")
        let second = makeFS(store: store)
        defer { second.stopChangeFeed() }
        second.startChangeFeed()
        #expect(eventually { (try? names(second, .root).sorted()) == ["Notes.html", "Notes.md"] })
        dropbox.remove("/Notes.paper")
        #expect(eventually { (try? names(second, .root).sorted()) == ["Notes.html"] })
        #expect(dropbox.counters.recursiveListFolder == 1, "the second mount caught up with continue only")
    }

    @Test func everyMountShowsAFileOrFolderUnderTheSameInodeNumber() throws {
        // restic and borg take a file whose inode number changed for a changed file, and read it
        // again whole: after a remount, every file of the account.
        dropbox.addFile("/Photos/2024/cat.jpg", [1])
        dropbox.addFile("/Photos/dog.jpg", [2])
        dropbox.addFile("/Notes/dog.jpg", [3])
        let paths = ["Photos", "Photos/2024", "Photos/2024/cat.jpg", "Photos/dog.jpg", "Notes", "Notes/dog.jpg"]
        func numbers(_ fs: DropboxFilesystem) throws -> [UInt64] { try paths.map { try resolve(fs, $0).serialNumber } }
        let store = InMemoryStore()
        let first = makeFS(store: store)
        try startLive(first)
        let shown = try numbers(first)
        #expect(Set(shown + [1]).count == paths.count + 1, "each its own, the root's 1 apart: \(shown)")
        #expect(shown.allSatisfy { $0 > 1 && $0 < 1 << 63 })
        #expect(try first.attributes(of: .root).serialNumber == 1)
        #expect(try resolve(first, "Photos/dog.jpg").inode.rawValue != shown[3], "not the node id of this mount")
        first.stopChangeFeed()
        first.persist()

        // A remount from the saved tree, and a mount that lists afresh.
        let second = makeFS(store: store)
        defer { second.stopChangeFeed() }
        try startLive(second)
        #expect(try numbers(second) == shown)
        let third = makeFS(api: dropbox)
        defer { third.stopChangeFeed() }
        try startLive(third)
        #expect(try numbers(third) == shown)

        // A file moved keeps its Dropbox id, and so its number, as a renamed file keeps its inode.
        dropbox.move("/Photos/dog.jpg", to: "/Photos/2024/dog.jpg")
        #expect(eventually { (try? resolve(third, "Photos/2024/dog.jpg"))?.serialNumber == shown[3] })
    }

    @Test func aSaveTheStoreCouldNotWriteIsTriedAgainWithoutAnotherChange() throws {
        // A full disk, say: the tree stays unsaved, so the unmount's save (or the feed's next)
        // writes it once the store can, though nothing changed since.
        dropbox.addFile("/a.txt", [1])
        let store = InMemoryStore()
        store.failsToWrite.store(true, ordering: .relaxed)
        let fs = makeFS(store: store)
        try startLive(fs)
        fs.stopChangeFeed()
        #expect(!fs.persist(), "the store wrote nothing")
        store.failsToWrite.store(false, ordering: .relaxed)
        #expect(fs.persist(), "still unsaved")
        #expect(store.load()?.entries.map(\.path) == ["/a.txt"])
    }

    @Test func aSavedTreeFoundDamagedPartWayIsNotKeptButListedAfresh() throws {
        // The store hands over a first batch, then finds its file damaged and gives no cursor.
        final class DamagedStore: MetadataStore {
            func load(_ receive: ([PersistedEntry]) -> Void) -> String? {
                receive([PersistedEntry(path: "/gone", file: nil),
                         PersistedEntry(path: "/gone/old.txt", file: PersistedFile(size: 1, modified: 0, id: "id:o", rev: "1", contentHash: nil))])
                return nil
            }
            func save(cursor: String, entries: ((PersistedEntry) -> Void) -> Void) -> Bool { false }
            func clear() {}
        }
        dropbox.addFile("/a.txt", [1])
        let fs = makeFS(store: DamagedStore())
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        #expect(try names(fs, .root) == ["a.txt"])
        #expect(throws: FSError.notFound) { try resolve(fs, "gone/old.txt") }
        #expect(dropbox.counters.recursiveListFolder == 1, "listed afresh")
    }

    @Test func aSavedTreeComesBackWithEveryPathAsSaved() throws {
        // persist() writes paths built along its walk, not from each node up: they must be the
        // paths a listing gave, at every depth and in display case.
        dropbox.addFile("/Top/Mid/Deep/é.txt", [1])
        dropbox.addFile("/Top/Mid/b.TXT", [2])
        dropbox.addFile("/Top/c", [3])
        dropbox.addFile("/d", [4])
        let store = InMemoryStore()
        let fs = makeFS(store: store)
        try startLive(fs)
        fs.stopChangeFeed()
        fs.persist()
        #expect(eventually { store.load()?.entries.count == 7 })
        let paths = try #require(store.load()).entries.map(\.path)
        #expect(paths.sorted() == ["/Top", "/Top/Mid", "/Top/Mid/Deep", "/Top/Mid/Deep/é.txt", "/Top/Mid/b.TXT", "/Top/c", "/d"])
        for (index, path) in paths.enumerated() {
            let parent = String(path[..<path.lastIndex(of: "/")!])
            #expect(parent.isEmpty || paths[..<index].contains(parent), "\(path) comes after its folder")
        }
    }

    @Test func aTreeThatTakesLongToSaveIsSavedLessOften() {
        #expect(DropboxFilesystem.saveInterval(afterASaveTaking: 0.05) == 30, "a small tree: every 30 s")
        #expect(DropboxFilesystem.saveInterval(afterASaveTaking: 1.5) == 30)
        #expect(DropboxFilesystem.saveInterval(afterASaveTaking: 3.5) == 70, "a million entries: a twentieth of the time")
        #expect(DropboxFilesystem.saveInterval(afterASaveTaking: 60) == 1200)
    }

    @Test func theFeedSavesByItselfOnceChangesHaveFlowedForItsInterval() throws {
        dropbox.addFile("/a.txt", [1])
        let store = InMemoryStore()
        let fs = makeFS(store: store)
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        dropbox.addFile("/b.txt", [2])
        #expect(eventually { (try? resolve(fs, "b.txt")) != nil })
        #expect(store.load() == nil, "nothing saved yet: the first listing's save comes 5 s after it")
        clock.advance(by: DropboxFilesystem.shortestSaveInterval + 1)
        // The feed's next turn saves (on a thread of its own), well before that.
        #expect(eventually(within: 3) { store.load()?.entries.map(\.path).sorted() == ["/a.txt", "/b.txt"] })
    }

    @Test func theSaveAtUnmountWaitsForASaveUnderWay() throws {
        // A save that holds the store until the test lets it go.
        final class GatedStore: MetadataStore {
            let entered = DispatchSemaphore(value: 0)
            let gate = DispatchSemaphore(value: 0)
            let completed = Atomic<Int>(0)
            func load(_ receive: ([PersistedEntry]) -> Void) -> String? { nil }
            func save(cursor: String, entries: ((PersistedEntry) -> Void) -> Void) -> Bool {
                entered.signal()
                gate.wait()
                completed.add(1, ordering: .relaxed)
                return true
            }
            func clear() {}
        }
        dropbox.addFile("/a.txt", [1])
        let store = GatedStore()
        let fs = makeFS(store: store)
        try startLive(fs)
        fs.stopChangeFeed()
        defer { for _ in 0..<4 { store.gate.signal() } }   // no save left waiting, whatever fails
        Thread.detachNewThread { fs.persist() }   // the first save, under way
        #expect(store.entered.wait(timeout: .now() + 5) == .success)
        // The feed's own saves do not queue behind it (this would block the test if they did).
        #expect(!fs.persistUnlessASaveIsUnderWay())
        let unmountSaveReturned = Atomic<Bool>(false)
        Thread.detachNewThread {
            fs.persist()   // as MountSession does once unmounted, before the process exits
            unmountSaveReturned.store(true, ordering: .relaxed)
        }
        Thread.sleep(forTimeInterval: 0.3)
        let returnedEarly = unmountSaveReturned.load(ordering: .relaxed)
        #expect(!returnedEarly, "the process must not exit while a save is being written")
        store.gate.signal()
        #expect(eventually { unmountSaveReturned.load(ordering: .relaxed) })
        let completed = store.completed.load(ordering: .relaxed)
        #expect(completed == 1, "the first save completed; nothing was left unsaved")
    }

    @Test func anIdleFeedNeverRewritesTheSavedTree() throws {
        dropbox.addFile("/a.txt", [1])
        let store = InMemoryStore()
        let fs = makeFS(store: store)
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        fs.persist()
        let afterFill = store.saves.withLock { $0 }
        #expect(afterFill >= 1, "the first full listing is saved")
        fs.persist()
        fs.persist()
        #expect(store.saves.withLock { $0 } == afterFill, "nothing changed: nothing is written")
        dropbox.addFile("/b.txt", [2])
        #expect(eventually { (try? resolve(fs, "b.txt")) != nil })
        fs.persist()
        #expect(store.saves.withLock { $0 } == afterFill + 1, "a change is saved once")
        #expect(store.load()?.entries.map(\.path).sorted() == ["/a.txt", "/b.txt"])
    }

    @Test func theMountHearsOfBulkWorkAfterAFullListingAndAfterLoadingASavedTree() throws {
        // The mount trims the heap there (malloc_trim): a listing's decoded pages are garbage by then.
        seedTree()
        let store = InMemoryStore()
        let calls = Atomic<Int>(0)
        let first = makeFS(store: store)
        first.onBulkWorkDone { calls.add(1, ordering: .relaxed) }
        try startLive(first)
        #expect(eventually { calls.load(ordering: .relaxed) >= 1 }, "after the fill (and its save)")
        first.stopChangeFeed()
        let afterFill = calls.load(ordering: .relaxed)
        #expect(afterFill == 1, "one call for the fill and its save, not one per page")
        first.persist()

        let second = makeFS(store: store)
        second.onBulkWorkDone { calls.add(1, ordering: .relaxed) }
        defer { second.stopChangeFeed() }
        second.startChangeFeed()
        #expect(eventually { calls.load(ordering: .relaxed) > afterFill }, "after loading the saved tree")
    }

    @Test func bytesPerEntryStayCompact() throws {
        var tree = Tree()
        let count = 200_000
        var folders: [Slot] = [.root]
        for i in 0..<count {
            if i % 100 == 0 {
                folders.append(tree.upsert(parent: .root, name: "folder \(i / 100)", details: nil).0)
                continue
            }
            let details = FileDetails(size: UInt64(i), modified: 1_700_000_000, id: "id:AAAAAAAAAAAAAAAAAAA\(i)",
                                      rev: "0123456789abcdef", contentHash: String(repeating: "e", count: 64))
            tree.upsert(parent: folders.last!, name: "IMG_\(i).jpg", details: details)
        }
        let perEntry = Double(tree.approximateBytes) / Double(tree.liveCount)
        print("tree bytes per entry at \(count) entries: \(Int(perEntry))")
        #expect(perEntry < 300)
    }
}

extension Array where Element == KernelInvalidation {
    /// Whether the kernel is told that `name` in `parent` leads to a node that is gone.
    func containsRemoval(of name: String, in parent: InodeNumber) -> Bool {
        contains { if case .removed(parent, name, _) = $0 { true } else { false } }
    }
}
