// Counts what a mount asks of Dropbox, for the stats line a mount writes on SIGUSR1. A decorator
// rather than counters inside `DropboxHTTPClient`, so the core's fake can be metered the same way
// and the HTTP client stays free of mutable state.

import Synchronization

/// Running totals of Dropbox calls. Relaxed atomics: the figures are for people, read one at a time.
public final class APIMeter: Sendable {
    private let callCount = Atomic<UInt64>(0)
    private let failureCount = Atomic<UInt64>(0)
    private let downloaded = Atomic<UInt64>(0)

    public init() {}

    /// Dropbox calls made (each counted once, however many HTTP attempts it took).
    public var calls: UInt64 { callCount.load(ordering: .relaxed) }
    /// Calls that failed in the end.
    public var failures: UInt64 { failureCount.load(ordering: .relaxed) }
    /// File bytes received from `files/download` and `files/export`.
    public var bytesDownloaded: UInt64 { downloaded.load(ordering: .relaxed) }

    func count<T>(_ call: () throws(DropboxError) -> T) throws(DropboxError) -> T {
        callCount.add(1, ordering: .relaxed)
        do {
            return try call()
        } catch {
            failureCount.add(1, ordering: .relaxed)
            throw error
        }
    }

    func addDownloaded(_ bytes: Int) { downloaded.add(UInt64(bytes), ordering: .relaxed) }
}

/// A `DropboxAPI` that forwards every call to `base` and counts it in `meter`.
public struct MeteredDropboxAPI: DropboxAPI {
    public let base: any DropboxAPI
    public let meter: APIMeter

    public init(_ base: any DropboxAPI, meter: APIMeter) {
        self.base = base
        self.meter = meter
    }

    public func currentAccount() throws(DropboxError) -> Account { try meter.count { () throws(DropboxError) in try base.currentAccount() } }
    public func spaceUsage() throws(DropboxError) -> SpaceUsage { try meter.count { () throws(DropboxError) in try base.spaceUsage() } }

    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        try meter.count { () throws(DropboxError) in try base.listFolder(path: path, recursive: recursive, limit: limit) }
    }

    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try meter.count { () throws(DropboxError) in try base.listFolderContinue(cursor: cursor) }
    }

    public func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String {
        try meter.count { () throws(DropboxError) in try base.latestCursor(path: path, recursive: recursive) }
    }

    public func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult {
        try meter.count { () throws(DropboxError) in try base.longpoll(cursor: cursor, timeout: timeout) }
    }

    public func metadata(path: String) throws(DropboxError) -> Metadata {
        try meter.count { () throws(DropboxError) in try base.metadata(path: path) }
    }

    public func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        let bytes = try meter.count { () throws(DropboxError) in try base.download(path: path, range: range) }
        meter.addDownloaded(bytes.count)
        return bytes
    }

    public func download(path: String, range: Range<UInt64>,
                         into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        // Counted as they arrive, so bytes of a call that later fails count too: they were downloaded.
        try meter.count { () throws(DropboxError) in
            try base.download(path: path, range: range) { chunk in
                meter.addDownloaded(chunk.count)
                return consumer(chunk)
            }
        }
    }
}
