// Counts what a mount asks of Dropbox, for the stats line a mount writes on SIGUSR1, `dbx-mount
// status` and the Prometheus metrics, which all read these same totals. A decorator rather than
// counters inside `DropboxHTTPClient`, so the core's fake can be metered the same way and the HTTP
// client stays free of mutable state. Each call is also handed, with its route and duration, to an
// observer (the metrics' latency histograms), when one is set.

import Synchronization

/// Sees every Dropbox call once it ended: its route, how long it took (retries included), and
/// whether it failed in the end.
public protocol APICallObserver: Sendable {
    func callEnded(route: String, seconds: Double, failed: Bool)
}

/// Running totals of Dropbox calls. Relaxed atomics: the figures are for people, read one at a time.
public final class APIMeter: Sendable {
    private let callCount = Atomic<UInt64>(0)
    private let failureCount = Atomic<UInt64>(0)
    private let downloaded = Atomic<UInt64>(0)
    private let rateLimitedCount = Atomic<UInt64>(0)
    private let observer: (any APICallObserver)?

    public init(observer: (any APICallObserver)? = nil) { self.observer = observer }

    /// Answers 429 (rate limited) from Dropbox, retried ones included.
    public var rateLimited: UInt64 { rateLimitedCount.load(ordering: .relaxed) }

    /// For `DropboxHTTPClient(onRateLimited:)`, which sees every attempt.
    public func addRateLimited() { rateLimitedCount.add(1, ordering: .relaxed) }

    /// Dropbox calls made (each counted once, however many HTTP attempts it took).
    public var calls: UInt64 { callCount.load(ordering: .relaxed) }
    /// Calls that failed in the end.
    public var failures: UInt64 { failureCount.load(ordering: .relaxed) }
    /// File bytes received from `files/download` and `files/export`.
    public var bytesDownloaded: UInt64 { downloaded.load(ordering: .relaxed) }

    func count<T>(_ route: String, _ call: () throws(DropboxError) -> T) throws(DropboxError) -> T {
        callCount.add(1, ordering: .relaxed)
        let started = observer == nil ? nil : ContinuousClock.now
        do {
            let result = try call()
            if let started { report(route, since: started, failed: false) }
            return result
        } catch {
            failureCount.add(1, ordering: .relaxed)
            if let started { report(route, since: started, failed: true) }
            throw error
        }
    }

    private func report(_ route: String, since started: ContinuousClock.Instant, failed: Bool) {
        let (seconds, attoseconds) = (ContinuousClock.now - started).components
        observer?.callEnded(route: route, seconds: Double(seconds) + Double(attoseconds) * 1e-18, failed: failed)
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

    public func currentAccount() throws(DropboxError) -> Account { try meter.count("users/get_current_account") { () throws(DropboxError) in try base.currentAccount() } }
    public func spaceUsage() throws(DropboxError) -> SpaceUsage { try meter.count("users/get_space_usage") { () throws(DropboxError) in try base.spaceUsage() } }

    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        try meter.count("files/list_folder") { () throws(DropboxError) in try base.listFolder(path: path, recursive: recursive, limit: limit) }
    }

    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try meter.count("files/list_folder/continue") { () throws(DropboxError) in try base.listFolderContinue(cursor: cursor) }
    }

    public func listFolder(path: String, recursive: Bool, limit: Int?,
                           cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        try meter.count("files/list_folder") { () throws(DropboxError) in
            try base.listFolder(path: path, recursive: recursive, limit: limit, cursorKnown: cursorKnown)
        }
    }

    public func listFolderContinue(cursor: String,
                                   cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        try meter.count("files/list_folder/continue") { () throws(DropboxError) in
            try base.listFolderContinue(cursor: cursor, cursorKnown: cursorKnown)
        }
    }

    public func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String {
        try meter.count("files/list_folder/get_latest_cursor") { () throws(DropboxError) in try base.latestCursor(path: path, recursive: recursive) }
    }

    public func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult {
        try meter.count("files/list_folder/longpoll") { () throws(DropboxError) in try base.longpoll(cursor: cursor, timeout: timeout) }
    }

    public func metadata(path: String) throws(DropboxError) -> Metadata {
        try meter.count(base.routeAnswering("files/get_metadata")) { () throws(DropboxError) in try base.metadata(path: path) }
    }

    public func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        let bytes = try meter.count(base.routeAnswering("files/download")) { () throws(DropboxError) in try base.download(path: path, range: range) }
        meter.addDownloaded(bytes.count)
        return bytes
    }

    public func download(path: String, range: Range<UInt64>,
                         into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        // Counted as they arrive, so bytes of a call that later fails count too: they were downloaded.
        try meter.count(base.routeAnswering("files/download")) { () throws(DropboxError) in
            try base.download(path: path, range: range) { chunk in
                meter.addDownloaded(chunk.count)
                return consumer(chunk)
            }
        }
    }
}
