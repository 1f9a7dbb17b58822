// The filesystem core: answers lookup, getattr, readdir, open and read for one mounted Dropbox
// folder. It knows nothing of FUSE or HTTP: Dropbox arrives through `DropboxAPI`, time through a
// `MonotonicSeconds` closure, so tests drive TTLs, paging and failures with an in-memory fake.
//
// How metadata stays both cheap and right.
// - The whole mounted folder is one recursive `list_folder` cursor, filled in the background after
//   mount (`ChangeFeed.swift`) and applied to a compact tree (`Tree.swift`). A folder the user opens
//   before the fill reaches it is listed on its own at once, single-flight, instead of waiting.
// - Then the same cursor becomes a change feed (`longpoll`, then `continue`), whose file, folder and
//   deleted entries are applied in place, telling the kernel what to forget.
// - A complete folder answers lookups (ENOENT included), getattr and readdir from memory: forever
//   while the feed is live, and for `metadataTTL` past its last confirmation while it is down.
//   A stale folder is listed again whole; never one call per file.
// - Reads are pinned to the rev seen at open (`rev:<rev>`), so a file replaced mid-read fails the
//   read instead of mixing old and new bytes.
// - One mutex guards all state and is never held across a Dropbox call.

import DropboxClient
import Foundation
import Logging
import Synchronization

public final class DropboxFS: Sendable {
    let api: any DropboxAPI
    let options: FilesystemOptions
    let now: MonotonicSeconds
    let logger: Logger
    /// Wall-clock time shown as the mtime of folders, which carry no times in Dropbox.
    private let folderModified: Int64
    let state: Mutex<State>
    private let folderListings = SingleFlight<Slot, Void>()
    /// Signalled whenever the feed's status changes, for requests waiting on a catch-up.
    let feedChanged = NSCondition()
    let invalidationSink = Mutex<(@Sendable ([KernelInvalidation]) -> Void)?>(nil)
    let bulkWorkSink = Mutex<(@Sendable () -> Void)?>(nil)
    let stopped = Atomic<Bool>(false)
    let store: (any MetadataStore)?
    /// Exported documents (Exports.swift), whole, within 64 MiB.
    let exports = ExportCache(capacity: 64 << 20)
    /// Reads file contents: read-ahead, the memory budget, the block cache (`Reading/`).
    let reader: ReadEngine

    public init(api: any DropboxAPI, options: FilesystemOptions, folderModified: Int64,
                now: @escaping MonotonicSeconds = SystemClock.monotonic,
                logger: Logger = Logger(label: "dbx-mount.fs"), store: (any MetadataStore)? = nil) {
        self.api = api
        self.options = options
        self.now = now
        self.logger = logger
        self.folderModified = folderModified
        self.state = Mutex(State())
        self.store = store
        self.reader = ReadEngine(api: api, options: options.readAhead, logger: logger)
    }

    /// Where changes the kernel must forget are sent (the FUSE adapter's invalidation queue).
    public func onInvalidation(_ sink: @escaping @Sendable ([KernelInvalidation]) -> Void) {
        invalidationSink.withLock { $0 = sink }
    }

    /// Called on the sync thread after work that allocated and freed memory in proportion to the
    /// whole tree: a full listing, or a save of the tree. The mount gives the freed heap back to
    /// the system there (decoding a listing of 100,000 entries leaves tens of MiB freed but
    /// resident, which would otherwise count against every later figure of the process's memory).
    public func onBulkWorkDone(_ body: @escaping @Sendable () -> Void) {
        bulkWorkSink.withLock { $0 = body }
    }

    func bulkWorkDone() {
        bulkWorkSink.withLock { $0 }?()
    }

    /// How long the kernel may cache what it is told now: the TTL while the change feed is live
    /// (changes are invalidated explicitly), else one second.
    public var kernelCacheSeconds: Double {
        state.withLock { $0.feed.live } ? ttlSeconds : 1
    }

    // MARK: - Metadata

    /// Finds `name` in the folder `parent`, listing the folder first if its listing is missing or stale.
    public func lookup(parent: InodeNumber, name: String) throws(FSError) -> NodeAttributes {
        guard let folder = Slot(parent) else { throw .notFound }
        try ensureFreshListing(of: folder)
        return try state.withLock { state throws(FSError) -> NodeAttributes in
            guard state.tree.isAlive(folder) else { throw .notFound }
            guard let child = state.tree.child(of: folder, folded: FoldedName(name)) else { throw .notFound }
            if !options.caseInsensitive && state.tree.name(child) != name { throw .notFound }
            state.tree.markSizeReported(child)
            return attributes(of: child, in: state.tree)
        }
    }

    /// The attributes of `inode` for the kernel (getattr), refreshed from its parent's listing when
    /// that is stale.
    public func attributes(of inode: InodeNumber) throws(FSError) -> NodeAttributes {
        let slot = try revalidate(inode)
        return try state.withLock { state throws(FSError) -> NodeAttributes in
            guard state.tree.isAlive(slot) else { throw .notFound }
            state.tree.markSizeReported(slot)
            return attributes(of: slot, in: state.tree)
        }
    }

    /// Makes sure what the tree says of `inode` is fresh, listing its parent again if needed.
    private func revalidate(_ inode: InodeNumber) throws(FSError) -> Slot {
        guard let slot = Slot(inode) else { throw .notFound }
        let parent = try state.withLock { state throws(FSError) -> Slot? in
            guard state.tree.isAlive(slot) else { throw .notFound }
            return slot == .root ? nil : state.tree.parent(slot)
        }
        if let parent { try ensureFreshListing(of: parent) }
        return slot
    }

    /// The kernel dropped references to `inode`. Nodes stay (their numbers must stay stable while
    /// mounted, and the tree is the cache), so there is nothing to free.
    public func forget(_ inode: InodeNumber, count: UInt64) {}

    // MARK: - Directories

    /// Snapshots the folder's entries (with `.` and `..` first) into a handle for `readDirectory`.
    public func openDirectory(_ inode: InodeNumber) throws(FSError) -> FileHandleID {
        guard let folder = Slot(inode) else { throw .notFound }
        try ensureFreshListing(of: folder)
        return try state.withLock { state throws(FSError) -> FileHandleID in
            let tree = state.tree
            guard tree.isAlive(folder) else { throw .notFound }
            guard tree.isDirectory(folder) else { throw .notADirectory }
            var entries = [(".", folder), ("..", folder == .root ? folder : tree.parent(folder))]
            for child in tree.children(of: folder) { entries.append((tree.name(child), child)) }
            return state.addDirectoryHandle(entries)
        }
    }

    /// Entries of an open directory from `offset` (an index into the snapshot) on, with attributes
    /// as they are now: readdirplus hands them to the kernel, which must not get older ones than a
    /// getattr answered in between. An entry removed since opendir is left out.
    public func readDirectory(_ handle: FileHandleID, from offset: Int, limit: Int = .max) throws(FSError)
        -> [DirectoryEntry]
    {
        try state.withLock { state throws(FSError) -> [DirectoryEntry] in
            guard let snapshot = state.directoryHandles[handle] else { throw .badHandle }
            guard offset >= 0, offset < snapshot.count else { return [] }
            var entries: [DirectoryEntry] = []
            for (name, slot) in snapshot[offset...].prefix(limit) {
                guard state.tree.isAlive(slot) else {
                    entries.append(DirectoryEntry(name: name, attributes: nil))
                    continue
                }
                state.tree.markSizeReported(slot)
                entries.append(DirectoryEntry(name: name, attributes: attributes(of: slot, in: state.tree)))
            }
            return entries
        }
    }

    public func releaseDirectory(_ handle: FileHandleID) {
        _ = state.withLock { $0.directoryHandles.removeValue(forKey: handle) }
    }

    // MARK: - Files

    /// Opens a file for reading, revalidating stale attributes first (close-to-open consistency),
    /// and pins the handle to the current rev.
    public func open(_ inode: InodeNumber) throws(FSError) -> OpenedFile {
        // Open sends the kernel no attributes, so it revalidates without marking the size reported.
        let slot = try revalidate(inode)
        if let export = try openExport(slot) { return export }
        return try state.withLock { state throws(FSError) -> OpenedFile in
            guard state.tree.isAlive(slot) else { throw .notFound }
            guard let file = state.tree.details(slot) else { throw .isADirectory }
            // The page cache is per inode. While a handle of another rev is open, its reads may
            // still land there, so this handle bypasses the cache and keeps nothing.
            let otherRevOpen = state.fileHandles.values.contains { $0.slot == slot && $0.rev != file.rev }
            let unchanged = state.lastOpenedRev[slot] == file.rev && !otherRevOpen
            state.lastOpenedRev[slot] = file.rev
            let rev = file.rev
            let stream = reader.open(ReadFile(id: file.id, rev: rev, size: file.size)) { [weak self] in
                self?.isCurrent(slot: slot, rev: rev) ?? false
            }
            let handle = state.addFileHandle(OpenFile(slot: slot, rev: rev, size: file.size, stream: stream))
            return OpenedFile(handle: handle, contentUnchanged: unchanged,
                              kernelSizeMayBeStale: !state.tree.isSizeReported(slot) || otherRevOpen)
        }
    }

    /// Up to `size` bytes at `offset`; fewer only at end of file, none past it.
    public func read(_ handle: FileHandleID, offset: UInt64, size: Int) throws(FSError) -> [UInt8] {
        try readBytes(handle, offset: offset, size: size).array
    }

    /// Like `read`, but hands over the read engine's buffers instead of a copy (the FUSE adapter
    /// replies from them directly).
    public func readBytes(_ handle: FileHandleID, offset: UInt64, size: Int) throws(FSError) -> FileBytes {
        let file = try state.withLock { state throws(FSError) -> OpenFile in
            guard let file = state.fileHandles[handle] else { throw .badHandle }
            return file
        }
        if let exported = file.exported {
            guard offset < UInt64(exported.count), size > 0 else { return .empty }
            let start = Int(offset)
            return .copying(exported[start..<min(exported.count, start + size)])
        }
        guard let stream = file.stream else { throw .badHandle }
        // Bytes of a rev that is no longer current must not reach the page cache, where a newer
        // handle of the same inode would read them; so the rev is checked before and after, and
        // read-ahead of a superseded rev is dropped. Even an end-of-file answer is one: the reader
        // may hold newer pages below it.
        try ensureCurrent(file)
        guard offset < file.size, size > 0 else { return .empty }
        let bytes: FileBytes
        do {
            bytes = try reader.read(stream, offset: offset, size: size)
        } catch {
            if error == .changedSinceOpen { reader.drop(stream) }
            logger.warning("read failed", metadata: ["inode": "\(file.slot.inode)", "error": "\(error)"])
            throw error
        }
        try ensureCurrent(file)
        return bytes
    }

    private func isCurrent(slot: Slot, rev: String) -> Bool {
        state.withLock { $0.tree.isAlive(slot) && $0.tree.details(slot)?.rev == rev }
    }

    private func ensureCurrent(_ file: OpenFile) throws(FSError) {
        guard isCurrent(slot: file.slot, rev: file.rev) else {
            if let stream = file.stream { reader.drop(stream) }
            logger.info("file changed since open; failing the read", metadata: ["inode": "\(file.slot.inode)"])
            throw .changedSinceOpen
        }
    }

    public func release(_ handle: FileHandleID) {
        let stream = state.withLock { state -> ReadStream? in
            guard let file = state.fileHandles.removeValue(forKey: handle) else { return nil }
            // A handle of a superseded rev may have left its pages in the cache: the next open
            // must not keep them.
            if state.tree.details(file.slot)?.rev != file.rev { state.lastOpenedRev[file.slot] = nil }
            return file.stream
        }
        if let stream { reader.close(stream) }
    }

    /// At unmount: lets downloads in flight finish into the block cache (a few seconds at most)
    /// and forgets queued read-ahead.
    public func stopReading() { reader.shutdown() }

    /// Read-ahead memory now, its peak, and the streams holding some (for tests and logs).
    public var readAheadUsage: (reserved: UInt64, peak: UInt64, streams: Int) { reader.budget.usage }

    // MARK: - Filesystem

    /// Space used and allocated, from `users/get_space_usage`, trusted for the metadata TTL.
    public func statistics() throws(FSError) -> FilesystemStatistics {
        let cached = state.withLock { state -> FilesystemStatistics? in
            guard let (stats, at) = state.statistics, now() - at < ttlSeconds else { return nil }
            return stats
        }
        if let cached { return cached }
        let usage: SpaceUsage
        do { usage = try api.spaceUsage() } catch { throw FSError(error) }
        return state.withLock { state in
            let stats = FilesystemStatistics(usedBytes: usage.used, allocatedBytes: usage.allocated,
                                             nodeCount: UInt64(state.tree.liveCount))
            state.statistics = (stats, now())
            return stats
        }
    }

    /// One extended attribute's value. Only the `user.` namespace exists here; asking for another
    /// (`system.posix_acl_access`, `security.selinux`, ...) fails at once, without touching the tree.
    public func extendedAttribute(_ name: String, of inode: InodeNumber) throws(FSError) -> String {
        guard name.hasPrefix("user.") else { throw .attributeNamespaceUnsupported }
        guard let value = try extendedAttributes(of: inode).first(where: { $0.name == name })?.value else {
            throw .noAttribute
        }
        return value
    }

    /// Extended attributes shown on files: Dropbox's id, rev and content hash.
    public func extendedAttributes(of inode: InodeNumber) throws(FSError) -> [(name: String, value: String)] {
        let slot = try revalidate(inode)
        return state.withLock { state in
            guard let file = state.tree.details(slot) else { return [] }
            var attributes = [("user.dropbox.id", file.id), ("user.dropbox.rev", file.rev)]
            if let hash = file.contentHash { attributes.append(("user.dropbox.content_hash", hash)) }
            return attributes.map { (name: $0.0, value: $0.1) }
        }
    }

    /// Entries the tree holds, and roughly the bytes it uses for them (memory figures for issue 5).
    public var cacheFootprint: (entries: Int, bytes: Int) {
        state.withLock { ($0.tree.liveCount, $0.tree.approximateBytes) }
    }

    // MARK: - Freshness

    var ttlSeconds: Double {
        let ttl = options.metadataTTL.components
        return Double(ttl.seconds) + Double(ttl.attoseconds) / 1e18
    }

    private enum Freshness { case fresh, waitForCatchUp, list(path: String, firstTime: Bool) }

    private func freshness(of folder: Slot, in state: State) throws(FSError) -> Freshness {
        let tree = state.tree
        guard tree.isAlive(folder) else { throw .notFound }
        guard tree.isDirectory(folder) else { throw .notADirectory }
        if tree.isComplete(folder), tree.listedAt(folder) >= state.cachesDroppedAt {
            if state.feed.live { return .fresh }
            if now() - max(tree.listedAt(folder), state.feed.lastContact) < ttlSeconds { return .fresh }
            if state.feed.catchingUp { return .waitForCatchUp }
        }
        let path = options.rootPath + tree.components(folder).map { "/" + $0 }.joined()
        return .list(path: path, firstTime: !tree.isComplete(folder))
    }

    func ensureFreshListing(of folder: Slot) throws(FSError) {
        var decision = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) }
        if case .waitForCatchUp = decision {
            // A tree loaded from the persistent cache is being brought up to date; its `continue`
            // chain is cheaper than listing this folder, so wait for it (but not forever).
            let deadline = Date().addingTimeInterval(10)
            feedChanged.lock()
            while state.withLock({ $0.feed.catchingUp }) && Date() < deadline { _ = feedChanged.wait(until: deadline) }
            feedChanged.unlock()
            decision = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) }
        }
        guard case .list(let path, let firstTime) = decision else { return }
        try folderListings.run(folder) { () throws(FSError) -> Void in
            // A caller that queued behind another's listing may find the folder already fresh.
            let again = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) }
            guard case .list = again else { return }
            let listedAt = now()
            let entries: [Metadata]
            do throws(FSError) {
                entries = try listWholeFolder(path)
            } catch {
                // Dropbox unreachable (or answering 5xx/429 past the retries): a folder listed
                // before keeps its last answer rather than turning into EIO, and is listed again
                // on the next access (issue 8). The client has logged the failed call.
                guard case .upstream = error, !firstTime else { throw error }
                logger.debug("serving the cached listing", metadata: ["path": "\(path)"])
                return
            }
            let invalidations = state.withLock { state -> [KernelInvalidation] in
                guard state.tree.isAlive(folder) else { return [] }
                var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
                update.replaceChildren(of: folder, with: entries, in: &state.tree, listedAt: listedAt, notify: !firstTime)
                return update.invalidations
            }
            invalidate(invalidations)
        }
    }

    private func listWholeFolder(_ path: String) throws(FSError) -> [Metadata] {
        do {
            var page = try api.listFolder(path: path, recursive: false, limit: 2000)
            var entries = page.entries
            while page.hasMore {
                page = try api.listFolderContinue(cursor: page.cursor)
                entries.append(contentsOf: page.entries)
            }
            return entries
        } catch {
            // The Dropbox client has logged the failure (with its request id); this adds the path.
            logger.debug("listing failed", metadata: ["path": "\(path)", "error": "\(error)"])
            throw FSError(error)
        }
    }

    func invalidate(_ invalidations: [KernelInvalidation]) {
        guard !invalidations.isEmpty, let sink = invalidationSink.withLock({ $0 }) else { return }
        sink(invalidations)
    }

    private func attributes(of slot: Slot, in tree: Tree) -> NodeAttributes {
        if tree.isDirectory(slot) {
            // 2 + subfolders once listed; 1 ("unknown", as find and fts understand it) before that,
            // because counting subfolders would cost a listing per folder shown.
            let links = tree.isComplete(slot) ? 2 + tree.subfolderCount(slot) : 1
            return NodeAttributes(inode: slot.inode, kind: .directory, permissions: options.permissions(for: .directory),
                                  size: 4096, linkCount: links, modified: folderModified, uid: options.uid, gid: options.gid)
        }
        return NodeAttributes(inode: slot.inode, kind: .file, permissions: options.permissions(for: .file),
                              size: tree.size(slot), linkCount: 1, modified: tree.modified(slot),
                              uid: options.uid, gid: options.gid)
    }
}
