/// All mutable state of one mount, guarded by `DropboxFilesystem.state`.
struct State {
    var tree = Tree()
    var fileHandles: [FileHandleID: OpenFile] = [:]
    var directoryHandles: [FileHandleID: [(name: String, slot: Slot)]] = [:]
    var nextHandle: UInt64 = 1
    var lastOpenedRev: [Slot: String] = [:]
    var statistics: (FilesystemStatistics, Double)?
    var feed = FeedStatus()
    /// When caches were last dropped (SIGHUP): a folder listed before then is listed again, even
    /// while the feed is live.
    var cachesDroppedAt = -Double.infinity

    mutating func addFileHandle(_ file: OpenFile) -> FileHandleID {
        let handle = FileHandleID(nextHandle)
        nextHandle += 1
        fileHandles[handle] = file
        return handle
    }

    mutating func addDirectoryHandle(_ entries: [(name: String, slot: Slot)]) -> FileHandleID {
        let handle = FileHandleID(nextHandle)
        nextHandle += 1
        directoryHandles[handle] = entries
        return handle
    }
}
