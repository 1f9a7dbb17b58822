// The first listing split into subtrees listed in parallel, with the change feed continuing from
// a cursor taken before any of them: what it costs, and that no change made meanwhile is lost or
// undone (a reference model: the fake's own tree, after random changes during the listing).

import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

@Suite("Parallel first listing")
struct ParallelFillTests {
    let clock = ManualClock()

    func makeFS(_ dropbox: FakeDropbox, concurrency: Int = 8) -> DropboxFilesystem {
        var options = FilesystemOptions(metadataTTL: .seconds(60))
        options.listingConcurrency = concurrency
        return DropboxFilesystem(api: dropbox, options: options, folderModified: 0, now: clock.now)
    }

    /// Every path the mount shows, with a file's size (nil for a folder), walked through the core.
    func visible(_ fs: DropboxFilesystem) throws -> [String: UInt64?] {
        var found: [String: UInt64?] = [:]
        func walk(_ folder: InodeNumber, _ prefix: String) throws {
            let handle = try fs.openDirectory(folder)
            defer { fs.releaseDirectory(handle) }
            for entry in try fs.readDirectory(handle, from: 2) {
                let attributes = entry.attributes
                let path = prefix + "/" + entry.name
                if attributes.kind == .directory {
                    found[path.lowercased()] = .some(nil)
                    try walk(attributes.inode, path)
                } else {
                    found[path.lowercased()] = attributes.size
                }
            }
        }
        try walk(.root, "")
        return found
    }

    /// One `/<top>/sub/f.txt` per name: top folders that each become a subtree listing.
    func addTopFolders(_ tops: [String], to dropbox: FakeDropbox, fileSize: Int = 1) {
        for top in tops {
            dropbox.addFolder("/\(top)")
            dropbox.addFolder("/\(top)/sub")
            dropbox.addFile("/\(top)/sub/f.txt", Array(repeating: 1, count: fileSize))
        }
    }

    func served(_ dropbox: FakeDropbox) -> [String: UInt64?] {
        var found: [String: UInt64?] = [:]
        for (path, item) in dropbox.items { found[path] = item.isFolder ? .some(nil) : UInt64(item.content.count) }
        return found
    }

    /// Holds the first listing at `get_latest_cursor` until `release()`: what a test does
    /// meanwhile happens before the cursor is taken.
    struct CursorHold {
        let dropbox: FakeDropbox
        let entered = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)

        init(_ dropbox: FakeDropbox) {
            self.dropbox = dropbox
            dropbox.setCursorGate { [entered, released] in entered.signal(); released.wait() }
        }

        func waitUntilHeld() -> Bool { entered.wait(timeout: .now() + 5) == .success }

        /// Lets the cursor be taken (again harmless, as a test's last word).
        func release() {
            dropbox.setCursorGate(nil)
            released.signal()
        }
    }

    /// A first listing whose subtree listings (`count`, one per top folder) all start and then
    /// wait until `release()`, on a mount whose readers would wait 20 s for them: long enough that
    /// a reader that waited fails a test's time check. nil if the subtree listings did not start.
    struct HeldSubtrees: Sendable {
        let fs: DropboxFilesystem
        let dropbox: FakeDropbox
        let hold = DispatchSemaphore(value: 0)

        init?(_ dropbox: FakeDropbox, count: Int, clock: ManualClock) {
            self.dropbox = dropbox
            let subtrees = Mutex(0)
            dropbox.setGates(listing: nil, recursive: { [hold] in
                subtrees.withLock { $0 += 1 }
                hold.wait()
                hold.signal()
            })
            var options = FilesystemOptions(metadataTTL: .seconds(60))
            options.listingConcurrency = count
            options.fillWaitSeconds = 20
            fs = DropboxFilesystem(api: dropbox, options: options, folderModified: 0, now: clock.now)
            fs.startChangeFeed()
            guard eventually({ subtrees.withLock { $0 } == count }) else { stop(); return nil }
        }

        /// The names in `folder`, read as a reader reads them (opendir, readdir, releasedir).
        @Sendable func names(_ folder: InodeNumber) throws -> [String] {
            let handle = try fs.openDirectory(folder)
            defer { fs.releaseDirectory(handle) }
            return try fs.readDirectory(handle, from: 2).map(\.name)
        }

        func release() {
            dropbox.setGates(listing: nil, recursive: nil)
            hold.signal()
        }

        func stop() {
            fs.stopChangeFeed()
            hold.signal()
        }
    }

    @Test func subtreesAreListedOnceEachAndAnswerWithoutFurtherCalls() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        for f in 0..<20 {
            dropbox.addFolder("/F\(f)")
            for i in 0..<10 { dropbox.addFile("/F\(f)/file\(i).txt", Array("\(f)-\(i)".utf8)) }
        }
        dropbox.addFolder("/F0/deep")
        dropbox.addFile("/F0/deep/leaf.txt", [1, 2, 3])
        dropbox.addFile("/top.txt", [1])
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive })
        #expect(dropbox.counters.recursiveListFolder == 20, "one recursive listing per top-level folder")
        #expect(eventually { dropbox.counters.listFolder == 2 }, "the mounted folder's own entries, beside the cursor and once more after")
        let before = dropbox.counters
        #expect(try visible(fs) == served(dropbox))
        #expect(dropbox.counters.listFolder == before.listFolder && dropbox.counters.recursiveListFolder == 20,
                "no folder is listed again")
    }

    @Test func progressCountsTheListingsAndTheEntriesAndEndsDone() throws {
        let dropbox = FakeDropbox(pageSize: 7)
        addTopFolders(["A", "B", "C"], to: dropbox)
        dropbox.addFile("/loose.txt", [1])
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed() }
        #expect(fs.syncProgress.firstListing == nil, "no first listing before the feed starts")
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive })
        let progress = fs.syncProgress
        let listing = try #require(progress.firstListing)
        #expect(listing.done && listing.fraction == 1)
        // The root on its own, the three top folders (few for 8 at once, so each is listed alone)
        // and their subfolders' subtrees.
        #expect(listing.listingsStarted == 7 && listing.listingsDone == 7, "\(listing)")
        #expect(listing.entries >= dropbox.items.count, "\(listing.entries) of \(dropbox.items.count)")
        #expect(listing.folders >= 6)
        #expect(progress.feedLive && progress.feedDownForSeconds == nil && progress.feedError == nil)
    }

    @Test func progressSaysWhenAndWhyTheFeedIsDown() throws {
        let dropbox = FakeDropbox()
        addTopFolders(["A"], to: dropbox)
        dropbox.fail(with: .transport(code: 7, message: "connection refused"))
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.syncProgress.feedDownForSeconds != nil })
        clock.advance(by: 30)
        let progress = fs.syncProgress
        #expect(!progress.feedLive)
        #expect((progress.feedDownForSeconds ?? 0) >= 30)
        #expect(progress.feedError?.contains("connection refused") == true, "\(String(describing: progress.feedError))")
        #expect(progress.firstListing?.done == false)
        dropbox.fail(with: nil)
        #expect(eventually(within: 10) { fs.isFeedLive }, "the feed recovers after its backoff")
        #expect(fs.syncProgress.feedDownForSeconds == nil && fs.syncProgress.feedError == nil)
    }

    @Test func aTreeNarrowAtTheTopIsSplitOneLevelFurther() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        dropbox.addFolder("/Only")
        for f in 0..<12 {
            dropbox.addFolder("/Only/S\(f)")
            dropbox.addFile("/Only/S\(f)/a.txt", [UInt8(f)])
        }
        dropbox.addFile("/Only/loose.txt", [9])
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive })
        #expect(eventually { dropbox.counters.listFolder == 3 }, "the root beside the cursor, /Only on its own, the root again after")
        #expect(dropbox.counters.recursiveListFolder == 12)
        #expect(try visible(fs) == served(dropbox))
    }

    @Test func aSubtreeListedWholeAnswersAtOnceWhileTheRestIsStillListed() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A", "B"], to: dropbox)
        let hold = DispatchSemaphore(value: 0)
        let subtrees = Mutex(0)
        // The second subtree listing waits; the first finishes.
        dropbox.setGates(listing: nil, recursive: {
            if subtrees.withLock({ $0 += 1; return $0 }) == 2 { hold.wait() }
        })
        let fs = makeFS(dropbox, concurrency: 2)
        defer { fs.stopChangeFeed(); hold.signal() }
        fs.startChangeFeed()
        #expect(eventually { subtrees.withLock { $0 } == 2 })
        Thread.sleep(forTimeInterval: 0.2)   // the first subtree's last page is applied
        var calls: [Int] = []
        for top in ["A", "B"] {
            let before = dropbox.counters.listFolder
            let folder = try fs.lookup(parent: try fs.lookup(parent: .root, name: top).inode, name: "sub")
            #expect(try fs.lookup(parent: folder.inode, name: "f.txt").size == 1)
            calls.append(dropbox.counters.listFolder - before)
        }
        #expect(calls.min() == 0, "the finished subtree is answered from the tree: \(calls)")
        #expect(!fs.isFeedLive)
        dropbox.setGates(listing: nil, recursive: nil)
        hold.signal()
        #expect(eventually { fs.isFeedLive })
    }

    @Test func aFolderReachedByNameWithinASubtreeUnderWayIsAnsweredWithoutWaitingForIt() throws {
        // `cd A/sub/deep; ls; cat f.txt` right after mounting, while the subtree listing of A is
        // still under way (held here until the end): each name costs one get_metadata, the folder
        // read one listing of its own, and none of them waits for the subtree.
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A", "B"], to: dropbox)
        dropbox.addFolder("/A/sub/deep")
        dropbox.addFile("/A/sub/deep/f.txt", [1, 2, 3])
        dropbox.addFile("/A/sub/deep/g.txt", [4])
        let held = try #require(HeldSubtrees(dropbox, count: 2, clock: clock))
        defer { held.stop() }
        let fs = held.fs
        let started = Date()

        let a = try fs.lookup(parent: .root, name: "A")
        let before = dropbox.counters
        let sub = try fs.lookup(parent: a.inode, name: "sub")
        let deep = try fs.lookup(parent: sub.inode, name: "deep")
        let file = try fs.lookup(parent: deep.inode, name: "f.txt")
        #expect(sub.kind == .directory && deep.kind == .directory && file.size == 3)
        #expect(dropbox.counters.metadata == before.metadata + 3, "one get_metadata per name")
        #expect(dropbox.counters.listFolder == before.listFolder, "no folder listed for a name")
        // Its attributes and its opening come from the tree: the subtree listing is as fresh.
        #expect(try fs.attributes(of: file.inode).size == 3)
        let opened = try fs.open(file.inode)
        #expect(try fs.read(opened.handle, offset: 0, size: 10) == [1, 2, 3])
        fs.release(opened.handle)
        #expect(dropbox.counters.listFolder == before.listFolder)

        // Reading the folder lists it alone, at once.
        #expect(try held.names(deep.inode).sorted() == ["f.txt", "g.txt"])
        #expect(dropbox.counters.listFolder == before.listFolder + 1)
        #expect(Date().timeIntervalSince(started) < 10, "nothing waited for the subtree listing")
        #expect(!fs.isFeedLive, "the subtree listing was still under way throughout")

        held.release()
        #expect(eventually { fs.isFeedLive })
        #expect(try visible(fs) == served(dropbox))
    }

    @Test func aTopFolderOpenedByNameIsListedAtOnceButWaitedForOnceTheMountedFolderWasRead() throws {
        // `ls A` right after mounting lists A on its own; `find`, which reads the mounted folder
        // first, waits for the subtree listing of B instead of listing B a second time.
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A", "B", "C"], to: dropbox)
        let held = try #require(HeldSubtrees(dropbox, count: 3, clock: clock))
        defer { held.stop() }
        let fs = held.fs, names = held.names
        let started = Date()
        let before = dropbox.counters.listFolder
        #expect(try names(try fs.lookup(parent: .root, name: "A").inode) == ["sub"])
        #expect(dropbox.counters.listFolder == before + 1, "A listed on its own")
        #expect(Date().timeIntervalSince(started) < 10, "without waiting for A's subtree listing")

        #expect(try names(.root) == ["A", "B", "C"])
        let b = try fs.lookup(parent: .root, name: "B")
        let walker = Thread { _ = try? names(b.inode) }
        walker.start()
        Thread.sleep(forTimeInterval: 0.3)
        #expect(dropbox.counters.listFolder == before + 1, "B waited for, not listed")
        held.release()
        #expect(eventually { fs.isFeedLive })
        #expect(try names(b.inode) == ["sub"])
        #expect(try visible(fs) == served(dropbox))
    }

    @Test func aReaderWaitsForTheSubtreeListingUnderWayInsteadOfListingAgain() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A", "B"], to: dropbox, fileSize: 2)
        let started = Mutex(0)
        // Each subtree listing takes a while, as at a real round trip.
        dropbox.setGates(listing: nil, recursive: {
            started.withLock { $0 += 1 }
            Thread.sleep(forTimeInterval: 0.3)
        })
        let fs = makeFS(dropbox, concurrency: 2)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { started.withLock { $0 } == 2 })
        let before = dropbox.counters.listFolder
        // Walked as `find` walks, each folder read before the next is looked up in it.
        func names(_ folder: InodeNumber) throws -> [String] {
            let handle = try fs.openDirectory(folder)
            defer { fs.releaseDirectory(handle) }
            return try fs.readDirectory(handle, from: 2).map(\.name)
        }
        #expect(try names(.root) == ["A", "B"])
        let b = try fs.lookup(parent: .root, name: "B")
        #expect(try names(b.inode) == ["sub"])
        let sub = try fs.lookup(parent: b.inode, name: "sub")
        #expect(try names(sub.inode) == ["f.txt"])
        #expect(try fs.lookup(parent: sub.inode, name: "f.txt").size == 2)
        // The one further listing the fill may make meanwhile is the mounted folder's, once it ends.
        #expect(dropbox.counters.listFolder <= before + 1, "B and B/sub came from B's subtree listing, not their own")
        #expect(dropbox.counters.metadata == 0, "and no name was asked for alone")
        #expect(eventually { fs.isFeedLive })
        // The feed is live before the mounted folder's second listing (listAgainAfterFill) returns.
        #expect(eventually { dropbox.counters.listFolder == before + 1 })
    }

    @Test func subtreeListingsWaitWhileAReaderReadsTheFolderItWaitedForToTheEnd() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        dropbox.addFolder("/Wide")
        for f in 0..<120 { dropbox.addFile("/Wide/f\(f).txt", [1]) }
        dropbox.addFolder("/Deep")
        for d in 0..<10 {
            dropbox.addFolder("/Deep/d\(d)")
            dropbox.addFile("/Deep/d\(d)/f.txt", [1])
        }
        // Two folders at the top: each is listed alone, then Deep's ten subfolders as subtrees.
        // Both answer once the reader waits for Wide, Wide a round trip later than Deep, so the
        // subtrees are ready to start while the reader waits.
        let subtrees = Mutex(0)
        // Set once the reader has the mounted folder (which it may have waited for too).
        let openingWide = Mutex<DropboxFilesystem?>(nil)
        @Sendable func untilAReaderWaits() {
            let deadline = Date().addingTimeInterval(10)
            while openingWide.withLock({ ($0?.state.withLock { $0.feed.readersWaitingForAFolder } ?? 0) == 0 }),
                  Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        }
        dropbox.setPathGate { path, recursive in
            if recursive { subtrees.withLock { $0 += 1 } }
            switch path.lowercased() {
            case "/deep": untilAReaderWaits()
            case "/wide": untilAReaderWaits(); Thread.sleep(forTimeInterval: 0.3)
            default: break
            }
        }
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        let wide = try fs.lookup(parent: .root, name: "Wide")
        openingWide.withLock { $0 = fs }
        let handle = try fs.openDirectory(wide.inode)
        #expect(subtrees.withLock { $0 } == 0, "no subtree listing started while the reader waited")
        let first = try fs.readDirectory(handle, from: 0, limit: 60)
        Thread.sleep(forTimeInterval: 0.2)
        #expect(subtrees.withLock { $0 } == 0, "nor while it reads the folder")
        let entries = try fs.readDirectory(handle, from: first.last!.offset)
        #expect(entries.count == 122 - 60)
        #expect(try fs.readDirectory(handle, from: entries.last!.offset).isEmpty)
        #expect(eventually { subtrees.withLock { $0 } == 10 }, "read to the end: the subtrees go on")
        fs.releaseDirectory(handle)
        #expect(eventually { fs.isFeedLive })
        #expect(try visible(fs) == served(dropbox))
    }

    @Test func foldersReadersListedDuringTheFirstListingAreInvalidatedWhenItEnds() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A", "B", "C"], to: dropbox)
        let hold = DispatchSemaphore(value: 0)
        let started = Mutex(0)
        // Two listings at once, both held: the third subtree waits its turn.
        dropbox.setGates(listing: nil, recursive: {
            if started.withLock({ $0 += 1; return $0 }) <= 2 { hold.wait() }
        })
        let invalidated = Mutex<[KernelInvalidation]>([])
        let fs = makeFS(dropbox, concurrency: 2)
        fs.onInvalidation { batch in invalidated.withLock { $0 += batch } }
        defer { fs.stopChangeFeed(); hold.signal(); hold.signal() }
        fs.startChangeFeed()
        #expect(eventually { started.withLock { $0 } == 2 })
        // C is not under way: a reader lists C and C/sub itself, and the kernel may keep them.
        let c = try fs.lookup(parent: .root, name: "C")
        let sub = try fs.lookup(parent: c.inode, name: "sub")
        #expect(try fs.lookup(parent: sub.inode, name: "f.txt").size == 1)
        // Meanwhile a file lands in C/sub; the subtree listing adds it without telling the kernel.
        dropbox.addFile("/C/sub/g.txt", [2])
        #expect(invalidated.withLock { $0 }.isEmpty)
        hold.signal()
        hold.signal()
        // The feed goes live just before the fill tells the kernel.
        #expect(eventually { fs.isFeedLive })
        let told = eventually {
            let sent = invalidated.withLock { $0 }
            return sent.contains(.inode(c.inode)) && sent.contains(.inode(sub.inode))
        }
        #expect(told, "the kernel drops its copies of what readers listed: \(invalidated.withLock { $0 })")
        #expect(try fs.lookup(parent: sub.inode, name: "g.txt").size == 1)
    }

    @Test func aFolderAReaderListedBeforeTheCursorIsListedAgainSoADeletionMeanwhileShows() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A"], to: dropbox)
        dropbox.addFile("/gone.txt", [1])
        let cursor = CursorHold(dropbox)
        let invalidated = Mutex<[KernelInvalidation]>([])
        let fs = makeFS(dropbox)
        fs.onInvalidation { batch in invalidated.withLock { $0 += batch } }
        defer { fs.stopChangeFeed(); cursor.release() }
        fs.startChangeFeed()
        #expect(cursor.waitUntilHeld())
        // While the cursor is being taken, a reader lists the mounted folder; then the file goes.
        #expect(try fs.lookup(parent: .root, name: "gone.txt").size == 1)
        dropbox.remove("/gone.txt")
        clock.advance(by: 1)   // the cursor is taken after that listing
        cursor.release()
        // The deletion came before the cursor, so the feed never reports it; the fill's own
        // listing does not show the file, but only adds and updates.
        // The feed goes live before that listing again is in.
        #expect(eventually { fs.isFeedLive })
        #expect(eventually { invalidated.withLock { $0 }.containsRemoval(of: "gone.txt", in: .root) })
        #expect(throws: FSError.notFound) { try fs.lookup(parent: .root, name: "gone.txt") }
    }

    @Test func aFolderWhoseListingAgainFailsKeepsItsAnswerOfflineAndIsListedWhenDropboxAnswers() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A"], to: dropbox)
        dropbox.addFile("/top.txt", [1])
        let cursor = CursorHold(dropbox)
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed(); cursor.release() }
        fs.startChangeFeed()
        #expect(cursor.waitUntilHeld())
        #expect(eventually { (try? fs.lookup(parent: .root, name: "A")) != nil })
        // Dropbox goes out of reach as the mounted folder is listed again after the fill.
        dropbox.setPathGate { path, recursive in
            if path.isEmpty, !recursive { dropbox.fail(with: ReachabilityTests.refused) }
        }
        cursor.release()
        #expect(eventually(within: 10) { fs.syncProgress.offline })
        dropbox.setPathGate(nil)
        let names = { () throws -> [String] in
            let handle = try fs.openDirectory(.root)
            defer { fs.releaseDirectory(handle) }
            return try fs.readDirectory(handle, from: 2).map(\.name).sorted()
        }
        #expect(try names() == ["A", "top.txt"], "offline, the folder keeps the answer it had")
        // Gone while out of reach, and never reported: only listing the folder again shows it.
        dropbox.silentlyRemove("/top.txt")
        dropbox.fail(with: nil)
        #expect(eventually(within: 10) { !fs.syncProgress.offline && fs.isFeedLive })
        #expect(try names() == ["A"], "the folder is listed again once Dropbox answers")
    }

    @Test func whatChangesAtTheTopBetweenTheTopListingAndTheCursorShowsWhenTheFillEnds() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        addTopFolders(["A", "B"], to: dropbox)
        dropbox.addFile("/top.txt", [1])
        let cursor = CursorHold(dropbox)
        let fs = makeFS(dropbox)
        defer { fs.stopChangeFeed(); cursor.release() }
        fs.startChangeFeed()
        #expect(cursor.waitUntilHeld())
        // The mounted folder's own listing runs beside the cursor and is in before it is taken.
        #expect(eventually { (try? fs.lookup(parent: .root, name: "A")) != nil })
        dropbox.addFolder("/New")
        dropbox.addFile("/New/n.txt", [7, 7])
        dropbox.remove("/B")
        dropbox.addFile("/top.txt", [1, 2, 3])
        cursor.release()
        // None of it comes through the feed (it is older than the cursor): the mounted folder is
        // listed again when the fill ends.
        #expect(eventually { fs.isFeedLive })
        #expect(eventually { (try? fs.lookup(parent: .root, name: "New")) != nil })
        #expect(try visible(fs) == served(dropbox))
    }

    @Test func aListingThatFailedPartWayIsReplacedNotAddedTo() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        dropbox.addFolder("/A")
        dropbox.addFile("/A/x.txt", [1])
        dropbox.addFolder("/B")
        dropbox.addFile("/B/y.txt", [2])
        let subtrees = Mutex(0)
        // The second subtree listing fails: one subtree is in the tree, the fill is not.
        dropbox.setGates(listing: nil, recursive: {
            if subtrees.withLock({ $0 += 1; return $0 }) == 2 { dropbox.fail(with: .server(status: 503, body: "")) }
        })
        let fs = makeFS(dropbox, concurrency: 2)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { subtrees.withLock { $0 } >= 2 })
        // Gone before the next attempt, and never reported: that attempt's cursor is newer.
        dropbox.setGates(listing: nil, recursive: nil)
        dropbox.silentlyRemove("/A/x.txt")
        dropbox.silentlyRemove("/B/y.txt")
        dropbox.fail(with: nil)
        #expect(eventually(within: 10) { fs.isFeedLive })
        #expect(try visible(fs) == served(dropbox), "what the failed attempt had applied is dropped")
    }

    @Test(arguments: 0..<40)
    func randomChangesDuringTheListingAreNeitherLostNorUndone(seed: Int) throws {
        var rng = SeededGenerator(seed: UInt64(seed) &* 0x9E37_79B9 &+ 7)
        let dropbox = FakeDropbox(pageSize: 7)
        for f in 0..<6 {
            dropbox.addFolder("/D\(f)")
            for i in 0..<Int.random(in: 3...15, using: &rng) { dropbox.addFile("/D\(f)/f\(i).bin", [UInt8(i)]) }
            if Bool.random(using: &rng) {
                dropbox.addFolder("/D\(f)/sub")
                dropbox.addFile("/D\(f)/sub/x.bin", [1, 2])
            }
        }
        let changes = Mutex(rng)
        // Each listing starts after some random changes anywhere in the tree.
        let change: @Sendable () -> Void = {
            changes.withLock { rng in
                for _ in 0..<Int.random(in: 0...3, using: &rng) { Self.randomChange(dropbox, &rng) }
            }
        }
        dropbox.setGates(listing: change, recursive: change)
        defer { dropbox.setGates(listing: nil, recursive: nil) }
        let fs = makeFS(dropbox, concurrency: 3)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive })
        dropbox.setGates(listing: nil, recursive: nil)
        // After the listing, the feed replays what changed since its cursor.
        #expect(eventually(within: 10) { (try? visible(fs)) == served(dropbox) }, "seed \(seed)")
    }

    /// Creates, rewrites, deletes or renames a file, or creates, deletes or replaces a folder.
    static func randomChange(_ dropbox: FakeDropbox, _ rng: inout SeededGenerator) {
        let folders = dropbox.items.filter { $0.value.isFolder }.map(\.value.displayPath).sorted()
        let files = dropbox.items.filter { !$0.value.isFolder }.map(\.value.displayPath).sorted()
        let n = Int.random(in: 0..<1000, using: &rng)
        switch Int.random(in: 0..<7, using: &rng) {
        case 0 where !folders.isEmpty:
            dropbox.addFile(folders.randomElement(using: &rng)! + "/new\(n).bin", [UInt8(n % 256)])
        case 1 where !files.isEmpty:
            dropbox.addFile(files.randomElement(using: &rng)!, Array(repeating: 7, count: n % 9 + 1))
        case 2 where !files.isEmpty:
            dropbox.remove(files.randomElement(using: &rng)!)
        case 3 where !files.isEmpty:
            let from = files.randomElement(using: &rng)!
            let content = dropbox.items[from.lowercased()]?.content ?? []
            dropbox.remove(from)
            dropbox.addFile(from + ".moved", content)
        case 4:
            dropbox.addFolder("/N\(n)")
            dropbox.addFile("/N\(n)/inside.bin", [3])
        case 5 where folders.count > 1:
            dropbox.remove(folders.randomElement(using: &rng)!)
        case 6 where !folders.isEmpty:
            let folder = folders.randomElement(using: &rng)!
            dropbox.remove(folder)
            dropbox.addFile(folder, [4, 4])   // a folder replaced by a file
        default:
            break
        }
    }
}
