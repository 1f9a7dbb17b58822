/// All mutable state of one mount, guarded by `DropboxFilesystem.state`.
struct State {
    var tree = Tree()
    var fileHandles: [FileHandleID: OpenFile] = [:]
    var directoryHandles: [FileHandleID: OpenDirectory] = [:]
    var nextHandle: UInt64 = 1
    var statistics: (FilesystemStatistics, Double)?
    /// When `users/get_space_usage` last failed before any figures came: asked again a TTL later.
    var statisticsFailedAt: Double?
    /// The `users/get_space_usage` call under way, if any (`statistics()`).
    var statisticsFetch: StatisticsFetch?
    var feed = FeedStatus()
    /// When caches were last dropped (SIGHUP): a folder listed before then is listed again, even
    /// while the feed is live.
    var cachesDroppedAt = -Double.infinity

    /// The next handle number. A directory takes its number before it is listed, so that the
    /// fill's pause for its reader (`FeedStatus.foldersReadAfterWaiting`) can start under the same
    /// lock hold as the reader's wait ends.
    mutating func reserveHandle() -> FileHandleID {
        let handle = FileHandleID(nextHandle)
        nextHandle += 1
        return handle
    }

    /// `newRevGetsANewNode`: whether a new rev of the file, while the handle is open, comes as a
    /// new node (`Tree.openFiles`), which the kernel finds by looking the name up again. Not for
    /// the mount point of a one-file mount: the kernel reaches that file through the root, which
    /// no new node can replace.
    mutating func addFileHandle(_ file: OpenFile, newRevGetsANewNode: Bool) -> FileHandleID {
        let handle = reserveHandle()
        fileHandles[handle] = file
        if newRevGetsANewNode { tree.openFiles.insert(file.slot) }
        return handle
    }

    /// Forgets a file handle; nil if it was not open.
    mutating func removeFileHandle(_ handle: FileHandleID) -> OpenFile? {
        guard let file = fileHandles.removeValue(forKey: handle) else { return nil }
        if !fileHandles.values.contains(where: { $0.slot == file.slot }) { tree.openFiles.remove(file.slot) }
        return file
    }
}

/// An open folder: its entries as a reader reading from the start found them (`.` and `..` first).
struct OpenDirectory {
    let folder: Slot
    /// The folder as it was shown when opened: `fstat` of the handle once Dropbox no longer has it.
    let shownAtOpen: NodeAttributes
    /// Whether opening it listed the folder: the kernel's cached listing may be older than the
    /// invalidations that listing queued, so it must not be kept.
    var listedByOpen = false
    /// Taken at the first read from offset 0, and again at each one after (`rewinddir`), or at a
    /// read from elsewhere when none was taken (the kernel answered the first reads from its
    /// cache). In increasing `offset`.
    var entries: [(name: String, slot: Slot, offset: Int)]?
}
