// lookup, getattr, readdir, statfs and xattrs: answered from the tree, which `Freshness.swift`
// keeps within its TTL.

import DropboxClient
import Foundation

extension DropboxFilesystem {
    // MARK: - Metadata

    /// Finds `name` in the folder `parent`, listing the folder first if its listing is missing or stale.
    public func lookup(parent: InodeNumber, name: String) throws(FSError) -> NodeAttributes {
        try reporting(.lookup, inode: parent, name: name) { () throws(FSError) -> NodeAttributes in
            guard let folder = Slot(parent) else { throw .notFound }
            if let found = try lookUpWithinASubtreeUnderWay(name, in: folder) { return found }
            try ensureFreshListing(of: folder)
            return try state.withLock { state throws(FSError) -> NodeAttributes in
                guard let found = try child(name, of: folder, in: &state) else { throw .notFound }
                return found
            }
        }
    }

    /// Whether the kernel may keep what a lookup of `name` answered (`found`, or nil for "no such
    /// name") until an invalidation tells it otherwise. Invalidations name an entry as Dropbox
    /// spells it. Where names match in any case and form (`caseInsensitive`), the kernel also
    /// keeps the other spellings it was answered for, and the absence of names that a file added
    /// later will answer to: no invalidation would ever name those, so they are not to be kept.
    public func kernelMayKeepEntry(named name: String, found: NodeAttributes?) -> Bool {
        guard options.caseInsensitive else { return true }
        guard let found, let slot = Slot(found.inode) else { return false }
        return state.withLock { state in
            state.tree.isAlive(slot) && state.tree.name(slot).utf8.elementsEqual(name.utf8)
        }
    }

    /// `name` in `folder` as the tree has it: nil if the tree holds no such child.
    private func child(_ name: String, of folder: Slot, in state: inout State) throws(FSError) -> NodeAttributes? {
        guard state.tree.isAlive(folder) else { throw .notFound }
        // Byte for byte: Swift's == takes a composed and a decomposed spelling for one name, and
        // the kernel would keep the other spelling as an alias no invalidation names.
        guard let child = state.tree.child(of: folder, folded: FoldedName(name)),
              options.caseInsensitive || state.tree.name(child).utf8.elementsEqual(name.utf8) else { return nil }
        state.tree.markSizeReported(child)
        return attributes(of: child, in: state.tree)
    }

    /// A name in a folder the first listing reaches only within a subtree under way (`cd a/b`,
    /// `cat a/b/f` right after mounting a large Dropbox): the tree's entry if that listing has
    /// brought it, else Dropbox's answer for that one path (`files/get_metadata`, one round trip)
    /// instead of waiting up to `fillWaitLimit` for the subtree. nil (wait and list, as for any
    /// folder) when the folder is not such a folder, when Dropbox has no such path (the name may
    /// be a document's export name, which only a listing shows), or when it cannot answer.
    private func lookUpWithinASubtreeUnderWay(_ name: String, in folder: Slot) throws(FSError) -> NodeAttributes? {
        guard !reachability.isUnreachable else { return nil }
        let (path, found) = try state.withLock { state throws(FSError) -> (String?, NodeAttributes?) in
            guard let path = pathWithinASubtreeUnderWay(folder, in: state) else { return (nil, nil) }
            return (path, try child(name, of: folder, in: &state))
        }
        guard let path, found == nil else { return found }
        let entry: Metadata
        do throws(DropboxError) {
            entry = try api.metadata(path: path + "/" + name)
        } catch {
            return nil
        }
        return try state.withLock { state throws(FSError) -> NodeAttributes? in
            // Added as the subtree listing would add it; the folder stays unlisted, and the change
            // feed, whose cursor predates this answer, brings whatever changes after it.
            var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
            update.apply([entry], to: &state.tree, notify: false)
            return try child(name, of: folder, in: &state)
        }
    }

    /// The attributes of `inode` for the kernel (getattr), refreshed from its parent's listing when
    /// that is stale.
    public func attributes(of inode: InodeNumber) throws(FSError) -> NodeAttributes {
        try reporting(.getattr, inode: inode) { () throws(FSError) -> NodeAttributes in
            do throws(FSError) {
                let slot = try revalidate(inode)
                return try state.withLock { state throws(FSError) -> NodeAttributes in
                    guard state.tree.isAlive(slot) else { throw .nodeGone }
                    state.tree.markSizeReported(slot)
                    return attributes(of: slot, in: state.tree)
                }
            } catch {
                if error == .nodeGone, let leftBehind = attributesLeftBehind(inode) { return leftBehind }
                throw error
            }
        }
    }

    /// A node the tree no longer holds, as the handles still open on it see it (`fstat`): what it
    /// showed at their open, with no link, as a disk shows a file removed or replaced while open,
    /// or a folder removed while a shell is in it. nil when no handle has it open.
    private func attributesLeftBehind(_ inode: InodeNumber) -> NodeAttributes? {
        guard let slot = Slot(inode) else { return nil }
        return state.withLock { state -> NodeAttributes? in
            let shownAtOpen = state.fileHandles.values.first(where: { $0.slot == slot })?.shownAtOpen
                ?? state.directoryHandles.values.first(where: { $0.folder == slot })?.shownAtOpen
            guard var shown = shownAtOpen else { return nil }
            shown.linkCount = 0
            return shown
        }
    }

    /// A symbolic link's target (readlink), as Dropbox has it: relative or absolute, and not
    /// checked against anything (a link may point outside the mount, or nowhere, as on a disk).
    public func readLink(_ inode: InodeNumber) throws(FSError) -> String {
        try reporting(.readlink, inode: inode) { () throws(FSError) -> String in
            let slot = try revalidate(inode)
            return try state.withLock { state throws(FSError) -> String in
                guard state.tree.isAlive(slot) else { throw .nodeGone }
                guard let target = state.tree.details(slot)?.symlinkTarget else { throw .notASymbolicLink }
                return target
            }
        }
    }

    /// Makes sure what the tree says of `inode` is fresh, listing its parent again if needed.
    func revalidate(_ inode: InodeNumber) throws(FSError) -> Slot {
        guard let slot = Slot(inode) else { throw .notFound }
        if slot == .root, let name = options.rootFileName {
            // The mount point is that one file: its attributes and bytes are the file's, kept
            // fresh by listing the folder it is in.
            try ensureFreshListing(of: .root)
            return try state.withLock { state throws(FSError) -> Slot in
                guard let file = state.tree.child(of: .root, folded: FoldedName(name)) else { throw .notFound }
                return file
            }
        }
        let parent = try state.withLock { state throws(FSError) -> Slot? in
            guard state.tree.isAlive(slot) else { throw .nodeGone }
            guard slot != .root else { return nil }
            let parent = state.tree.parent(slot)
            // In a folder the first listing is still listing within a subtree, the entry is as
            // fresh as that listing (or the lookup that asked Dropbox for it): nothing to list
            // again, and no reason to wait for the rest of the subtree.
            return pathWithinASubtreeUnderWay(parent, in: state) == nil ? parent : nil
        }
        if let parent { try ensureFreshListing(of: parent) }
        return slot
    }

    /// The kernel dropped references to `inode`. Nodes stay (their numbers must stay stable while
    /// mounted, and the tree is the cache), so there is nothing to free.
    public func forget(_ inode: InodeNumber, count: UInt64) {}

    // MARK: - Directories

    /// Whether the kernel may keep its cached listing of the folder open on `handle` (`keep_cache`
    /// on opendir): not when this open listed the folder again, as its invalidations may still be
    /// on their way.
    public func kernelMayKeepListing(_ handle: FileHandleID) -> Bool {
        state.withLock { !($0.directoryHandles[handle]?.listedByOpen ?? true) }
    }

    /// The kernel was given these files' sizes (the entries readdirplus could fit in its reply;
    /// `readDirectory` returns more than fit). A file whose size has changed since is not marked:
    /// the kernel has the old one.
    public func sizesReported(_ reported: [(inode: InodeNumber, size: UInt64)]) {
        state.withLock { state in
            for (inode, size) in reported {
                guard let slot = Slot(inode), state.tree.isAlive(slot), state.tree.details(slot)?.size == size else { continue }
                state.tree.markSizeReported(slot)
            }
        }
    }

    /// A handle for `readDirectory`, once the folder's listing is fresh.
    public func openDirectory(_ inode: InodeNumber) throws(FSError) -> FileHandleID {
        try reporting(.opendir, inode: inode) { () throws(FSError) -> FileHandleID in
            guard let folder = Slot(inode) else { throw .notFound }
            let (handle, listedBefore) = state.withLock { state in
                (state.reserveHandle(), state.tree.isAlive(folder) ? state.tree.listedAt(folder) : -.infinity)
            }
            let images: [ThumbnailTarget]
            do throws(FSError) {
                try ensureFreshListing(of: folder, readerHandle: handle)
                images = try state.withLock { state throws(FSError) -> [ThumbnailTarget] in
                    let tree = state.tree
                    guard tree.isAlive(folder) else { throw .notFound }
                    guard tree.isDirectory(folder) else { throw .notADirectory }
                    state.directoryHandles[handle] = OpenDirectory(folder: folder, shownAtOpen: attributes(of: folder, in: tree),
                                                                   listedByOpen: tree.listedAt(folder) != listedBefore)
                    state.feed.foldersOpenedDuringFill?.insert(folder)
                    return thumbnailer == nil ? [] : tree.children(of: folder).compactMap { thumbnailTarget($0, in: tree) }
                }
            } catch {
                releaseDirectory(handle)   // ends the fill's pause for it, if one began
                throw error
            }
            // Before the listing is answered: a file manager looks for thumbnails right after it.
            thumbnailer?.prepare(images)
            return handle
        }
    }

    /// What the thumbnail cache needs of `slot`, if it is an image Dropbox can thumbnail.
    func thumbnailTarget(_ slot: Slot, in tree: Tree) -> ThumbnailTarget? {
        guard let file = tree.details(slot), file.isPlainFile,
              let mimeType = ThumbnailableImage.mimeType(name: tree.name(slot), size: file.size) else { return nil }
        return ThumbnailTarget(id: file.id, rev: file.rev, relativePath: tree.components(slot).map { "/" + $0 }.joined(),
                               size: file.size, modified: file.modified, mimeType: mimeType)
    }

    /// Entries of an open directory after `offset` (0, or the `offset` of an entry it returned),
    /// with attributes as they are now: readdirplus hands them to the kernel, which must not get
    /// older ones than a getattr answered in between. An entry removed since the snapshot is left
    /// out (nothing after it is).
    ///
    /// The snapshot is taken at a read from offset 0, not at opendir: the kernel caches a folder's
    /// listing (`cache_readdir`) from the replies to a read that starts at 0, and keeps it until
    /// an invalidation. A change between opendir and that read (a file manager's opendir waits
    /// for thumbnails) has had its invalidation sent already, so a snapshot from opendir would
    /// be cached as complete without the change, for good. Taken at the read, it holds every
    /// change whose invalidation came before; one after it resets what the kernel cached.
    ///
    /// Offsets name entries, not positions (`listingOffset`). A reader can go on from an offset in
    /// a snapshot other than the one it came from: when the kernel answered the first reads from
    /// its cache and then dropped it for a change, its next read comes here with an offset and no
    /// snapshot yet. Had offsets been positions, every entry removed ahead of it would have moved
    /// that many others past the reader, never returned although they were there all along.
    public func readDirectory(_ handle: FileHandleID, from offset: Int, limit: Int = .max) throws(FSError)
        -> [DirectoryEntry]
    {
        try reporting(.readdir, handle: handle) { () throws(FSError) -> [DirectoryEntry] in
            var readToTheEnd = false
            defer { if readToTheEnd { signalFeedChanged() } }   // subtree listings that made way go on
            return try state.withLock { state throws(FSError) -> [DirectoryEntry] in
                guard var open = state.directoryHandles[handle] else { throw .badHandle }
                if offset == 0 || open.entries == nil {
                    open.entries = snapshot(of: open.folder, in: state.tree)
                    state.directoryHandles[handle] = open
                }
                let snapshot = open.entries ?? []
                let start = Self.firstIndex(in: snapshot, after: offset)
                guard start < snapshot.count else {
                    // The reader has every entry (the kernel asks past the end once it has).
                    readToTheEnd = state.feed.foldersReadAfterWaiting.removeValue(forKey: handle) != nil
                    return []
                }
                // Entries removed since the snapshot are passed over, not counted: a batch of them
                // only would be an empty reply, which the kernel takes for the folder's end.
                var entries: [DirectoryEntry] = []
                for (name, slot, offset) in snapshot[start...] where state.tree.isAlive(slot) {
                    guard entries.count < limit else { break }
                    entries.append(DirectoryEntry(name: name, attributes: attributes(of: slot, in: state.tree), offset: offset))
                }
                return entries
            }
        }
    }

    /// The folder's entries now, `.` and `..` first; none for a folder removed since it was opened.
    private func snapshot(of folder: Slot, in tree: Tree) -> [(name: String, slot: Slot, offset: Int)] {
        guard tree.isAlive(folder), tree.isDirectory(folder) else { return [] }
        var entries = [(".", folder, 1), ("..", folder == .root ? folder : tree.parent(folder), 2)]
        for child in tree.children(of: folder) { entries.append((tree.name(child), child, Self.listingOffset(child))) }
        // Children come in the order they were added, which is slot order; sorted only if not.
        if zip(entries, entries.dropFirst()).contains(where: { $0.2 >= $1.2 }) { entries.sort { $0.2 < $1.2 } }
        return entries
    }

    /// The first entry of `snapshot` (in increasing offset) whose offset is past `offset`.
    private static func firstIndex(in snapshot: [(name: String, slot: Slot, offset: Int)], after offset: Int) -> Int {
        var low = 0, high = snapshot.count
        while low < high {
            let middle = (low + high) / 2
            if snapshot[middle].offset > offset { high = middle } else { low = middle + 1 }
        }
        return low
    }

    /// A child's `readdir` offset: its slot, past `.` (1) and `..` (2). A slot is never reused nor
    /// moved to another entry while the mount runs (Tree), so the offset finds its place in any
    /// snapshot of the folder, also after the entry itself was removed.
    static func listingOffset(_ child: Slot) -> Int { Int(child.index) + 3 }

    public func releaseDirectory(_ handle: FileHandleID) {
        let heldTheFill = state.withLock { state in
            state.directoryHandles.removeValue(forKey: handle)
            return state.feed.foldersReadAfterWaiting.removeValue(forKey: handle) != nil
        }
        if heldTheFill { signalFeedChanged() }   // subtree listings that made way go on
    }

    // MARK: - Filesystem

    /// Space used and allocated, from `users/get_space_usage`, trusted for the metadata TTL. One
    /// call at a time, always in the background: stale figures are answered at once, and `df`
    /// waits for the first figures only `firstStatisticsWaitSeconds`, as a slow or hung link would
    /// otherwise hold every `df` (and every file manager's free-space line) for up to the call's
    /// deadline. When Dropbox cannot answer (offline, failing, slow), the last figures stand, or
    /// zeros before any, as rclone and mountpoint-s3 answer; a failing Dropbox is asked once per
    /// TTL, and the client logs the failed call.
    public func statistics() throws(FSError) -> FilesystemStatistics {
        try reporting(.statfs) { () throws(FSError) -> FilesystemStatistics in
            let (last, fetch, leads) = state.withLock { state -> (FilesystemStatistics?, StatisticsFetch?, Bool) in
                let due = if let (_, at) = state.statistics { now() - at >= ttlSeconds }
                          else { state.statisticsFailedAt.map { now() - $0 >= ttlSeconds } ?? true }
                let leads = due && state.statisticsFetch == nil && !reachability.isUnreachable
                if leads { state.statisticsFetch = StatisticsFetch() }
                return (shownStatistics(state), state.statisticsFetch, leads)
            }
            if leads, let fetch {
                Thread.detachNewThread { [self] in
                    fetchStatistics()
                    state.withLock { $0.statisticsFetch = nil }
                    fetch.end()
                }
            }
            if let last { return last }
            fetch?.wait(upTo: options.firstStatisticsWaitSeconds)
            return state.withLock { state in
                shownStatistics(state) ?? FilesystemStatistics(usedBytes: 0, allocatedBytes: 0,
                                                               nodeCount: UInt64(state.tree.liveCount))
            }
        }
    }

    /// The figures `df` is shown: Dropbox's last, with the entries the tree holds now.
    private func shownStatistics(_ state: State) -> FilesystemStatistics? {
        state.statistics.map { stats, _ in
            FilesystemStatistics(usedBytes: stats.usedBytes, allocatedBytes: stats.allocatedBytes,
                                 nodeCount: UInt64(state.tree.liveCount))
        }
    }

    /// Asks Dropbox for the figures and keeps them. On a failure the last figures stand for another
    /// TTL, or zeros do before any: a failing Dropbox is not asked at every `df`.
    private func fetchStatistics() {
        let usage: SpaceUsage
        do throws(DropboxError) { usage = try api.spaceUsage() } catch {
            state.withLock { state in
                if let (stats, _) = state.statistics { state.statistics = (stats, now()) } else { state.statisticsFailedAt = now() }
            }
            return
        }
        state.withLock { state in
            state.statistics = (FilesystemStatistics(usedBytes: usage.used, allocatedBytes: usage.allocated,
                                                     nodeCount: UInt64(state.tree.liveCount)), now())
            state.statisticsFailedAt = nil
        }
    }

    /// One extended attribute's value. Only the `user.` namespace exists here; asking for another
    /// (`system.posix_acl_access`, `security.selinux`, ...) fails at once, without touching the tree.
    public func extendedAttribute(_ name: String, of inode: InodeNumber) throws(FSError) -> String {
        try reporting(.getxattr, inode: inode) { () throws(FSError) -> String in
            guard name.hasPrefix("user.") else { throw .attributeNamespaceUnsupported }
            guard let value = try attributeList(of: inode).first(where: { $0.name == name })?.value else {
                throw .noAttribute
            }
            return value
        }
    }

    /// Extended attributes shown on files: Dropbox's id, rev and content hash.
    public func extendedAttributes(of inode: InodeNumber) throws(FSError) -> [(name: String, value: String)] {
        try reporting(.listxattr, inode: inode) { () throws(FSError) in try attributeList(of: inode) }
    }

    private func attributeList(of inode: InodeNumber) throws(FSError) -> [(name: String, value: String)] {
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

    func attributes(of slot: Slot, in tree: Tree) -> NodeAttributes {
        if tree.isDirectory(slot) {
            // 2 + subfolders once listed; 1 ("unknown", as find and fts understand it) before that,
            // because counting subfolders would cost a listing per folder shown.
            let links = tree.isComplete(slot) ? 2 + tree.subfolderCount(slot) : 1
            return NodeAttributes(inode: slot.inode, serialNumber: tree.serialNumber(slot), kind: .directory,
                                  permissions: options.permissions(for: .directory),
                                  size: 4096, linkCount: links, modified: tree.folderTime(slot) ?? folderModified,
                                  uid: options.uid, gid: options.gid)
        }
        let kind: NodeKind = tree.isSymlink(slot) ? .symlink : .file
        return NodeAttributes(inode: slot.inode, serialNumber: tree.serialNumber(slot), kind: kind,
                              permissions: options.permissions(for: kind),
                              size: tree.size(slot), linkCount: 1, modified: tree.modified(slot),
                              uid: options.uid, gid: options.gid)
    }
}

/// One `users/get_space_usage` call under way: a `df` that has no figures yet waits on it, for a
/// while after it started.
final class StatisticsFetch: @unchecked Sendable {
    // `ended` is written once, under `condition`.
    private let condition = NSCondition()
    private var ended = false
    private let started = Date()

    func end() {
        condition.lock()
        ended = true
        condition.broadcast()
        condition.unlock()
    }

    /// Returns when the call has ended, or `seconds` after it started, whichever comes first: on a
    /// hung link only the first `df`s wait, not every one until the call's deadline.
    func wait(upTo seconds: Double) {
        let deadline = started.addingTimeInterval(seconds)
        condition.lock()
        while !ended, condition.wait(until: deadline) {}
        condition.unlock()
    }
}
