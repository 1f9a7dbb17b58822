// Open file and folder handles: what the kernel holds between open and release.

/// One open file: the rev it is pinned to, and where its bytes come from.
struct OpenFile {
    var slot: Slot
    var rev: String
    var size: UInt64
    /// The handle's read-ahead (issue 6).
    var stream: ReadStream? = nil
    /// Its reads go through the kernel's page cache (the handle is not `direct_io`).
    var pageCached = true
    /// For an export document: its exported bytes, which every read of the handle is served from.
    var exported: [UInt8]? = nil
    /// What `stat` showed of the file at open: answered for the handle's node once the tree no
    /// longer holds it (`fstat` of a file moved, deleted or replaced on Dropbox), as a disk answers
    /// for a file removed while open.
    var shownAtOpen: NodeAttributes? = nil
}

/// A handle number the kernel passes back on every read, readdir and release.
public struct FileHandleID: Hashable, Sendable {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
}

/// What opening a file tells the kernel.
public struct OpenedFile: Sendable {
    public var handle: FileHandleID
    /// True when the kernel's cached pages for this inode are still valid: the rev is the one
    /// the previous open saw, so `keep_cache` cannot serve stale bytes.
    public var contentUnchanged: Bool
    /// True when cached reads could mix versions: the content changed since the kernel was last
    /// told the file's size (cached reads are clamped to it), or a handle of another rev is still
    /// open. Such a handle bypasses the page cache (`direct_io`).
    public var kernelSizeMayBeStale: Bool = false
}
