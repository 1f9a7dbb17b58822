import DropboxClient
import DropboxFS
import Foundation
import Synchronization

/// An in-memory Dropbox for core tests: a tree of files and folders, paged listings, ranged
/// downloads by path or rev, call counters, and switches to inject failures.
public final class FakeDropbox: DropboxAPI {
    public struct Item {
        public var displayPath: String
        public var isFolder: Bool
        public var content: [UInt8] = []
        public var rev: String = "0123456789"
        public var modified: Int64 = 1_700_000_000
        public var downloadable = true
        public var exportAs = "html"
        /// A symbolic link's target (`symlink_info`): its content, as far as downloads go.
        public var symlinkTarget: String?
        /// From the path it was first added at; a move keeps it, as Dropbox keeps an id.
        public var id: String?
    }

    public struct Counters: Equatable {
        public var recursiveListFolder = 0
        public var listFolder = 0
        public var listContinue = 0
        public var metadata = 0
        public var download = 0
        public var spaceUsage = 0
        public var exports = 0
        /// `get_thumbnail_batch` calls, and the entries they asked for.
        public var thumbnailCalls = 0
        public var thumbnailEntries = 0
    }

    private struct Contents {
        var items: [String: Item] = [:]   // keyed by lowercased path
        /// The bytes of revs a later write replaced, by rev: Dropbox keeps a file's earlier revs,
        /// and `rev:` downloads them.
        var formerRevisions: [String: [UInt8]] = [:]
        var counters = Counters()
        var failure: DropboxError?
        var thumbnailFailure: DropboxError?
        var revCounter = 0x10_0000_0000
        var rawEntries: [String: [Metadata]] = [:]   // hostile listings injected as-is
        /// Every change, in order, as `continue` on a feed cursor reports it.
        var journal: [Metadata] = []
        /// Feed cursors of an earlier epoch answer `reset`.
        var epoch = 0
        var longpolls = 0
        /// Every download's range, in order (issue 6).
        var downloadRanges: [Range<UInt64>] = []
        var downloadedBytes: UInt64 = 0
        /// Each entry cuts one coming streamed download after that many bytes.
        var cuts: [Int] = []
        var downloadLatency = 0.0
        var spaceUsed: UInt64 = 1 << 30
        var downloadAttempts = 0
        /// Bytes per second each download gets on its own (0: no limit), as a far server's TCP
        /// window per round trip allows one connection whatever the link could carry.
        var connectionBandwidth = 0.0
        /// Streamed downloads under way now, and the most there have been at once.
        var downloadsInFlight = 0
        var downloadPeak = 0
    }

    private let contents = Mutex(Contents())
    /// Bytes per second all downloads share (0: no limit), and when the link is next free: one
    /// link that chunks of concurrent downloads take turns on, as TCP connections sharing a
    /// bottleneck roughly do.
    private let link = Mutex((bytesPerSecond: 0.0, freeAt: 0.0))
    public let pageSize: Int
    /// Code a test runs inside a call, before it is answered (the setters below say where). Fields
    /// of a struct, not each closure as a `Mutex`'s own argument: that is reabstracted at every
    /// `withLock` and stored back in two more thunks (`Sinks` in DropboxFilesystem.swift).
    private struct Gates {
        var listing: (@Sendable () -> Void)?
        var recursive: (@Sendable () -> Void)?
        var cursor: (@Sendable () -> Void)?
        var path: (@Sendable (_ path: String, _ recursive: Bool) -> Void)?
        var chunk: (@Sendable (_ range: Range<UInt64>, _ sent: Int) -> Void)?
        var thumbnail: (@Sendable () -> Void)?
        var spaceUsage: (@Sendable () -> Void)?
    }
    private let gates: Mutex<Gates>

    /// `listingGate` and `recursiveGate` are called inside `listFolder`, before answering: they
    /// let a test hold a listing in flight, or change the tree while a listing is under way.
    public init(pageSize: Int = 100, listingGate: (@Sendable () -> Void)? = nil,
         recursiveGate: (@Sendable () -> Void)? = nil) {
        self.pageSize = pageSize
        self.gates = Mutex(Gates(listing: listingGate, recursive: recursiveGate))
    }

    public var counters: Counters { contents.withLock { $0.counters } }

    /// Downloads asked for, failed ones included (`counters.download` counts those answered).
    public var downloadAttempts: Int { contents.withLock { $0.downloadAttempts } }

    /// Every file and folder, keyed by lowercased path.
    public var items: [String: Item] { contents.withLock { $0.items } }

    /// Called inside `latestCursor`, before answering: lets a test act while the cursor is taken.
    public func setCursorGate(_ gate: (@Sendable () -> Void)?) {
        gates.withLock { $0.cursor = gate }
    }

    /// Called inside `listFolder` with the folder it lists, after the other gates: lets a test
    /// make one folder's listing take longer than another's.
    public func setPathGate(_ gate: (@Sendable (_ path: String, _ recursive: Bool) -> Void)?) {
        gates.withLock { $0.path = gate }
    }

    /// Called before each chunk a streamed download sends, with the download's range and the
    /// bytes it sent so far: lets a test hold one download in the middle of its body.
    public func setChunkGate(_ gate: (@Sendable (_ range: Range<UInt64>, _ sent: Int) -> Void)?) {
        gates.withLock { $0.chunk = gate }
    }

    /// Called inside `thumbnails`, before answering: lets a test hold a batch call in flight.
    public func setThumbnailGate(_ gate: (@Sendable () -> Void)?) {
        gates.withLock { $0.thumbnail = gate }
    }

    /// Called inside `spaceUsage`, before answering: lets a test hold the call in flight.
    public func setSpaceUsageGate(_ gate: (@Sendable () -> Void)?) {
        gates.withLock { $0.spaceUsage = gate }
    }

    /// What `spaceUsage` says is used (1 GiB unless set).
    public func setSpaceUsed(_ bytes: UInt64) { contents.withLock { $0.spaceUsed = bytes } }

    /// Replaces the gates (see `init`); a gate may change this Dropbox.
    public func setGates(listing: (@Sendable () -> Void)?, recursive: (@Sendable () -> Void)?) {
        gates.withLock { $0.listing = listing; $0.recursive = recursive }
    }

    public func fail(with error: DropboxError?) { contents.withLock { $0.failure = error } }

    /// Makes `thumbnails` alone fail with `error` (nil: answer again).
    public func failThumbnails(with error: DropboxError?) { contents.withLock { $0.thumbnailFailure = error } }

    public func addFolder(_ path: String) {
        contents.withLock { c in
            let item = Item(displayPath: path, isFolder: true)
            c.items[path.lowercased()] = item
            c.journal.append(metadata(item))
        }
    }

    /// Appends raw entries to the change journal, as `continue` will report them.
    public func journal(_ entries: [Metadata]) {
        contents.withLock { $0.journal.append(contentsOf: entries) }
    }

    /// Makes every feed cursor handed out so far answer `reset`.
    public func resetCursors() {
        contents.withLock { $0.epoch += 1 }
    }

    /// Changes the tree without telling the journal (what a reset must discover).
    public func silentlyRemove(_ path: String) {
        contents.withLock { c in
            let key = path.lowercased()
            c.items = c.items.filter { $0.key != key && !$0.key.hasPrefix(key + "/") }
        }
    }

    /// Adds or replaces a file; every write gets a new rev, as Dropbox gives.
    /// A file that is not `downloadable` is a document Dropbox exports as `exportAs`.
    public func addFile(_ path: String, _ content: [UInt8], modified: Int64 = 1_700_000_000, downloadable: Bool = true,
                        exportAs: String = "html") {
        contents.withLock { c in
            c.revCounter += 1
            var item = Item(displayPath: path, isFolder: false, content: content,
                            rev: String(c.revCounter, radix: 16), modified: modified, downloadable: downloadable)
            item.exportAs = exportAs
            if let replaced = c.items[path.lowercased()], !replaced.isFolder { c.formerRevisions[replaced.rev] = replaced.content }
            c.items[path.lowercased()] = item
            c.journal.append(metadata(item))
        }
    }

    /// Adds or replaces a symbolic link to `target`, as Dropbox keeps one a computer synced.
    public func addSymlink(_ path: String, to target: String) {
        contents.withLock { c in
            c.revCounter += 1
            var item = Item(displayPath: path, isFolder: false, content: Array(target.utf8), rev: String(c.revCounter, radix: 16))
            item.symlinkTarget = target
            c.items[path.lowercased()] = item
            c.journal.append(metadata(item))
        }
    }

    /// Moves a file, keeping its rev (and so its bytes, by `rev:`), as a deleted entry at the old
    /// path and a file entry at the new one in the journal.
    public func move(_ path: String, to destination: String) {
        contents.withLock { c in
            guard var item = c.items.removeValue(forKey: path.lowercased()) else { return }
            item.id = item.id ?? "id:" + path.lowercased()
            let name = String(path.split(separator: "/").last ?? "")
            c.journal.append(.deleted(DeletedMetadata(name: name, pathLower: path.lowercased(), pathDisplay: path)))
            item.displayPath = destination
            c.items[destination.lowercased()] = item
            c.journal.append(metadata(item))
        }
    }

    /// Forgets every rev a write replaced, as Dropbox does once a file's version history ends.
    public func forgetFormerRevisions() { contents.withLock { $0.formerRevisions = [:] } }

    public func remove(_ path: String) {
        contents.withLock { c in
            let key = path.lowercased()
            c.items = c.items.filter { $0.key != key && !$0.key.hasPrefix(key + "/") }
            let name = String(path.split(separator: "/").last ?? "")
            c.journal.append(.deleted(DeletedMetadata(name: name, pathLower: key, pathDisplay: path)))
        }
    }

    /// Makes the listing of `folder` return exactly these entries (nil: what the fake holds again).
    public func injectListing(_ folder: String, _ entries: [Metadata]?) {
        contents.withLock { $0.rawEntries[folder.lowercased()] = entries }
    }

    private func metadata(_ item: Item) -> Metadata {
        let name = String(item.displayPath.split(separator: "/").last ?? "")
        let lower = item.displayPath.lowercased()
        if item.isFolder {
            return .folder(FolderMetadata(name: name, id: item.id ?? "id:" + lower, pathLower: lower, pathDisplay: item.displayPath))
        }
        return .file(FileMetadata(name: name, id: item.id ?? "id:" + lower, pathLower: lower, pathDisplay: item.displayPath,
                                  clientModified: item.modified, serverModified: item.modified, rev: item.rev,
                                  size: UInt64(item.content.count), isDownloadable: item.downloadable,
                                  contentHash: String(repeating: "a", count: 64),
                                  exportAs: item.downloadable ? nil : item.exportAs, symlinkTarget: item.symlinkTarget))
    }

    private func checkFailure() throws(DropboxError) {
        if let failure = contents.withLock({ $0.failure }) { throw failure }
    }

    public func currentAccount() throws(DropboxError) -> Account {
        try checkFailure()
        return Account(accountID: "dbid:fake", displayName: "Fake", email: "fake@example.com",
                       rootNamespaceID: "1", homeNamespaceID: "1")
    }

    public func spaceUsage() throws(DropboxError) -> SpaceUsage {
        gates.withLock { $0.spaceUsage }?()
        try checkFailure()
        let used = contents.withLock { $0.counters.spaceUsage += 1; return $0.spaceUsed }
        return SpaceUsage(used: used, allocated: 2 << 30)
    }

    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        let gate = gates.withLock { recursive ? $0.recursive : $0.listing }
        gate?()
        gates.withLock { $0.path }?(path, recursive)
        try checkFailure()
        let key = path.lowercased()
        if recursive {
            let (entries, position, epoch) = try contents.withLock { c throws(DropboxError) -> ([Metadata], Int, Int) in
                c.counters.recursiveListFolder += 1
                if !key.isEmpty {
                    guard let folder = c.items[key] else { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
                    guard folder.isFolder else { throw .route(tags: ["path", "not_folder"], summary: "path/not_folder/") }
                }
                let below = c.items.values
                    .filter { $0.displayPath.lowercased() == key || $0.displayPath.lowercased().hasPrefix(key + "/") }
                    .sorted { $0.displayPath.lowercased() < $1.displayPath.lowercased() }
                    .map(metadata)
                return (below, c.journal.count, c.epoch)
            }
            return page(entries, from: 0, feedPosition: "\(epoch):\(position)")
        }
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

    /// A page of `entries`; the last page of a recursive listing carries a feed cursor.
    private func page(_ entries: [Metadata], from start: Int, feedPosition: String? = nil) -> ListFolderPage {
        let end = min(entries.count, start + pageSize)
        let hasMore = end < entries.count
        let cursor: String
        if !hasMore, let feedPosition {
            cursor = "feed:\(feedPosition)"
        } else {
            cursor = UUID().uuidString
            pendingPages.withLock { $0[cursor] = (entries, end, feedPosition) }
        }
        return ListFolderPage(entries: Array(entries[start..<end]), cursor: cursor, hasMore: hasMore)
    }

    private let pendingPages = Mutex<[String: ([Metadata], Int, String?)]>([:])

    /// "feed:EPOCH:POSITION" → the journal position, or `reset` for an old epoch.
    private func feedPosition(_ cursor: String) throws(DropboxError) -> Int? {
        let parts = cursor.split(separator: ":")
        guard parts.count == 3, parts[0] == "feed", let epoch = Int(parts[1]), let position = Int(parts[2]) else { return nil }
        if epoch != contents.withLock({ $0.epoch }) { throw .route(tags: ["reset"], summary: "reset/..") }
        return position
    }

    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try checkFailure()
        contents.withLock { $0.counters.listContinue += 1 }
        if let position = try feedPosition(cursor) {
            let changes = contents.withLock { c in Array(c.journal[min(position, c.journal.count)...]) }
            let taken = Array(changes.prefix(pageSize))
            let epoch = contents.withLock { $0.epoch }
            return ListFolderPage(entries: taken, cursor: "feed:\(epoch):\(position + taken.count)",
                                  hasMore: taken.count < changes.count)
        }
        guard let (entries, next, feed) = pendingPages.withLock({ $0[cursor] }) else {
            throw .route(tags: ["reset"], summary: "reset/")
        }
        return page(entries, from: next, feedPosition: feed)
    }

    public func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String {
        gates.withLock { $0.cursor }?()
        return contents.withLock { "feed:\($0.epoch):\($0.journal.count)" }
    }

    public func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult {
        try checkFailure()
        guard let position = try feedPosition(cursor) else { throw .route(tags: ["reset"], summary: "reset/") }
        let changed = contents.withLock { c in
            c.longpolls += 1
            return c.journal.count > position
        }
        if !changed { Thread.sleep(forTimeInterval: 0.02) }   // a real longpoll blocks; don't spin
        return LongpollResult(changes: changed, backoff: nil)
    }

    public func metadata(path: String) throws(DropboxError) -> Metadata {
        try checkFailure()
        return try contents.withLock { c throws(DropboxError) -> Metadata in
            c.counters.metadata += 1
            guard let item = c.items[path.lowercased()] else { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
            return metadata(item)
        }
    }

    // MARK: Downloads (issue 6)

    /// Ranges downloaded so far, in order, and their total bytes.
    public var downloadRanges: [Range<UInt64>] { contents.withLock { $0.downloadRanges } }
    public var downloadedBytes: UInt64 { contents.withLock { $0.downloadedBytes } }

    /// Seconds each download waits before its first byte, as a link's round trip would.
    public func setDownloadLatency(_ seconds: Double) { contents.withLock { $0.downloadLatency = seconds } }

    /// Caps all downloads together at `bytesPerSecond` (0 lifts the cap).
    public func setDownloadBandwidth(_ bytesPerSecond: Double) { link.withLock { $0.bytesPerSecond = bytesPerSecond } }

    /// Caps each download on its own at `bytesPerSecond` (0 lifts the cap): slow connections on a
    /// link with room for more of them, where only more downloads at once bring more.
    public func setConnectionBandwidth(_ bytesPerSecond: Double) { contents.withLock { $0.connectionBandwidth = bytesPerSecond } }

    /// The most streamed downloads that were under way at once.
    public var downloadPeak: Int { contents.withLock { $0.downloadPeak } }

    /// Waits for the shared link to carry `bytes`.
    private func sendOverLink(_ bytes: Int) {
        let now = ProcessInfo.processInfo.systemUptime
        let done = link.withLock { l -> Double? in
            guard l.bytesPerSecond > 0 else { return nil }
            l.freeAt = max(l.freeAt, now) + Double(bytes) / l.bytesPerSecond
            return l.freeAt
        }
        if let done, done > now { Thread.sleep(forTimeInterval: done - now) }
    }

    /// Cuts the next streamed downloads short, one per entry, after that many bytes, with a
    /// transport error (what a dropped connection looks like once the client gave up).
    public func cutShort(after bytes: [Int]) { contents.withLock { $0.cuts.append(contentsOf: bytes) } }

    /// Streams in 64 KiB chunks, so a reader can be served before the whole range has arrived.
    public func download(path: String, range: Range<UInt64>,
                  into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        let (latency, perConnection) = contents.withLock { c in
            c.downloadsInFlight += 1
            c.downloadPeak = max(c.downloadPeak, c.downloadsInFlight)
            return (c.downloadLatency, c.connectionBandwidth)
        }
        defer { contents.withLock { $0.downloadsInFlight -= 1 } }
        if latency > 0 { Thread.sleep(forTimeInterval: latency) }
        let bytes = try download(path: path, range: range)
        let cut = contents.withLock { $0.cuts.isEmpty ? nil : $0.cuts.removeFirst() }
        let limit = min(bytes.count, cut ?? .max)
        var sent = 0
        let gate = gates.withLock { $0.chunk }
        let firstByte = ProcessInfo.processInfo.systemUptime
        while sent < limit {
            let chunk = min(64 << 10, limit - sent)
            gate?(range, sent)
            sendOverLink(chunk)
            if perConnection > 0 {
                // Paced from the first byte, so that a late wake-up does not slow the rest.
                let due = firstByte + Double(sent + chunk) / perConnection
                let now = ProcessInfo.processInfo.systemUptime
                if due > now { Thread.sleep(forTimeInterval: due - now) }
            }
            let more = bytes.withUnsafeBytes { consumer(UnsafeRawBufferPointer(rebasing: $0[sent..<(sent + chunk)])) }
            sent += chunk
            if !more { return UInt64(sent) }
        }
        if limit < bytes.count { throw .transport(code: 18, message: "cut short after \(limit) bytes") }
        return UInt64(sent)
    }

    /// A document's export is its content with an "exported:" prefix, so reads can tell them apart.
    public func export(path: String, format: String?) throws(DropboxError) -> ExportedFile {
        try checkFailure()
        return try contents.withLock { c throws(DropboxError) -> ExportedFile in
            c.counters.exports += 1
            guard let item = c.items.values.first(where: { "id:" + $0.displayPath.lowercased() == path }), !item.isFolder else {
                throw .route(tags: ["path", "not_found"], summary: "path/not_found/")
            }
            guard !item.downloadable else { throw .route(tags: ["non_exportable"], summary: "non_exportable/") }
            return ExportedFile(name: "export.html", bytes: Array("exported:".utf8) + item.content)
        }
    }

    /// A file whose content starts with "IMG" is an image: its thumbnail is a tiny PNG-shaped blob
    /// naming the rev, size and mode asked. Anything else is `unsupported_image`; no such rev is
    /// `path/not_found`. At most 25 entries, as Dropbox allows.
    public func thumbnails(_ requests: [ThumbnailRequest]) throws(DropboxError) -> [ThumbnailOutcome] {
        try checkFailure()
        if let failure = contents.withLock({ $0.thumbnailFailure }) { throw failure }
        gates.withLock { $0.thumbnail }?()
        guard requests.count <= maxThumbnailBatch else {
            throw .route(tags: ["too_many_files"], summary: "too_many_files/")
        }
        return contents.withLock { c -> [ThumbnailOutcome] in
            c.counters.thumbnailCalls += 1
            c.counters.thumbnailEntries += requests.count
            return requests.map { request -> ThumbnailOutcome in
                let rev = request.path.hasPrefix("rev:") ? String(request.path.dropFirst(4)) : ""
                guard let item = c.items.values.first(where: { $0.rev == rev && !$0.isFolder }) else {
                    return .failed(["path", "not_found"])
                }
                guard item.content.starts(with: Array("IMG".utf8)) else { return .failed(["unsupported_image"]) }
                return .image(FakeDropbox.thumbnail(rev: rev, size: request.size, mode: request.mode))
            }
        }
    }

    /// The thumbnail `thumbnails` returns: a PNG signature and IHDR chunk, then the rev, size and mode.
    public static func thumbnail(rev: String, size: ThumbnailSize, mode: ThumbnailMode) -> [UInt8] {
        let ihdr: [UInt8] = [0, 0, 0, 13] + Array("IHDR".utf8) + [0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0] + [0, 0, 0, 0]
        let note = Array("\(rev) \(size.rawValue) \(mode.rawValue)".utf8)
        let text: [UInt8] = [0, 0, 0, UInt8(note.count + 5)] + Array("tEXt".utf8) + Array("Note".utf8) + [0] + note + [0, 0, 0, 0]
        let iend: [UInt8] = [0, 0, 0, 0] + Array("IEND".utf8) + [0xAE, 0x42, 0x60, 0x82]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + ihdr + text + iend
    }

    public func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        contents.withLock { $0.downloadAttempts += 1 }
        try checkFailure()
        return try contents.withLock { c throws(DropboxError) -> [UInt8] in
            c.counters.download += 1
            c.downloadRanges.append(range)
            let content: [UInt8]?
            if path.hasPrefix("rev:") {
                let rev = String(path.dropFirst(4))
                content = c.items.values.first { $0.rev == rev && !$0.isFolder }?.content ?? c.formerRevisions[rev]
            } else if let item = c.items[path.lowercased()] {
                guard !item.isFolder else { throw .route(tags: ["path", "not_file"], summary: "path/not_file/") }
                content = item.content
            } else {
                content = nil
            }
            guard let content else { throw .route(tags: ["path", "not_found"], summary: "path/not_found/") }
            let size = UInt64(content.count)
            guard range.lowerBound < size else { return [] }
            c.downloadedBytes += min(range.upperBound, size) - range.lowerBound
            return Array(content[Int(range.lowerBound)..<Int(min(range.upperBound, size))])
        }
    }
}

/// A clock a test moves by hand.
public final class ManualClock: Sendable {
    public init() {}
    private let seconds = Mutex(0.0)
    public func advance(by delta: Double) { seconds.withLock { $0 += delta } }
    public var now: @Sendable () -> Double { { [self] in seconds.withLock { $0 } } }
}

/// A `MetadataStore` in memory, to test remounts.
public final class InMemoryStore: MetadataStore {
    public init() {}
    public let saved = Mutex<PersistedTree?>(nil)
    public let saves = Mutex(0)
    /// While true, a save writes nothing and says so, as a store on a full disk.
    public let failsToWrite = Atomic<Bool>(false)
    public func load(_ receive: ([PersistedEntry]) -> Void) -> String? {
        guard let tree = saved.withLock({ $0 }) else { return nil }
        // Two batches or more, as a large tree comes from a store.
        let half = tree.entries.count / 2
        receive(Array(tree.entries[..<half]))
        receive(Array(tree.entries[half...]))
        return tree.cursor
    }
    public func save(cursor: String, entries: ((PersistedEntry) -> Void) -> Void) -> Bool {
        if failsToWrite.load(ordering: .relaxed) { return false }
        var all: [PersistedEntry] = []
        entries { all.append($0) }
        saved.withLock { $0 = PersistedTree(cursor: cursor, entries: all) }
        saves.withLock { $0 += 1 }
        return true
    }
    public func clear() { saved.withLock { $0 = nil } }
}

/// Polls `condition` until it holds or `seconds` pass.
public func eventually(within seconds: Double = 5, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return try condition()
}
