import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

@Suite("DropboxFS core against an in-memory Dropbox")
struct DropboxFSTests {
    let dropbox = FakeDropbox(pageSize: 100)
    let clock = ManualClock()

    func makeFS(_ options: FilesystemOptions = FilesystemOptions(uid: 1000, gid: 1000)) -> DropboxFilesystem {
        DropboxFilesystem(api: dropbox, options: options, folderModified: 1_600_000_000, now: clock.now)
    }

    func path(_ fs: DropboxFilesystem, _ components: String...) throws -> NodeAttributes {
        var inode = InodeNumber.root
        var attributes = try fs.attributes(of: .root)
        for name in components {
            attributes = try fs.lookup(parent: inode, name: name)
            inode = attributes.inode
        }
        return attributes
    }

    func names(_ fs: DropboxFilesystem, _ folder: InodeNumber) throws -> [String] {
        let handle = try fs.openDirectory(folder)
        defer { fs.releaseDirectory(handle) }
        return try fs.readDirectory(handle, from: 0).map(\.name)
    }

    @Test func attributesMatchDropboxMetadata() throws {
        dropbox.addFolder("/Docs")
        dropbox.addFolder("/Docs/Sub")
        dropbox.addFile("/Docs/a.txt", Array("hello".utf8), modified: 1_650_000_000)
        let fs = makeFS()
        let file = try path(fs, "Docs", "a.txt")
        #expect(file.kind == .file)
        #expect(file.size == 5)
        #expect(file.modified == 1_650_000_000)
        #expect(file.permissions == 0o444)
        #expect(file.linkCount == 1)
        #expect(file.uid == 1000 && file.gid == 1000)
        #expect(file.blocks == 1)
        let docs = try path(fs, "Docs")
        #expect(docs.kind == .directory)
        #expect(docs.permissions == 0o555)
        #expect(docs.linkCount == 3, "a listed folder with one subfolder has 2 + 1 links")
        #expect(try fs.attributes(of: .root).linkCount == 3)
    }

    @Test func umaskOverridesDefaultModes() throws {
        dropbox.addFile("/f", [1])
        dropbox.addFolder("/d")
        let fs = makeFS(FilesystemOptions(umask: 0o022))
        #expect(try path(fs, "f").permissions == 0o644)
        #expect(try path(fs, "d").permissions == 0o755)
    }

    @Test func readdirPagesThroughContinue() throws {
        for i in 0..<1050 { dropbox.addFile("/big/file\(i)", []) }
        dropbox.addFolder("/big")
        let fs = makeFS()
        let big = try path(fs, "big")
        let listed = try names(fs, big.inode)
        #expect(listed.count == 1052)
        #expect(listed.prefix(2) == [".", ".."])
        #expect(Set(listed.dropFirst(2)) == Set((0..<1050).map { "file\($0)" }))
        #expect(dropbox.counters.listContinue == 10)
    }

    @Test func aFolderOfOneHundredThousandEntriesListsCompletely() throws {
        let wide = FakeDropbox(pageSize: 2000)
        wide.injectListing("", (0..<100_000).map { i in
            .file(FileMetadata(name: "f\(i)", id: "id:\(i)", pathLower: "/f\(i)", pathDisplay: "/f\(i)",
                               clientModified: 0, serverModified: 0, rev: "abcdef0123", size: UInt64(i)))
        })
        let fs = DropboxFilesystem(api: wide, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        let handle = try fs.openDirectory(.root)
        var seen = 0
        var offset = 0
        while true {   // read in kernel-sized batches, as readdir does
            let batch = try fs.readDirectory(handle, from: offset).prefix(300)
            guard let last = batch.last else { break }
            seen += batch.count
            offset = last.offset
        }
        #expect(seen == 100_002)
        #expect(wide.counters.listContinue == 49)
        #expect(try fs.lookup(parent: .root, name: "f99999").size == 99_999)
    }

    @Test func readdirFromOffsetResumes() throws {
        for i in 0..<10 { dropbox.addFile("/f\(i)", []) }
        let fs = makeFS()
        let handle = try fs.openDirectory(.root)
        let all = try fs.readDirectory(handle, from: 0)
        let tail = try fs.readDirectory(handle, from: all[6].offset)
        #expect(tail == Array(all[7...]))
        #expect(try fs.readDirectory(handle, from: all.last!.offset).isEmpty)
        fs.releaseDirectory(handle)
        #expect(throws: FSError.badHandle) { try fs.readDirectory(handle, from: 0) }
    }

    @Test func listingIsTrustedForTheTTLThenRefreshed() throws {
        dropbox.addFile("/a", [1])
        dropbox.addFile("/b", [2])
        let fs = makeFS(FilesystemOptions(metadataTTL: .seconds(10)))
        let a = try path(fs, "a")
        _ = try path(fs, "b")
        _ = try fs.attributes(of: a.inode)
        #expect(dropbox.counters.listFolder == 1)

        dropbox.remove("/a")
        dropbox.addFile("/c", [3])
        clock.advance(by: 5)
        #expect(try fs.attributes(of: a.inode).size == 1, "within the TTL the cached listing answers")
        #expect(throws: FSError.notFound) { try fs.lookup(parent: .root, name: "c") }

        clock.advance(by: 6)
        // ESTALE: the kernel, which asked through an entry it still had, looks the name up again.
        #expect(throws: FSError.nodeGone) { try fs.attributes(of: a.inode) }
        #expect(throws: FSError.notFound) { try fs.lookup(parent: .root, name: "a") }
        #expect(try path(fs, "c").size == 1)
        #expect(dropbox.counters.listFolder == 2, "one relisting refreshes all siblings")
    }

    @Test func inodeNumbersStayStableAcrossRelisting() throws {
        dropbox.addFolder("/d")
        dropbox.addFile("/d/x", [1])
        let fs = makeFS(FilesystemOptions(metadataTTL: .seconds(1)))
        let first = try path(fs, "d", "x").inode
        let folder = try path(fs, "d").inode
        clock.advance(by: 5)
        dropbox.addFile("/d/x", [1, 2])
        let again = try path(fs, "d", "x")
        #expect(again.inode == first)
        #expect(again.size == 2)
        #expect(try path(fs, "d").inode == folder)
        #expect(first != folder && first != .root)
    }

    @Test func aPathThatChangesKindGetsANewInode() throws {
        dropbox.addFile("/x", [1])
        let fs = makeFS(FilesystemOptions(metadataTTL: .seconds(1)))
        let asFile = try path(fs, "x").inode
        dropbox.remove("/x")
        dropbox.addFolder("/x")
        clock.advance(by: 2)
        let asFolder = try path(fs, "x")
        #expect(asFolder.kind == .directory)
        #expect(asFolder.inode != asFile)
    }

    @Test func concurrentReadersOfAColdFolderShareOneListing() throws {
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let gated = FakeDropbox(pageSize: 100, listingGate: {
            entered.signal()
            release.wait()
        })
        for i in 0..<5 { gated.addFile("/f\(i)", [UInt8(i)]) }
        let fs = DropboxFilesystem(api: gated, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        let results = Mutex<[Result<UInt64, FSError>]>([])
        let group = DispatchGroup()
        for i in 0..<8 {
            DispatchQueue.global().async(group: group) {
                let r = Result { () throws(FSError) -> UInt64 in try fs.lookup(parent: .root, name: "f\(i % 5)").size }
                results.withLock { $0.append(r) }
            }
        }
        entered.wait()
        Thread.sleep(forTimeInterval: 0.2)   // let the other seven arrive while the listing is held
        release.signal()
        group.wait()
        #expect(gated.counters.listFolder == 1)
        #expect(results.withLock { $0.count } == 8)
        #expect(results.withLock { $0.allSatisfy { (try? $0.get()) == 1 } })
    }

    @Test func aSharedListingIsNotCancelledWithTheRequestThatStartedIt() throws {
        // Every caller's calls obey its own cancellation (an interrupted FUSE request's); the
        // listing the first one started is everyone's, so its caller giving up must not fail it.
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let cancelledInside = Atomic<Bool>(true)
        let gated = FakeDropbox(pageSize: 100, listingGate: {
            entered.signal()
            release.wait()
            cancelledInside.store(CallCancellation.isCurrentCallCancelled, ordering: .relaxed)
        })
        gated.addFile("/f", [1])
        let fs = DropboxFilesystem(api: gated, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        let leader = CallCancellation()
        let found = Mutex<Result<UInt64, FSError>?>(nil)
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            let r = Result { () throws(FSError) -> UInt64 in
                try CallCancellation.obeying(leader) { () throws(FSError) in try fs.lookup(parent: .root, name: "f").size }
            }
            found.withLock { $0 = r }
        }
        entered.wait()
        leader.cancel()   // the leader's caller is interrupted while the listing runs
        release.signal()
        group.wait()
        let ranCancelled = cancelledInside.load(ordering: .relaxed)
        #expect(!ranCancelled, "the listing ran under the leader's cancellation")
        #expect((try? found.withLock { $0 }?.get()) == 1)
    }

    @Test func readsAreRangedAndStopAtEndOfFile() throws {
        let content = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        dropbox.addFile("/data.bin", content)
        let fs = makeFS()
        let file = try path(fs, "data.bin")
        let opened = try fs.open(file.inode)
        #expect(try fs.read(opened.handle, offset: 0, size: 100) == Array(content[0..<100]))
        #expect(try fs.read(opened.handle, offset: 9_990, size: 100) == Array(content[9_990...]))
        #expect(try fs.read(opened.handle, offset: 10_000, size: 100) == [])
        #expect(try fs.read(opened.handle, offset: 50_000, size: 100) == [])
        // The first read's read-ahead (issue 6) covers the whole 10 KB file.
        #expect(dropbox.counters.download == 1, "reads at or past the end make no call")
        fs.release(opened.handle)
        #expect(throws: FSError.badHandle) { try fs.read(opened.handle, offset: 0, size: 1) }
    }

    @Test func aFileReplacedAfterOpenReadsOnAtItsRevUntilDropboxNoLongerHasIt() throws {
        // 64 MiB, so that the reads at 12 and 60 MiB are each beyond what the read before fetched ahead.
        dropbox.addFile("/f", Array(repeating: 1, count: 64 << 20))
        let fs = makeFS()
        let opened = try fs.open(try path(fs, "f").inode)
        #expect(try fs.read(opened.handle, offset: 0, size: 10) == Array(repeating: 1, count: 10))
        dropbox.addFile("/f", Array(repeating: 2, count: 64 << 20))
        #expect(try fs.read(opened.handle, offset: 12 << 20, size: 10) == Array(repeating: 1, count: 10),
                "the handle's rev, never the new bytes")
        dropbox.forgetFormerRevisions()
        #expect(throws: FSError.changedSinceOpen, "a vanished rev is ESTALE for the reader, not ENOENT") {
            try fs.read(opened.handle, offset: 60 << 20, size: 10)
        }
    }

    @Test func keepCacheOnlyWhileTheRevIsUnchanged() throws {
        dropbox.addFile("/f", [1])
        let fs = makeFS(FilesystemOptions(metadataTTL: .seconds(1)))
        let inode = try path(fs, "f").inode
        let first = try fs.open(inode)
        #expect(first.contentUnchanged == false)
        fs.release(first.handle)
        let second = try fs.open(inode)
        #expect(second.contentUnchanged == true)
        fs.release(second.handle)
        dropbox.addFile("/f", [2])
        clock.advance(by: 2)
        let third = try fs.open(inode)
        #expect(third.contentUnchanged == false, "open revalidates stale attributes")
        #expect(try fs.read(third.handle, offset: 0, size: 4) == [2])
    }

    @Test func aNewRevWhileAHandleIsOpenIsANewNodeWhosePagesAreNotTheOldOnes() throws {
        dropbox.addFile("/f", [1])
        let fs = makeFS(FilesystemOptions(metadataTTL: .seconds(1)))
        let inode = try path(fs, "f").inode
        let old = try fs.open(inode).handle
        let second = try fs.open(inode)
        #expect(second.contentUnchanged == true, "a second handle of the same rev keeps the pages")
        fs.release(second.handle)
        dropbox.addFile("/f", [2])
        clock.advance(by: 2)
        #expect(throws: FSError.nodeGone, "the old node, reached through an entry the kernel still had") {
            try fs.open(inode)
        }
        let replaced = try path(fs, "f")
        #expect(replaced.inode != inode && replaced.size == 1)
        let new = try fs.open(replaced.inode)
        #expect(new.contentUnchanged == false)
        #expect(try fs.read(new.handle, offset: 0, size: 4) == [2])
        #expect(try fs.read(old, offset: 0, size: 4) == [1])
        fs.release(old)
        fs.release(new.handle)
        #expect(try fs.open(replaced.inode).contentUnchanged == true, "opened at this rev since")
    }

    @Test func aNodeRemovedBeforeAMassDeletionHasNoDetailsOnceTheArenaIsCompacted() throws {
        // Deleting thousands of entries compacts the tree's byte arena: a node removed before then
        // (a file deleted on Dropbox while a handle has it open) keeps offsets that point at bytes
        // given to other nodes, or past the arena's end, and they are never read.
        var tree = Tree()
        func file(_ name: String) -> FileDetails {
            FileDetails(size: 1, modified: 0, id: "id:/" + name, rev: "0123456789", contentHash: String(repeating: "a", count: 64))
        }
        let (deleted, _) = tree.upsert(parent: .root, name: "open.bin", details: file("open.bin"))
        let long = String(repeating: "n", count: 150)
        let others = (0..<10_000).map { tree.upsert(parent: .root, name: "\(long)-\($0)", details: file("\(long)-\($0)")).0 }
        let (kept, _) = tree.upsert(parent: .root, name: "kept.txt", details: file("kept.txt"))
        tree.remove(deleted)
        #expect(tree.details(deleted) == nil)
        for slot in others { tree.remove(slot) }   // the arena is compacted on the way
        #expect(tree.details(deleted) == nil)
        #expect(tree.details(kept)?.id == "id:/kept.txt")
        #expect(tree.name(kept) == "kept.txt")
    }

    @Test func anOpenFileRemovedFromTheTreeKeepsWhereItWasUntilItIsClosed() throws {
        var tree = Tree()
        let (folder, _) = tree.upsert(parent: .root, name: "Docs", details: nil)
        let details = FileDetails(size: 1, modified: 0, id: "id:/docs/a", rev: "0123456789", contentHash: nil)
        let (open, _) = tree.upsert(parent: folder, name: "a.txt", details: details)
        let (closed, _) = tree.upsert(parent: folder, name: "b.txt", details: details)
        tree.openFiles.insert(open)
        tree.remove(folder)
        #expect(tree.formerPaths == [open: ["Docs", "a.txt"]], "only an open file's, not \(closed)'s")
        tree.openFiles.remove(open)
        #expect(tree.formerPaths.isEmpty)
    }

    @Test func namesAreExactUnlessCaseInsensitive() throws {
        dropbox.addFile("/Photo.JPG", [1])
        dropbox.addFile("/Cafe\u{301}.txt", [2])   // decomposed, as macOS writes names
        let exact = makeFS()
        #expect(throws: FSError.notFound) { try exact.lookup(parent: .root, name: "photo.jpg") }
        #expect(throws: FSError.notFound, "byte for byte, not Swift's ==") {
            try exact.lookup(parent: .root, name: "Caf\u{E9}.txt")
        }
        #expect(try exact.lookup(parent: .root, name: "Cafe\u{301}.txt").size == 1)
        #expect(try exact.lookup(parent: .root, name: "Photo.JPG").size == 1)
        let folded = makeFS(FilesystemOptions(caseInsensitive: true))
        #expect(try folded.lookup(parent: .root, name: "photo.jpg").size == 1)
        #expect(try folded.lookup(parent: .root, name: "CAF\u{C9}.TXT").size == 1, "as Dropbox folds: composed too")
        #expect(try names(folded, .root).contains("Photo.JPG"), "names still appear as Dropbox has them")
    }

    @Test func onlyDropboxsOwnSpellingIsKeptByTheKernelWhenNamesMatchInAnyCase() throws {
        // Invalidations name Dropbox's spelling; the kernel must not keep another, nor an absence.
        dropbox.addFile("/Photo.JPG", [1])
        let folded = makeFS(FilesystemOptions(caseInsensitive: true))
        let asStored = try folded.lookup(parent: .root, name: "Photo.JPG")
        let otherwise = try folded.lookup(parent: .root, name: "photo.jpg")
        #expect(folded.kernelMayKeepEntry(named: "Photo.JPG", found: asStored))
        #expect(!folded.kernelMayKeepEntry(named: "photo.jpg", found: otherwise))
        #expect(!folded.kernelMayKeepEntry(named: "late.txt", found: nil), "a file added as LATE.TXT would answer")
        let exact = makeFS()
        #expect(exact.kernelMayKeepEntry(named: "late.txt", found: nil), "exact names: the addition's own invalidation")
        #expect(exact.kernelMayKeepEntry(named: "Photo.JPG", found: try exact.lookup(parent: .root, name: "Photo.JPG")))
    }

    @Test func hostileNamesAreSkipped() throws {
        func file(_ name: String) -> Metadata {
            .file(FileMetadata(name: name, id: "id:\(name)", pathLower: nil, pathDisplay: nil, clientModified: 0,
                               serverModified: 0, rev: "abcdef0123", size: 1))
        }
        // 255 characters of a CJK name are 765 bytes: longer than most disks allow, not than FUSE.
        let cjk = String(repeating: "\u{65E5}", count: 255)
        dropbox.injectListing("", [file("ok"), file("a/b"), file("."), file(".."), file(""), file("nul\0x"),
                                   file(String(repeating: "x", count: 1025)), file(String(repeating: "y", count: 1024)),
                                   file(cjk), file("Dup"), file("dup")])
        let fs = makeFS()
        let listed = try names(fs, .root).dropFirst(2)
        #expect(Array(listed) == ["ok", String(repeating: "y", count: 1024), cjk, "Dup"])
        #expect(try fs.lookup(parent: .root, name: cjk).size == 1)
    }

    @Test func documentsDropboxCannotDownloadAppearAsTheirExports() throws {
        dropbox.addFile("/Notes.paper", Array("<p>hi</p>".utf8), downloadable: false)
        dropbox.addFile("/real.txt", [1])
        let fs = makeFS()
        #expect(try names(fs, .root).dropFirst(2).sorted() == ["Notes.html", "real.txt"])
        let notes = try path(fs, "Notes.html")
        let opened = try fs.open(notes.inode)
        #expect(opened.kernelSizeMayBeStale, "export handles bypass the page cache")
        let exported = Array("exported:<p>hi</p>".utf8)
        #expect(try fs.read(opened.handle, offset: 0, size: 100) == exported)
        #expect(try fs.read(opened.handle, offset: 9, size: 2) == Array("<p".utf8))
        #expect(try fs.attributes(of: notes.inode).size == UInt64(exported.count), "the size becomes the export's")
        _ = try fs.open(notes.inode)
        #expect(dropbox.counters.exports == 1, "a second open is served from the export cache")
        #expect(dropbox.counters.download == 0)
        var hidden = FilesystemOptions()
        hidden.showExports = false
        #expect(try names(makeFS(hidden), .root).dropFirst(2) == ["real.txt"])
    }

    @Test func aSubfolderMountShowsOnlyThatFolder() throws {
        dropbox.addFolder("/Photos")
        dropbox.addFile("/Photos/cat.jpg", [1, 2, 3])
        dropbox.addFile("/outside.txt", [1])
        let fs = makeFS(FilesystemOptions(rootPath: "/Photos"))
        #expect(try names(fs, .root).dropFirst(2) == ["cat.jpg"])
        let cat = try path(fs, "cat.jpg")
        let opened = try fs.open(cat.inode)
        #expect(try fs.read(opened.handle, offset: 0, size: 10) == [1, 2, 3])
    }

    @Test func statisticsComeFromSpaceUsageAndAreCached() throws {
        let fs = makeFS()
        let stats = try fs.statistics()
        #expect(stats.usedBytes == 1 << 30)
        #expect(stats.allocatedBytes == 2 << 30)
        _ = try fs.statistics()
        #expect(dropbox.counters.spaceUsage == 1)
    }

    @Test func theKernelDropsItsListingWhenAnOpenListedTheFolderAgain() throws {
        dropbox.addFile("/a", [1])
        let fs = makeFS()   // no change feed: a folder is listed again once its TTL has passed
        let first = try fs.openDirectory(.root)
        #expect(fs.kernelMayKeepListing(first) == false, "listed by this open")
        fs.releaseDirectory(first)
        let second = try fs.openDirectory(.root)
        #expect(fs.kernelMayKeepListing(second), "within the TTL: nothing listed")
        fs.releaseDirectory(second)
        clock.advance(by: 61)
        dropbox.addFile("/b", [2])
        let third = try fs.openDirectory(.root)
        #expect(fs.kernelMayKeepListing(third) == false, "listed again: its invalidations may still be queued")
        fs.releaseDirectory(third)
    }

    @Test func onlySizesTheKernelWasGivenCountAsReported() throws {
        // readDirectory returns more entries than a readdirplus reply fits, and a plain readdir
        // gives no sizes at all: the adapter says which sizes went out.
        dropbox.addFile("/f", [1, 2, 3])
        let fs = makeFS()
        let directory = try fs.openDirectory(.root)
        let listed = try #require(try fs.readDirectory(directory, from: 0).first { $0.name == "f" }?.attributes)
        fs.releaseDirectory(directory)
        func kernelSizeMayBeStale() throws -> Bool {
            let opened = try fs.open(listed.inode)
            fs.release(opened.handle)
            return opened.kernelSizeMayBeStale
        }
        #expect(try kernelSizeMayBeStale(), "listed, but no size given")
        fs.sizesReported([(listed.inode, 999)])
        #expect(try kernelSizeMayBeStale(), "a size the file no longer has")
        fs.sizesReported([(listed.inode, 3)])
        #expect(try kernelSizeMayBeStale() == false)
    }

    @Test func statisticsOutliveAFailingDropbox() throws {
        dropbox.fail(with: .transport(code: 7, message: "connection refused"))
        let fs = makeFS()
        let before = try fs.statistics()
        #expect(before.usedBytes == 0 && before.allocatedBytes == 0, "no figures yet: zeros, not an error for df")
        dropbox.fail(with: nil)
        clock.advance(by: 61)
        #expect(try fs.statistics().usedBytes == 1 << 30)
        let asked = Atomic<Int>(0)
        dropbox.setSpaceUsageGate { asked.add(1, ordering: .relaxed) }
        defer { dropbox.setSpaceUsageGate(nil) }
        dropbox.fail(with: .server(status: 503, body: ""))
        clock.advance(by: 61)
        let stale = try fs.statistics()
        #expect(stale.usedBytes == 1 << 30 && stale.allocatedBytes == 2 << 30, "the last figures stand")
        #expect(eventually { asked.load(ordering: .relaxed) == 1 }, "asked again in the background")
        Thread.sleep(forTimeInterval: 0.1)
        #expect(try fs.statistics().usedBytes == 1 << 30)
        Thread.sleep(forTimeInterval: 0.1)
        #expect(asked.load(ordering: .relaxed) == 1, "a failing Dropbox is asked once per TTL, not at every df")
    }

    @Test func staleStatisticsAreAnsweredAtOnceAndRefreshedInTheBackground() throws {
        let fs = makeFS()
        #expect(try fs.statistics().usedBytes == 1 << 30, "the first figures are waited for")
        let held = DispatchSemaphore(value: 0)
        dropbox.setSpaceUsageGate { held.wait() }
        dropbox.setSpaceUsed(3 << 30)
        clock.advance(by: 61)
        let started = ContinuousClock.now
        #expect(try fs.statistics().usedBytes == 1 << 30, "stale figures, at once, while Dropbox is slow")
        #expect(try fs.statistics().usedBytes == 1 << 30)
        #expect(ContinuousClock.now - started < .seconds(10), "never waits for the held call (which waits for ever)")
        held.signal()
        held.signal()
        #expect(eventually { (try? fs.statistics().usedBytes) == 3 << 30 }, "the new figures once it answers")
        #expect(dropbox.counters.spaceUsage == 2, "one refresh, however many df asked meanwhile")
        dropbox.setSpaceUsageGate(nil)
    }

    @Test func theFirstFiguresAreWaitedForOnlyAWhileOnAHungLink() throws {
        var options = FilesystemOptions(uid: 1000, gid: 1000)
        options.firstStatisticsWaitSeconds = 0.2
        let fs = makeFS(options)
        let held = DispatchSemaphore(value: 0)
        let asked = Atomic<Int>(0)
        dropbox.setSpaceUsageGate { asked.add(1, ordering: .relaxed); held.wait() }
        defer { dropbox.setSpaceUsageGate(nil) }
        let first = try fs.statistics()
        #expect(first.usedBytes == 0 && first.allocatedBytes == 0, "zeros while the first call hangs, not a df held for its deadline")
        #expect(try fs.statistics().usedBytes == 0)
        #expect(asked.load(ordering: .relaxed) == 1, "one call, however many df asked meanwhile")
        held.signal()
        #expect(eventually { (try? fs.statistics().usedBytes) == 1 << 30 }, "the figures once it answers")
        #expect(asked.load(ordering: .relaxed) == 1)
    }

    @Test func aFailureBeforeAnyFiguresIsAskedAgainOnlyAfterTheTTL() throws {
        let asked = Atomic<Int>(0)
        dropbox.setSpaceUsageGate { asked.add(1, ordering: .relaxed) }
        defer { dropbox.setSpaceUsageGate(nil) }
        dropbox.fail(with: .server(status: 503, body: ""))
        let fs = makeFS()
        #expect(try fs.statistics().usedBytes == 0)
        #expect(try fs.statistics().usedBytes == 0)
        #expect(asked.load(ordering: .relaxed) == 1, "a failing Dropbox is not asked at every df")
        dropbox.fail(with: nil)
        clock.advance(by: 61)
        #expect(try fs.statistics().usedBytes == 1 << 30)
        #expect(asked.load(ordering: .relaxed) == 2)
    }

    @Test func dropboxFailuresBecomeFilesystemErrors() throws {
        let fs = makeFS()
        dropbox.fail(with: .auth(tag: "invalid_access_token", summary: "invalid_access_token/"))
        #expect(throws: FSError.accessDenied) { try fs.lookup(parent: .root, name: "x") }
        dropbox.fail(with: .transport(code: 7, message: "connection refused"))
        #expect(throws: FSError.upstream(.transport(code: 7, message: "connection refused"))) {
            try fs.lookup(parent: .root, name: "x")
        }
        dropbox.fail(with: nil)
        dropbox.addFile("/x", [1])
        #expect(try fs.lookup(parent: .root, name: "x").size == 1, "a failed listing is not cached")
    }

    @Test func lookupsInAFileAreNotADirectory() throws {
        dropbox.addFile("/f", [1])
        let fs = makeFS()
        let f = try path(fs, "f")
        #expect(throws: FSError.notADirectory) { try fs.lookup(parent: f.inode, name: "x") }
        #expect(throws: FSError.notADirectory) { try fs.openDirectory(f.inode) }
        #expect(throws: FSError.isADirectory) { try fs.open(.root) }
    }

    @Test func extendedAttributesCarryDropboxIdentity() throws {
        dropbox.addFile("/f", [1])
        let fs = makeFS()
        let attributes = try fs.extendedAttributes(of: try path(fs, "f").inode)
        #expect(attributes.map(\.name) == ["user.dropbox.id", "user.dropbox.rev", "user.dropbox.content_hash"])
        #expect(attributes[0].value == "id:/f")
        #expect(try fs.extendedAttributes(of: .root).isEmpty)
    }
}

@Suite("A single file as the mount")
struct RootFileTests {
    @Test func theRootInodeIsThatFile() throws {
        let dropbox = FakeDropbox()
        let content: [UInt8] = (0..<50_000).map { UInt8($0 % 251) }
        dropbox.addFile("/data.bin", content)
        dropbox.addFile("/other.txt", [1, 2])
        var options = FilesystemOptions()
        options.rootFileName = "data.bin"
        let fs = DropboxFilesystem(api: dropbox, options: options, folderModified: 0)
        let attributes = try fs.attributes(of: .root)
        #expect(attributes.kind == .file && attributes.size == 50_000)
        let handle = try fs.open(.root).handle
        #expect(try fs.read(handle, offset: 1000, size: 10) == Array(content[1000..<1010]))
        fs.release(handle)
        #expect(try fs.extendedAttributes(of: .root).contains { $0.name == "user.dropbox.rev" })
        // A name the folder does not hold leaves the mount point ENOENT, never another file.
        var gone = options
        gone.rootFileName = "missing.bin"
        #expect(throws: FSError.notFound) { try DropboxFilesystem(api: dropbox, options: gone, folderModified: 0).attributes(of: .root) }
    }

    @Test func aNewRevUnderAnOpenHandleIsStaleThereAndTheCacheIsNotKept() throws {
        // The mount point stays the one node the kernel reaches the file by, so a new rev cannot
        // come as a new node: the old handle's reads are ESTALE, and no handle keeps pages while
        // another rev is or was open.
        let dropbox = FakeDropbox()
        let clock = ManualClock()
        dropbox.addFile("/data.bin", [1])
        var options = FilesystemOptions(metadataTTL: .seconds(1))
        options.rootFileName = "data.bin"
        let fs = DropboxFilesystem(api: dropbox, options: options, folderModified: 0, now: clock.now)
        let old = try fs.open(.root).handle
        dropbox.addFile("/data.bin", [2, 2])
        clock.advance(by: 2)
        let new = try fs.open(.root)
        #expect(new.contentUnchanged == false && new.kernelSizeMayBeStale, "a handle of the old rev is still open")
        #expect(try fs.read(new.handle, offset: 0, size: 4) == [2, 2])
        #expect(throws: FSError.changedSinceOpen) { try fs.read(old, offset: 0, size: 4) }
        fs.release(old)   // its reads may have left old pages in the kernel's cache
        let third = try fs.open(.root)
        #expect(third.contentUnchanged == false, "the old handle's pages must go")
        fs.release(third.handle)
        #expect(try fs.open(.root).contentUnchanged == true, "opened at this rev since")
        fs.release(new.handle)
    }
}
