/// An inode number as the kernel sees it. 1 is the mount's root, as FUSE requires.
public struct InodeNumber: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public static let root = InodeNumber(1)
    public static func < (a: InodeNumber, b: InodeNumber) -> Bool { a.rawValue < b.rawValue }
    public var description: String { String(rawValue) }
}

public enum NodeKind: Sendable, Equatable {
    case file
    case directory
}

/// What `stat` shows for one node.
public struct NodeAttributes: Sendable, Equatable {
    public var inode: InodeNumber
    public var kind: NodeKind
    /// Permission bits only (e.g. 0o444); the adapter adds the file-type bits.
    public var permissions: UInt32
    public var size: UInt64
    public var linkCount: UInt32
    public var modified: Int64
    public var uid: UInt32
    public var gid: UInt32

    /// 512-byte blocks, as `du` expects.
    public var blocks: UInt64 { (size + 511) / 512 }
}

/// One entry of a directory handle, with what readdirplus needs besides the name.
public struct DirectoryEntry: Sendable, Equatable {
    public var name: String
    /// nil when the entry was removed after the directory was opened: its place in the offsets
    /// stays, but nothing is shown for it.
    public var attributes: NodeAttributes?
}

/// What `statfs` shows: sizes in bytes from `users/get_space_usage`.
public struct FilesystemStatistics: Sendable, Equatable {
    public var usedBytes: UInt64
    public var allocatedBytes: UInt64
    public var nodeCount: UInt64
    public static let blockSize: UInt64 = 4096
    public static let maximumNameLength: UInt64 = 255
}

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

/// Options a user sets at mount time that shape what the core answers.
public struct FilesystemOptions: Sendable {
    /// The Dropbox folder shown as the mount's root: `""` for the whole account, else `/Photos`.
    public var rootPath: String
    /// How long a listed folder, and the attributes it gave, are trusted before Dropbox is asked again.
    public var metadataTTL: Duration
    public var uid: UInt32
    public var gid: UInt32
    /// When set, permissions are 0o666 and 0o777 less this mask (sshfs and rclone semantics);
    /// when nil they are 0o444 for files and 0o555 for folders.
    public var umask: UInt32?
    /// Match names the way Dropbox does (case-insensitively) instead of exactly.
    public var caseInsensitive: Bool
    /// How file contents are read ahead and cached (`Reading/`).
    public var readAhead = ReadAheadOptions()
    /// Show documents Dropbox cannot download (Paper and other cloud docs) as their export, read
    /// through `files/export`; when false they are left out.
    public var showExports = true

    public init(rootPath: String = "", metadataTTL: Duration = .seconds(60), uid: UInt32 = 0,
                gid: UInt32 = 0, umask: UInt32? = nil, caseInsensitive: Bool = false) {
        self.rootPath = rootPath; self.metadataTTL = metadataTTL; self.uid = uid; self.gid = gid
        self.umask = umask; self.caseInsensitive = caseInsensitive
    }

    func permissions(for kind: NodeKind) -> UInt32 {
        switch (kind, umask) {
        case (.file, nil): 0o444
        case (.directory, nil): 0o555
        case (.file, let mask?): 0o666 & ~mask
        case (.directory, let mask?): 0o777 & ~mask
        }
    }
}

/// The current time as seconds on a monotonic clock. Injected so tests can drive TTLs.
public typealias MonotonicSeconds = @Sendable () -> Double

public enum SystemClock {
    private static let origin = ContinuousClock.now
    /// Seconds since process start on the continuous clock, which never jumps with wall time.
    public static let monotonic: MonotonicSeconds = {
        let elapsed = ContinuousClock.now - origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}
