import DropboxClient
import Foundation
import Synchronization

/// An in-memory Dropbox for core tests: a tree of files and folders, paged listings, ranged
/// downloads by path or rev, call counters, and switches to inject failures.
final class FakeDropbox: DropboxAPI {
    struct Item {
        var displayPath: String
        var isFolder: Bool
        var content: [UInt8] = []
        var rev: String = "0123456789"
        var modified: Int64 = 1_700_000_000
        var downloadable = true
    }

    struct Counters: Equatable {
        var listFolder = 0
        var listContinue = 0
        var metadata = 0
        var download = 0
        var spaceUsage = 0
    }

    private struct Contents {
        var items: [String: Item] = [:]   // keyed by lowercased path
        var counters = Counters()
        var failure: DropboxError?
        var revCounter = 0x10_0000_0000
        var rawEntries: [String: [Metadata]] = [:]   // hostile listings injected as-is
    }

    private let contents = Mutex(Contents())
    let pageSize: Int
    /// Called inside `listFolder`, before answering: lets a test hold a listing in flight.
    let listingGate: (@Sendable () -> Void)?

    init(pageSize: Int = 100, listingGate: (@Sendable () -> Void)? = nil) {
        self.pageSize = pageSize
        self.listingGate = listingGate
    }

    var counters: Counters { contents.withLock { $0.counters } }

    func fail(with error: DropboxError?) { contents.withLock { $0.failure = error } }

    func addFolder(_ path: String) {
        contents.withLock { $0.items[path.lowercased()] = Item(displayPath: path, isFolder: true) }
    }

    /// Adds or replaces a file; every write gets a new rev, as Dropbox gives.
    func addFile(_ path: String, _ content: [UInt8], modified: Int64 = 1_700_000_000, downloadable: Bool = true) {
        contents.withLock { c in
            c.revCounter += 1
            c.items[path.lowercased()] = Item(displayPath: path, isFolder: false, content: content,
                                              rev: String(c.revCounter, radix: 16), modified: modified,
                                              downloadable: downloadable)
        }
    }

    func remove(_ path: String) {
        contents.withLock { c in
            let key = path.lowercased()
            c.items = c.items.filter { $0.key != key && !$0.key.hasPrefix(key + "/") }
        }
    }

    /// Makes the listing of `folder` return exactly these entries.
    func injectListing(_ folder: String, _ entries: [Metadata]) {
        contents.withLock { $0.rawEntries[folder.lowercased()] = entries }
    }

    private func metadata(_ item: Item) -> Metadata {
        let name = String(item.displayPath.split(separator: "/").last ?? "")
        let lower = item.displayPath.lowercased()
        if item.isFolder {
            return .folder(FolderMetadata(name: name, id: "id:" + lower, pathLower: lower, pathDisplay: item.displayPath))
        }
        return .file(FileMetadata(name: name, id: "id:" + lower, pathLower: lower, pathDisplay: item.displayPath,
                                  clientModified: item.modified, serverModified: item.modified, rev: item.rev,
                                  size: UInt64(item.content.count), isDownloadable: item.downloadable,
                                  contentHash: String(repeating: "a", count: 64)))
    }

    private func checkFailure() throws(DropboxError) {
        if let failure = contents.withLock({ $0.failure }) { throw failure }
    }

    func currentAccount() throws(DropboxError) -> Account {
        try checkFailure()
        return Account(accountID: "dbid:fake", displayName: "Fake", email: "fake@example.com",
                       rootNamespaceID: "1", homeNamespaceID: "1")
    }

    func spaceUsage() throws(DropboxError) -> SpaceUsage {
        try checkFailure()
        contents.withLock { $0.counters.spaceUsage += 1 }
        return SpaceUsage(used: 1 << 30, allocated: 2 << 30)
    }

    func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        listingGate?()
        try checkFailure()
        let key = path.lowercased()
        let entries = try contents.withLock { c throws(DropboxError) -> [Metadata] in
            c.counters.listFolder += 1
            if let raw = c.rawEntries[key] { return raw }
            if !key.isEmpty {
                guard let folder = c.items[key] else { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
                guard folder.isFolder else { throw .route(tags: ["path", "not_folder"], summary: "path/not_folder/") }
            }
            return c.items.values
                .filter { item in
                    let lower = item.displayPath.lowercased()
                    return lower.hasPrefix(key + "/") && !lower.dropFirst(key.count + 1).contains("/")
                }
                .sorted { $0.displayPath < $1.displayPath }
                .map(metadata)
        }
        return page(entries, from: 0)
    }

    private func page(_ entries: [Metadata], from start: Int) -> ListFolderPage {
        let end = min(entries.count, start + pageSize)
        let cursorID = UUID().uuidString
        pendingPages.withLock { $0[cursorID] = (entries, end) }
        return ListFolderPage(entries: Array(entries[start..<end]), cursor: cursorID, hasMore: end < entries.count)
    }

    private let pendingPages = Mutex<[String: ([Metadata], Int)]>([:])

    func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try checkFailure()
        contents.withLock { $0.counters.listContinue += 1 }
        guard let (entries, next) = pendingPages.withLock({ $0[cursor] }) else {
            throw .route(tags: ["reset"], summary: "reset/")
        }
        return page(entries, from: next)
    }

    func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String { "latest" }

    func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult {
        LongpollResult(changes: false, backoff: nil)
    }

    func metadata(path: String) throws(DropboxError) -> Metadata {
        try checkFailure()
        return try contents.withLock { c throws(DropboxError) -> Metadata in
            c.counters.metadata += 1
            guard let item = c.items[path.lowercased()] else { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
            return metadata(item)
        }
    }

    func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        try checkFailure()
        return try contents.withLock { c throws(DropboxError) -> [UInt8] in
            c.counters.download += 1
            let item: Item?
            if path.hasPrefix("rev:") {
                let rev = String(path.dropFirst(4))
                item = c.items.values.first { $0.rev == rev && !$0.isFolder }
            } else {
                item = c.items[path.lowercased()]
            }
            guard let item else { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
            guard !item.isFolder else { throw .route(tags: ["path", "not_file"], summary: "path/not_file/") }
            let size = UInt64(item.content.count)
            guard range.lowerBound < size else { return [] }
            return Array(item.content[Int(range.lowerBound)..<Int(min(range.upperBound, size))])
        }
    }
}

/// A clock a test moves by hand.
final class ManualClock: Sendable {
    private let seconds = Mutex(0.0)
    func advance(by delta: Double) { seconds.withLock { $0 += delta } }
    var now: @Sendable () -> Double { { [self] in seconds.withLock { $0 } } }
}
