// The filesystem core: answers lookup, getattr, readdir, open and read for one mounted Dropbox
// folder. It knows nothing of FUSE or HTTP: Dropbox arrives through `DropboxAPI`, time through a
// `MonotonicSeconds` closure, so tests drive TTLs, paging and failures with an in-memory fake.
//
// Where each concern lives (every folder extends `DropboxFilesystem` or serves it):
// - `Metadata/`: the compact tree of names and details (`Tree`), how listings land in it
//   (`TreeUpdate`), when a folder's listing is fresh (`Freshness`), and the answers built from it
//   (`Lookup`: lookup, getattr, readdir, statfs, xattrs).
// - `Sync/`: the change feed that keeps the tree in step with Dropbox, and the tree's persistence.
// - `Reading/`: open handles and the read engine (read-ahead, memory budget, block cache).
// - `Exports/`: documents Dropbox cannot download, read as their exports.
// - `Thumbnails/`: Dropbox's thumbnails of a folder's images, put in a thumbnail cache.
// - `Errors/`: `FSError`, and the one boundary where a failed operation is logged.
//
// How metadata stays both cheap and right.
// - The whole mounted folder is listed in the background after mount, as subtree listings in
//   parallel (`ChangeFeed.swift`), into a compact tree (`Tree.swift`). A folder the user opens
//   before the fill reaches it is listed on its own at once, single-flight, instead of waiting.
// - A recursive cursor taken before that listing becomes the change feed (`longpoll`, then
//   `continue`), whose file, folder and deleted entries are applied in place, telling the kernel
//   what to forget.
// - A complete folder answers lookups (ENOENT included), getattr and readdir from memory: forever
//   while the feed is live, and for `metadataTTL` past its last confirmation while it is down.
//   A stale folder is listed again whole; never one call per file.
// - Reads are pinned to the rev seen at open (`rev:<rev>`), so a file replaced mid-read fails the
//   read instead of mixing old and new bytes.
// - One mutex guards the tree, the handles and the feed's status together, because a lookup must
//   see a folder's entries and whether they are fresh in one step. It is never held across a
//   Dropbox call. The read engine keeps its own locks: its buffers are not the tree's.

import DropboxClient
import Foundation
import Logging
import Synchronization

public final class DropboxFilesystem: Sendable {
    let api: any DropboxAPI
    let options: FilesystemOptions
    /// Whether the change feed follows Dropbox (false for a shared link: folders refresh by TTL).
    public var followsChanges: Bool { options.followsChanges }
    let now: MonotonicSeconds
    let logger: Logger
    /// Wall-clock time shown as a folder's mtime while no file in the tree gives it one (`Tree.folderTime`).
    let folderModified: Int64
    let state: Mutex<State>
    let folderListings = SingleFlight<Slot, Void>()
    /// Signalled whenever the feed's status changes, for requests waiting on a catch-up.
    let feedChanged = NSCondition()
    /// What the mount asked to be told, set once it is running.
    let sinks = Mutex(Sinks())
    let stopped = Atomic<Bool>(false)
    /// Bytes of page cache dropped behind long streams (`Reading/DropBehind.swift`).
    let droppedPageBytes = Atomic<UInt64>(0)
    let store: (any MetadataStore)?
    /// Held through each save (`persist`): one at a time, so the unmount's waits for one under way.
    let saving = Mutex(())
    /// Exported documents (Exports.swift), whole, within 64 MiB.
    let exports = ExportCache(capacity: 64 << 20)
    /// Reads file contents: read-ahead, the memory budget, the block cache (`Reading/`).
    let reader: ReadEngine
    /// The threads the first full listing lists subtrees on (`Sync/ChangeFeed.swift`).
    let listers: WorkerPool
    /// Whether Dropbox answers at all, as the change feed last found.
    let reachability: Reachability
    /// Folders kept whole in the block cache (`Reading/Pins.swift`); nil without a block cache.
    let pins: Pins?
    /// Puts Dropbox's thumbnails of a folder's images in a thumbnail cache (`Thumbnails/`); nil
    /// unless the mount asked for thumbnails.
    let thumbnailer: Thumbnailer?

    public init(api: any DropboxAPI, options: FilesystemOptions, folderModified: Int64,
                now: @escaping MonotonicSeconds = SystemClock.monotonic,
                logger: Logger = Logger(label: "dbx-mount.fs"), store: (any MetadataStore)? = nil,
                thumbnails: (any ThumbnailStore)? = nil) {
        self.api = api
        self.options = options
        self.now = now
        self.logger = logger
        self.folderModified = folderModified
        self.state = Mutex(State())
        self.store = store
        let reachability = Reachability(startsOffline: options.startsOffline)
        self.reachability = reachability
        self.reader = ReadEngine(api: api, options: options.readAhead, logger: logger,
                                 linkDown: { reachability.isUnreachable })
        self.listers = WorkerPool(name: "dbx-list", limit: options.listingConcurrency)
        self.pins = options.readAhead.blockCacheDirectory.map { Pins(directory: $0, bandwidth: options.pinBandwidth) }
        self.thumbnailer = thumbnails.map {
            Thumbnailer(api: api, store: $0, options: options.thumbnails, logger: logger, now: now)
        }
    }

    /// Where changes the kernel must forget are sent (the FUSE adapter's invalidation queue).
    public func onInvalidation(_ sink: @escaping @Sendable ([KernelInvalidation]) -> Void) {
        sinks.withLock { $0.invalidation = sink }
    }

    /// Called on the sync thread after work that allocated and freed memory in proportion to the
    /// whole tree: a full listing, or a save of the tree. The mount gives the freed heap back to
    /// the system there (decoding a listing of 100,000 entries leaves tens of MiB freed but
    /// resident, which would otherwise count against every later figure of the process's memory).
    public func onBulkWorkDone(_ body: @escaping @Sendable () -> Void) {
        sinks.withLock { $0.bulkWorkDone = body }
    }

    func bulkWorkDone() {
        sinks.withLock { $0.bulkWorkDone }?()
    }

    /// How long the kernel may cache what it is told now: the TTL while the change feed is live
    /// (changes are invalidated explicitly), else one second.
    public var kernelCacheSeconds: Double {
        state.withLock { $0.feed.live } ? ttlSeconds : 1
    }

    func invalidate(_ invalidations: [KernelInvalidation]) {
        guard !invalidations.isEmpty, let sink = sinks.withLock({ $0.invalidation }) else { return }
        sink(invalidations)
    }
}

/// The mount's callbacks, as fields of a struct. Not `Mutex<(() -> Void)?>`: a function type
/// that is itself the lock's generic argument is reabstracted on every `withLock` (which passes
/// its value `inout`) and stored back wrapped in two more thunks, so a sink called N times ran
/// through 2N thunks and, on a long-lived mount, would have overflowed its caller's stack. A
/// struct's fields keep their own representation. `SinkTests` holds this.
struct Sinks {
    var invalidation: (@Sendable ([KernelInvalidation]) -> Void)?
    var bulkWorkDone: (@Sendable () -> Void)?
}
