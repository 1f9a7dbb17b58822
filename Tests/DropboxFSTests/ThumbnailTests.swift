// The thumbnailer against the fake Dropbox and an in-memory store: which files are asked for, how
// many calls that takes, when they are asked again, and what a broken store does.

import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

/// Thumbnails kept in memory, by path and flavor, with the rev they were made of.
final class MemoryThumbnailStore: ThumbnailStore {
    struct Entry: Equatable { var rev: String; var modified: Int64; var png: [UInt8] }
    let entries = Mutex<[String: Entry]>([:])
    let unwritable = Mutex(false)
    let full = Mutex(false)

    func key(_ target: ThumbnailTarget, _ flavor: ThumbnailFlavor) -> String { flavor.rawValue + ":" + target.relativePath }

    func hasCurrent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        entries.withLock { e in flavors.allSatisfy { e[key(target, $0)]?.modified == target.modified && e[key(target, $0)]?.rev == target.rev } }
    }

    func isPresent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        entries.withLock { e in flavors.allSatisfy { e[key(target, $0)] != nil } }
    }

    /// What clearing the cache by hand does.
    func removeAll() { entries.withLock { $0.removeAll() } }

    func save(_ png: [UInt8], flavor: ThumbnailFlavor, for target: ThumbnailTarget) throws(ThumbnailStoreError) {
        if unwritable.withLock({ $0 }) { throw .unwritable("read-only test store") }
        if full.withLock({ $0 }) { throw .full("No space left on device") }
        entries.withLock { $0[key(target, flavor)] = Entry(rev: target.rev, modified: target.modified, png: png) }
    }

    var count: Int { entries.withLock { $0.count } }
    func entry(_ path: String, _ flavor: ThumbnailFlavor) -> Entry? { entries.withLock { $0[flavor.rawValue + ":" + path] } }
}

/// A store that runs `beforeFirstCheck` once, inside its first `hasCurrent`: lets a test act
/// while the thumbnailer has looked for a fetch in flight but not yet claimed the files.
final class StoreWithFirstCheckHook: ThumbnailStore {
    struct Hook { var run: (@Sendable () -> Void)? }
    let base = MemoryThumbnailStore()
    let beforeFirstCheck: Mutex<Hook>

    init(beforeFirstCheck: @escaping @Sendable () -> Void) { self.beforeFirstCheck = Mutex(Hook(run: beforeFirstCheck)) }

    func hasCurrent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        beforeFirstCheck.withLock { hook in defer { hook.run = nil }; return hook.run }?()
        return base.hasCurrent(target, flavors: flavors)
    }

    func isPresent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        base.isPresent(target, flavors: flavors)
    }

    func save(_ png: [UInt8], flavor: ThumbnailFlavor, for target: ThumbnailTarget) throws(ThumbnailStoreError) {
        try base.save(png, flavor: flavor, for: target)
    }
}

@Suite("Thumbnails")
struct ThumbnailTests {
    let dropbox = FakeDropbox()
    let clock = ManualClock()
    let store = MemoryThumbnailStore()
    let log = LogRecorder()

    func makeFS(ttl: Int = 60) -> DropboxFilesystem {
        DropboxFilesystem(api: dropbox, options: FilesystemOptions(metadataTTL: .seconds(ttl)), folderModified: 0,
                          now: clock.now, logger: log.logger(level: .info), thumbnails: store)
    }

    func photos(_ count: Int, in folder: String = "/Photos") {
        dropbox.addFolder(folder)
        for i in 0..<count { dropbox.addFile("\(folder)/IMG_\(i).jpg", Array("IMG \(i)".utf8), modified: 1_700_000_000 + Int64(i)) }
    }

    func openFolder(_ fs: DropboxFilesystem, _ name: String) throws {
        let folder = try fs.lookup(parent: .root, name: name).inode
        fs.releaseDirectory(try fs.openDirectory(folder))
    }

    @Test func aFolderOfImagesCostsOneCallPer25ImagesAndFlavorAndNoDownload() throws {
        photos(60)
        dropbox.addFile("/Photos/notes.txt", Array("not an image".utf8))
        dropbox.addFile("/Photos/movie.mp4", Array("IMG but not by name".utf8))
        let fs = makeFS()
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailCalls == 3 * 3, "ceil(60/25) calls for each of 3 flavors")
        #expect(dropbox.counters.thumbnailEntries == 60 * 3, "only the images are asked for")
        #expect(dropbox.counters.download == 0)
        #expect(store.count == 60 * 3)
        let entry = try #require(store.entry("/Photos/IMG_7.jpg", .large))
        #expect(entry.modified == 1_700_000_007)
        #expect(String(decoding: entry.png, as: UTF8.self).contains("w256h256 strict"))
        #expect(String(decoding: try #require(store.entry("/Photos/IMG_7.jpg", .xLarge)).png, as: UTF8.self)
            .contains("w480h320 bestfit"))

        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailCalls == 9, "a second listing asks for nothing")
    }

    @Test func thumbnailsRemovedUnderARunningMountAreFetchedAgainWhenTheFolderIsOpened() throws {
        photos(3)
        let fs = makeFS()
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailEntries == 3 * 3)
        store.removeAll()   // rm -r ~/.cache/thumbnails, or a housekeeping tool
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailEntries == 2 * 3 * 3, "every removed entry is asked for again")
        #expect(store.count == 3 * 3)
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailEntries == 2 * 3 * 3, "and only once")
    }

    @Test func foldersWithoutImagesCostNothing() throws {
        dropbox.addFolder("/Docs")
        dropbox.addFile("/Docs/a.txt", Array("text".utf8))
        dropbox.addFile("/Docs/big.jpg", Array("IMG".utf8) + [UInt8](repeating: 0, count: 21 << 20))   // over 20 MB
        let fs = makeFS()
        try openFolder(fs, "Docs")
        #expect(dropbox.counters.thumbnailCalls == 0)
    }

    @Test func anImageDropboxCannotThumbnailIsAskedOncePerRev() throws {
        dropbox.addFolder("/Photos")
        dropbox.addFile("/Photos/broken.jpg", Array("this is not a JPEG".utf8))
        let fs = makeFS(ttl: 1)
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailEntries == 3)
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailEntries == 3, "not asked again for the same rev")
        dropbox.addFile("/Photos/broken.jpg", Array("IMG now it is one".utf8))
        clock.advance(by: 2)
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailEntries == 6, "a new rev is asked once")
        #expect(store.count == 3)
    }

    @Test func filesRewrittenManyTimesAreRememberedOnceEach() throws {
        photos(1)
        dropbox.addFile("/Photos/broken.jpg", Array("this is not a JPEG".utf8))
        let fs = makeFS(ttl: 1)
        for rewrite in 1...5 {
            try openFolder(fs, "Photos")
            dropbox.addFile("/Photos/IMG_0.jpg", Array("IMG \(rewrite)".utf8), modified: 1_800_000_000 + Int64(rewrite))
            dropbox.addFile("/Photos/broken.jpg", Array("still not a JPEG \(rewrite)".utf8))
            clock.advance(by: 2)
        }
        try openFolder(fs, "Photos")
        #expect(store.entry("/Photos/IMG_0.jpg", .normal)?.modified == 1_800_000_005, "the last rev is thumbnailed")
        #expect(dropbox.counters.thumbnailEntries == 6 * 6, "each rev of each file asked once, in three flavors")
        // Before: a path and rev for every rev thumbnailed, an id and rev for every rev refused.
        let remembered = try #require(fs.thumbnailer).remembered
        #expect(remembered.thumbnailed == 1 && remembered.unthumbnailable == 1, "\(remembered)")
    }

    @Test func thumbnailsAlreadyInTheStoreAreNotFetched() throws {
        photos(3)
        // What an earlier mount left: every flavor current for every image.
        let earlier = DropboxFilesystem(api: dropbox, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        let listed = try earlier.lookup(parent: .root, name: "Photos").inode
        earlier.releaseDirectory(try earlier.openDirectory(listed))
        let targets = earlier.state.withLock { state in
            state.tree.children(of: Slot(listed)!).compactMap { earlier.thumbnailTarget($0, in: state.tree) }
        }
        #expect(targets.count == 3)
        for target in targets {
            for flavor in ThumbnailFlavor.allCases { try store.save([1], flavor: flavor, for: target) }
        }
        let fs = makeFS()
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailCalls == 0)
    }

    @Test func aRewrittenImageGetsNewThumbnailsThroughTheChangeFeed() throws {
        photos(2)
        let fs = makeFS()
        fs.startChangeFeed(longpollTimeout: 30)
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        try openFolder(fs, "Photos")
        let before = try #require(store.entry("/Photos/IMG_1.jpg", .normal))
        dropbox.addFile("/Photos/IMG_1.jpg", Array("IMG rewritten".utf8), modified: 1_800_000_000)
        #expect(eventually { store.entry("/Photos/IMG_1.jpg", .normal)?.modified == 1_800_000_000 },
                "the feed's new rev is thumbnailed without opening the folder again")
        #expect(store.entry("/Photos/IMG_1.jpg", .normal)?.rev != before.rev)
        #expect(eventually { store.entry("/Photos/IMG_1.jpg", .xLarge)?.modified == 1_800_000_000 })
        #expect(store.entry("/Photos/IMG_0.jpg", .normal)?.rev == store.entry("/Photos/IMG_0.jpg", .large)?.rev)
    }

    /// Opens /Photos, then /More, with the store failing as `failing` says; returns the mount and
    /// the thumbnail calls /Photos cost.
    func openTwoFolders(photos count: Int, storeFailing failing: borrowing Mutex<Bool>) throws -> (DropboxFilesystem, Int) {
        photos(count)
        photos(5, in: "/More")
        failing.withLock { $0 = true }
        let fs = makeFS()
        try openFolder(fs, "Photos")
        let calls = dropbox.counters.thumbnailCalls
        try openFolder(fs, "More")
        return (fs, calls)
    }

    @Test func anUnwritableCacheIsOneLineAndNoMoreCalls() throws {
        let (fs, calls) = try openTwoFolders(photos: 30, storeFailing: store.unwritable)
        #expect(dropbox.counters.thumbnailCalls == calls, "thumbnails are off once the cache cannot be written")
        #expect(log.at(.warning).filter { $0.message.contains("cannot write thumbnails") }.count == 1)
        #expect(try fs.readDirectory(try fs.openDirectory(try fs.lookup(parent: .root, name: "More").inode), from: 0)
            .count == 7, "the listing itself is unaffected")
    }

    @Test func aFullDiskPausesThumbnailsForAWhileNotForTheMountsLife() throws {
        let (fs, calls) = try openTwoFolders(photos: 3, storeFailing: store.full)
        #expect(calls > 0)
        #expect(dropbox.counters.thumbnailCalls == calls, "paused while the disk is full")
        #expect(log.at(.warning).filter { $0.message.contains("disk is full") }.count == 1)
        store.full.withLock { $0 = false }
        clock.advance(by: Thumbnailer.fullDiskPause + 1)
        try openFolder(fs, "More")
        #expect(dropbox.counters.thumbnailCalls > calls, "asked again once the pause is over")
        #expect(store.entry("/More/IMG_2.jpg", .normal) != nil)
    }

    @Test func aFailedCallLeavesTheListingAloneAndIsTriedAgainNextTime() throws {
        photos(4)
        dropbox.failThumbnails(with: .transport(code: 7, message: "connection refused"))
        let fs = makeFS()
        let folder = try fs.lookup(parent: .root, name: "Photos").inode
        let handle = try fs.openDirectory(folder)
        #expect(try fs.readDirectory(handle, from: 0).count == 6, "the listing is answered all the same")
        #expect(store.count == 0)
        dropbox.failThumbnails(with: nil)
        fs.releaseDirectory(try fs.openDirectory(folder))
        #expect(store.count == 12, "a call that failed is not a verdict on the files")
    }

    @Test func aCallerWaitsForTheFetchAnotherCallerClaimedWhileItCheckedTheStore() throws {
        photos(1)
        let lister = DropboxFilesystem(api: dropbox, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        let listed = try lister.lookup(parent: .root, name: "Photos").inode
        lister.releaseDirectory(try lister.openDirectory(listed))
        let target = try #require(lister.state.withLock { state in
            state.tree.children(of: Slot(listed)!).compactMap { lister.thumbnailTarget($0, in: state.tree) }
        }.first)
        var options = ThumbnailOptions()
        options.flavors = [.normal]
        // The other caller's batch call is held until the test lets it answer.
        let otherFetchHeld = DispatchSemaphore(value: 0), letItAnswer = DispatchSemaphore(value: 0)
        dropbox.setThumbnailGate {
            otherFetchHeld.signal()
            _ = letItAnswer.wait(timeout: .now() + 20)
        }
        let thumbnailer = Mutex<Thumbnailer?>(nil)
        // While the first caller checks the store, the other caller claims the image.
        let store = StoreWithFirstCheckHook {
            let other = thumbnailer.withLock { $0 }!
            Thread.detachNewThread { other.prepare([target]) }
            _ = otherFetchHeld.wait(timeout: .now() + 20)
        }
        let made = Thumbnailer(api: dropbox, store: store, options: options, logger: log.logger(level: .info))
        thumbnailer.withLock { $0 = made }
        let returned = DispatchSemaphore(value: 0)
        let hadThumbnailOnReturn = Mutex(false)
        Thread.detachNewThread {
            made.prepare([target])
            hadThumbnailOnReturn.withLock { $0 = store.base.hasCurrent(target, flavors: [.normal]) }
            returned.signal()
        }
        // Time for a caller that does not wait to come back; one that waits cannot, whatever the time.
        let cameBackAtOnce = returned.wait(timeout: .now() + 0.5) == .success
        letItAnswer.signal()
        if !cameBackAtOnce { #expect(returned.wait(timeout: .now() + 20) == .success, "the first caller came back") }
        #expect(hadThumbnailOnReturn.withLock { $0 }, "opening the folder waited for the other caller's fetch")
        #expect(dropbox.counters.thumbnailCalls == 1, "one fetch for both callers")
    }

    @Test func noThumbnailCallWithoutAStore() throws {
        photos(10)
        let fs = DropboxFilesystem(api: dropbox, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        try openFolder(fs, "Photos")
        #expect(dropbox.counters.thumbnailCalls == 0)
    }
}
