// ListingPages: the next page is asked for once the cursor before it is known, at most two pages
// ahead of the caller, failures come in their page's turn, and nothing more is asked after stop.

import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

/// A listing of `pageCount` pages (`list_folder` gives page 0, `continue` from cursor "cN" gives
/// page N), recording every call; `failing` pages answer an error instead.
private final class ScriptedListing: DropboxAPI {
    let pageCount: Int
    let failing: Set<Int>
    /// Reads the cursor early (as DropboxHTTPClient does) unless false.
    let early: Bool
    let asked = Mutex<[Int]>([])

    init(pageCount: Int, failing: Set<Int> = [], early: Bool = true) {
        self.pageCount = pageCount
        self.failing = failing
        self.early = early
    }

    func page(_ index: Int, cursorKnown: (String, Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        asked.withLock { $0.append(index) }
        if failing.contains(index) { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
        let hasMore = index + 1 < pageCount
        if early { cursorKnown("c\(index + 1)", hasMore) }
        Thread.sleep(forTimeInterval: 0.01)    // decoding
        let entry = Metadata.folder(FolderMetadata(name: "f\(index)", id: "id:\(index)", pathLower: "/f\(index)", pathDisplay: "/f\(index)"))
        let page = ListFolderPage(entries: [entry], cursor: "c\(index + 1)", hasMore: hasMore)
        if !early { cursorKnown(page.cursor, page.hasMore) }
        return page
    }

    func listFolder(path: String, recursive: Bool, limit: Int?,
                    cursorKnown: (String, Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        try page(0, cursorKnown: cursorKnown)
    }

    func listFolderContinue(cursor: String, cursorKnown: (String, Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        try page(Int(cursor.dropFirst())!, cursorKnown: cursorKnown)
    }

    func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        try listFolder(path: path, recursive: recursive, limit: limit) { _, _ in }
    }
    func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try listFolderContinue(cursor: cursor) { _, _ in }
    }
    func currentAccount() throws(DropboxError) -> Account { throw .malformedResponse("unused") }
    func spaceUsage() throws(DropboxError) -> SpaceUsage { throw .malformedResponse("unused") }
    func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String { throw .malformedResponse("unused") }
    func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult { throw .malformedResponse("unused") }
    func metadata(path: String) throws(DropboxError) -> Metadata { throw .malformedResponse("unused") }
    func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] { throw .malformedResponse("unused") }
}

@Suite("Listing pages")
struct ListingPagesTests {
    @Test(arguments: [true, false])
    func everyPageComesOnceInOrderThenNil(early: Bool) throws {
        let api = ScriptedListing(pageCount: 7, early: early)
        let pages = ListingPages(api, path: "/x", recursive: false, limit: 2000)
        var names: [String] = []
        while let page = try pages.next() { names += page.entries.map(\.name) }
        #expect(names == (0..<7).map { "f\($0)" })
        #expect(try pages.next() == nil)
        #expect(api.asked.withLock { $0 } == Array(0..<7), "each page asked for once")
    }

    @Test func theNextPagesAreAskedForWhileTheCallerWorksButNoMoreThanTwoAhead() throws {
        let api = ScriptedListing(pageCount: 10)
        let pages = ListingPages(api, path: "/x", recursive: false, limit: 2000)
        _ = try pages.next()    // the caller holds page 0 and does nothing more
        #expect(eventually { api.asked.withLock { $0 } == [0, 1, 2] }, "pages 1 and 2 asked for while page 0 is worked on")
        Thread.sleep(forTimeInterval: 0.2)
        #expect(api.asked.withLock { $0 } == [0, 1, 2], "never more than two ahead")
        _ = try pages.next()
        #expect(eventually { api.asked.withLock { $0.last } == 3 })
        var rest = 0
        while try pages.next() != nil { rest += 1 }
        #expect(rest == 8)
    }

    @Test func aFailedCallIsThrownInItsPagesTurnAndEndsTheListing() throws {
        let api = ScriptedListing(pageCount: 5, failing: [2])
        let pages = ListingPages(api, path: "/x", recursive: false, limit: 2000)
        #expect(try pages.next()?.entries.first?.name == "f0")
        #expect(try pages.next()?.entries.first?.name == "f1")
        #expect(throws: DropboxError.self) { try pages.next() }
        #expect(try pages.next() == nil)
        Thread.sleep(forTimeInterval: 0.1)
        #expect(!api.asked.withLock { $0 }.contains(3), "nothing is asked for after the failed page")
    }

    @Test func afterStopNothingMoreIsAskedFor() throws {
        let api = ScriptedListing(pageCount: 50)
        let pages = ListingPages(api, path: "/x", recursive: false, limit: 2000)
        _ = try pages.next()
        #expect(eventually { api.asked.withLock { $0.count } == 3 })
        pages.stop()
        _ = try pages.next()
        Thread.sleep(forTimeInterval: 0.2)
        #expect(api.asked.withLock { $0.count } == 3)
        #expect(try pages.next() == nil)
    }

    @Test func continuingFromACursorStartsWithContinue() throws {
        let api = ScriptedListing(pageCount: 4)
        let pages = ListingPages(api, continuingFrom: "c2")
        var names: [String] = []
        while let page = try pages.next() { names += page.entries.map(\.name) }
        #expect(names == ["f2", "f3"])
    }
}
