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

    mutating func addFileHandle(_ file: OpenFile) -> FileHandleID {
        let handle = reserveHandle()
        fileHandles[handle] = file
        return handle
    }
}

/// An open folder: its entries as a reader reading from the start found them (`.` and `..` first).
struct OpenDirectory {
    let folder: Slot
    /// Whether opening it listed the folder: the kernel's cached listing may be older than the
    /// invalidations that listing queued, so it must not be kept.
    var listedByOpen = false
    /// Taken at the first read from offset 0, and again at each one after (`rewinddir`), or at a
    /// read from elsewhere when none was taken (the kernel answered the first reads from its
    /// cache). In increasing `offset`.
    var entries: [(name: String, slot: Slot, offset: Int)]?
}
