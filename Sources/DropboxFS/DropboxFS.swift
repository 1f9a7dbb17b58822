// The filesystem core: answers lookup, getattr, readdir, open and read for one mounted Dropbox
// folder. It knows nothing of FUSE or HTTP: Dropbox arrives through `DropboxAPI`, time through a
// `MonotonicSeconds` closure, so tests drive TTLs and failures with an in-memory fake.
//
// Design notes.
// - Every folder is listed whole (`list_folder` then `continue` until `has_more` is false) the first
//   time anyone looks inside it, and the listing is trusted for `metadataTTL`. Lookups and getattr
//   of its children answer from that listing, so `ls -l` of a folder costs one listing, not one call
//   per entry. A stale node is refreshed by listing its parent again, never with one call per file.
// - Listings are single-flight per folder: concurrent readers of a cold folder share one chain.
// - Inode numbers are keyed by the case-folded Dropbox path and never reused while mounted, so they
//   stay stable however often a folder is listed again. A path whose kind changes (file replaced
//   by a folder) gets a new number, because the kernel must never see an inode change type.
// - Reads are pinned to the rev seen at open (`rev:<rev>`), so a file replaced mid-read fails the
//   read instead of mixing old and new bytes.
// - One mutex guards all state and is never held across a Dropbox call.

import DropboxClient
import Logging
import Synchronization

public final class DropboxFS: Sendable {
    private let api: any DropboxAPI
    private let options: FilesystemOptions
    private let now: MonotonicSeconds
    private let logger: Logger
    /// Wall-clock time shown as the mtime of folders, which carry no times in Dropbox.
    private let folderModified: Int64
    private let state: Mutex<State>
    private let folderListings = SingleFlight<InodeNumber, Void>()

    public init(api: any DropboxAPI, options: FilesystemOptions, folderModified: Int64,
                now: @escaping MonotonicSeconds = SystemClock.monotonic,
                logger: Logger = Logger(label: "dbx-mount.fs")) {
        self.api = api
        self.options = options
        self.now = now
        self.logger = logger
        self.folderModified = folderModified
        self.state = Mutex(State(rootPath: options.rootPath))
    }

    // MARK: - Metadata

    /// Finds `name` in the folder `parent`, listing the folder first if its listing is missing or stale.
    public func lookup(parent: InodeNumber, name: String) throws(FSError) -> NodeAttributes {
        try ensureFreshListing(of: parent)
        return try state.withLock { state throws(FSError) -> NodeAttributes in
            guard let folder = state.nodes[parent], let listing = folder.listing else { throw .notFound }
            let child = options.caseInsensitive ? listing.byFoldedName[NodeKey.fold(name)] : listing.byName[name]
            guard let child, var node = state.nodes[child] else { throw .notFound }
            node.lookupCount += 1
            state.nodes[child] = node
            return attributes(of: node, inode: child)
        }
    }

    /// The attributes of `inode`, refreshed from its parent's listing when older than the TTL.
    public func attributes(of inode: InodeNumber) throws(FSError) -> NodeAttributes {
        let parentToRefresh = try state.withLock { state throws(FSError) -> InodeNumber? in
            guard let node = state.nodes[inode] else { throw .notFound }
            return isFresh(node.describedAt) ? nil : node.parent
        }
        if let parent = parentToRefresh {
            try ensureFreshListing(of: parent)
        }
        return try state.withLock { state throws(FSError) -> NodeAttributes in
            guard let node = state.nodes[inode], state.isListed(inode) else { throw .notFound }
            return attributes(of: node, inode: inode)
        }
    }

    /// The kernel dropped `count` references to `inode`. Nodes stay known (their numbers must stay
    /// stable while mounted); the count is kept for bookkeeping and future eviction.
    public func forget(_ inode: InodeNumber, count: UInt64) {
        state.withLock { state in
            guard var node = state.nodes[inode] else { return }
            node.lookupCount = node.lookupCount > count ? node.lookupCount - count : 0
            state.nodes[inode] = node
        }
    }

    // MARK: - Directories

    /// Snapshots the folder's entries (with `.` and `..` first) into a handle for `readDirectory`.
    public func openDirectory(_ inode: InodeNumber) throws(FSError) -> FileHandleID {
        try ensureFreshListing(of: inode)
        return try state.withLock { state throws(FSError) -> FileHandleID in
            guard let folder = state.nodes[inode] else { throw .notFound }
            guard folder.kind == .directory, let listing = folder.listing else { throw .notADirectory }
            let parentInode = inode == .root ? inode : folder.parent
            var entries: [DirectoryEntry] = [DirectoryEntry(name: ".", attributes: attributes(of: folder, inode: inode))]
            let parent = state.nodes[parentInode] ?? folder
            entries.append(DirectoryEntry(name: "..", attributes: attributes(of: parent, inode: parentInode)))
            for child in listing.children {
                guard let node = state.nodes[child] else { continue }
                entries.append(DirectoryEntry(name: node.name, attributes: attributes(of: node, inode: child)))
            }
            return state.addDirectoryHandle(entries)
        }
    }

    /// Entries of an open directory from `offset` (an index into the snapshot) on.
    /// With `countAsLookups`, each returned entry other than `.` and `..` counts as a lookup, as
    /// readdirplus requires.
    public func readDirectory(_ handle: FileHandleID, from offset: Int, countAsLookups: Bool = false)
        throws(FSError) -> ArraySlice<DirectoryEntry>
    {
        try state.withLock { state throws(FSError) -> ArraySlice<DirectoryEntry> in
            guard let entries = state.directoryHandles[handle] else { throw .badHandle }
            guard offset >= 0, offset < entries.count else { return [] }
            return entries[offset...]
        }
    }

    /// Records lookups the kernel took through readdirplus.
    public func countLookup(_ inode: InodeNumber) {
        state.withLock { state in state.nodes[inode]?.lookupCount += 1 }
    }

    public func releaseDirectory(_ handle: FileHandleID) {
        _ = state.withLock { $0.directoryHandles.removeValue(forKey: handle) }
    }

    // MARK: - Files

    /// Opens a file for reading. Revalidates stale attributes first (close-to-open consistency), then
    /// pins the handle to the current rev.
    public func open(_ inode: InodeNumber) throws(FSError) -> OpenedFile {
        _ = try attributes(of: inode)
        return try state.withLock { state throws(FSError) -> OpenedFile in
            guard var node = state.nodes[inode] else { throw .notFound }
            guard node.kind == .file, let file = node.file else { throw .isADirectory }
            let unchanged = node.lastOpenedRev == file.rev
            node.lastOpenedRev = file.rev
            state.nodes[inode] = node
            let handle = state.addFileHandle(OpenFile(inode: inode, rev: file.rev, size: file.size))
            return OpenedFile(handle: handle, contentUnchanged: unchanged)
        }
    }

    /// Up to `size` bytes at `offset`; fewer only at end of file, none past it.
    public func read(_ handle: FileHandleID, offset: UInt64, size: Int) throws(FSError) -> [UInt8] {
        let file = try state.withLock { state throws(FSError) -> OpenFile in
            guard let file = state.fileHandles[handle] else { throw .badHandle }
            return file
        }
        guard offset < file.size, size > 0 else { return [] }
        let end = min(file.size, offset + UInt64(size))
        do {
            return try api.download(path: "rev:\(file.rev)", range: offset..<end)
        } catch {
            // The rev is gone only if the file changed after open; that is a failed read, not ENOENT.
            logger.warning("read failed", metadata: ["inode": "\(file.inode)", "error": "\(error)"])
            throw error.isRoute("path") ? .upstream(error) : FSError(error)
        }
    }

    public func release(_ handle: FileHandleID) {
        _ = state.withLock { $0.fileHandles.removeValue(forKey: handle) }
    }

    // MARK: - Filesystem

    /// Space used and allocated, from `users/get_space_usage`, trusted for the metadata TTL.
    public func statistics() throws(FSError) -> FilesystemStatistics {
        let cached = state.withLock { state -> FilesystemStatistics? in
            guard let (stats, at) = state.statistics, isFresh(at) else { return nil }
            return stats
        }
        if let cached { return cached }
        let usage: SpaceUsage
        do { usage = try api.spaceUsage() } catch { throw FSError(error) }
        return state.withLock { state in
            let stats = FilesystemStatistics(usedBytes: usage.used, allocatedBytes: usage.allocated,
                                             nodeCount: UInt64(state.nodes.count))
            state.statistics = (stats, now())
            return stats
        }
    }

    /// Extended attributes shown on files: Dropbox's id, rev and content hash.
    public func extendedAttributes(of inode: InodeNumber) throws(FSError) -> [(name: String, value: String)] {
        _ = try attributes(of: inode)
        return state.withLock { state in
            guard let file = state.nodes[inode]?.file else { return [] }
            var attributes = [("user.dropbox.id", file.id), ("user.dropbox.rev", file.rev)]
            if let hash = file.contentHash { attributes.append(("user.dropbox.content_hash", hash)) }
            return attributes.map { (name: $0.0, value: $0.1) }
        }
    }

    // MARK: - Listing

    private func isFresh(_ at: Double) -> Bool {
        let ttl = options.metadataTTL.components
        return now() - at < Double(ttl.seconds) + Double(ttl.attoseconds) / 1e18
    }

    private func ensureFreshListing(of folder: InodeNumber) throws(FSError) {
        let path = try state.withLock { state throws(FSError) -> String? in
            guard let node = state.nodes[folder] else { throw .notFound }
            guard node.kind == .directory else { throw .notADirectory }
            if let listing = node.listing, isFresh(listing.fetchedAt) { return nil }
            return node.path
        }
        guard let path else { return }
        try folderListings.run(folder) { () throws(FSError) -> Void in
            // A caller that waited on the lock may find the listing already refreshed.
            let stillStale = state.withLock { state in
                state.nodes[folder]?.listing.map { !isFresh($0.fetchedAt) } ?? true
            }
            guard stillStale else { return }
            let fetchedAt = now()
            let entries = try listWholeFolder(path)
            state.withLock { state in
                state.applyListing(entries, to: folder, fetchedAt: fetchedAt, options: options, logger: logger)
            }
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
            logger.warning("listing failed", metadata: ["path": "\(path)", "error": "\(error)"])
            throw FSError(error)
        }
    }

    private func attributes(of node: Node, inode: InodeNumber) -> NodeAttributes {
        switch node.kind {
        case .file:
            let file = node.file!
            return NodeAttributes(inode: inode, kind: .file, permissions: options.permissions(for: .file),
                                  size: file.size, linkCount: 1, modified: file.modified,
                                  uid: options.uid, gid: options.gid)
        case .directory:
            // 2 + subfolders once listed; 1 ("unknown", as find and fts understand it) before that,
            // because counting subfolders would cost a listing per folder shown.
            let links = node.listing.map { 2 + UInt32(clamping: $0.subfolderCount) } ?? 1
            return NodeAttributes(inode: inode, kind: .directory,
                                  permissions: options.permissions(for: .directory), size: 4096,
                                  linkCount: links, modified: folderModified,
                                  uid: options.uid, gid: options.gid)
        }
    }
}
