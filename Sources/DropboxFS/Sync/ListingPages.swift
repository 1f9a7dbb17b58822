// The pages of one listing, with the next page asked for as soon as the cursor before it is known.
//
// Dropbox hands a folder's entries out one page at a time, each page naming the cursor of the
// next, so a listing is a chain of calls nobody can run side by side. What a client can change is
// what lies between two calls: read the page's cursor, decode its entries, apply them. Done one
// after the other, that work adds to every round trip; here the next call goes out once the
// cursor is read (`DropboxAPI.listFolder(path:recursive:limit:cursorKnown:)`: DropboxHTTPClient
// reads it with a scan of the page's text before decoding the entries), and the page is
// decoded and applied while Dropbox answers the next. A 10,000-file folder is five pages of 2,000;
// each cost 50 ms of round trip plus about 8 ms of decoding before the next call on this project's
// benchmark runner (README, "The first listing at real round trips").
//
// Dropbox still sees one call at a time per listing. At most two pages are asked for ahead of the
// one the caller is working on, so memory stays bounded and a caller that pauses between pages
// (the first listing making way for a reader) holds back further calls.

import DropboxClient
import Foundation

final class ListingPages: @unchecked Sendable {
    private enum Start { case folder(path: String, recursive: Bool, limit: Int?), cursor(String) }

    private let api: any DropboxAPI
    private let start: Start
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var results: [Int: Result<ListFolderPage, DropboxError>] = [:]
    /// Pages handed to the caller: the next one it gets has this index.
    private var taken = 0
    /// Pages asked for: the next call asks for the page with this index.
    private var asked = 0
    /// The cursor of page `asked`, known but held back until the caller catches up.
    private var heldCursor: String?
    private var lastTakenHadMore = true
    private var stopped = false

    /// `files/list_folder` of `path`, then `continue` while Dropbox has more.
    init(_ api: any DropboxAPI, path: String, recursive: Bool, limit: Int?) {
        self.api = api
        self.start = .folder(path: path, recursive: recursive, limit: limit)
    }

    /// `files/list_folder/continue` from `cursor` while Dropbox has more.
    init(_ api: any DropboxAPI, continuingFrom cursor: String) {
        self.api = api
        self.start = .cursor(cursor)
    }

    deinit { stop() }

    /// The next page, or nil once the last one (`has_more` false) was handed over. A failed call
    /// is thrown here, in its page's turn, and ends the listing.
    func next() throws(DropboxError) -> ListFolderPage? {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped, lastTakenHadMore else { return nil }
        if taken == 0 && asked == 0 { ask(0, cursor: nil) }
        while results[taken] == nil && !stopped { condition.wait() }
        if stopped { return nil }
        let result = results.removeValue(forKey: taken)!
        taken += 1
        switch result {
        case .failure(let error):
            stopped = true
            heldCursor = nil
            throw error
        case .success(let page):
            lastTakenHadMore = page.hasMore
            if page.hasMore && asked == taken {
                // Not asked for yet: held back for the caller, or the early cursor was unreadable.
                heldCursor = nil
                ask(taken, cursor: page.cursor)
            } else if let cursor = heldCursor, mayAsk(asked) {
                heldCursor = nil
                ask(asked, cursor: cursor)
            }
            return page
        }
    }

    /// Asks for nothing more; pages already asked for are dropped when they come.
    func stop() {
        condition.lock()
        stopped = true
        heldCursor = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Whether page `index` may be asked for now: two ahead of the page the caller works on at most.
    private func mayAsk(_ index: Int) -> Bool { index <= taken + 1 }

    /// Starts the call for page `index`. Called with the lock held.
    private func ask(_ index: Int, cursor: String?) {
        asked = index + 1
        let api = self.api, start = self.start
        Thread.detachNewThread { [self] in
            let cursorKnown = { (next: String, hasMore: Bool) in self.cursorKnown(after: index, next, hasMore) }
            let result: Result<ListFolderPage, DropboxError>
            do throws(DropboxError) {
                if let cursor {
                    result = .success(try api.listFolderContinue(cursor: cursor, cursorKnown: cursorKnown))
                } else {
                    switch start {
                    case .folder(let path, let recursive, let limit):
                        result = .success(try api.listFolder(path: path, recursive: recursive, limit: limit, cursorKnown: cursorKnown))
                    case .cursor(let first):
                        result = .success(try api.listFolderContinue(cursor: first, cursorKnown: cursorKnown))
                    }
                }
            } catch {
                result = .failure(error)
            }
            condition.lock()
            if !stopped { results[index] = result }
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Page `index` names the cursor of the page after it: ask for that page now, or hold the
    /// cursor until the caller has caught up.
    private func cursorKnown(after index: Int, _ cursor: String, _ hasMore: Bool) {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped, hasMore, asked == index + 1 else { return }
        if mayAsk(index + 1) {
            ask(index + 1, cursor: cursor)
        } else {
            heldCursor = cursor
        }
    }
}
