// What the kernel is told about nodes: numbers, attributes, directory entries, statfs figures.

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
    /// A symbolic link (`readLink` gives its target).
    case symlink
}

/// What `stat` shows for one node.
public struct NodeAttributes: Sendable, Equatable {
    /// The kernel's handle for the node (FUSE's node id), valid while mounted.
    public var inode: InodeNumber
    /// The inode number shown (`st_ino`, `d_ino`): the same in every mount (`Tree.serialNumber`).
    public var serialNumber: UInt64
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
    public var attributes: NodeAttributes
    /// Where a read that follows this entry starts (its `d_off`): stable for as long as the mount
    /// runs, whatever else is added to or removed from the folder meanwhile.
    public var offset: Int
}

/// What `statfs` shows: sizes in bytes from `users/get_space_usage`.
public struct FilesystemStatistics: Sendable, Equatable {
    public var usedBytes: UInt64
    public var allocatedBytes: UInt64
    public var nodeCount: UInt64
    public static let blockSize: UInt64 = 4096
    public static let maximumNameLength = UInt64(EntryName.longest)
    /// Inodes shown free: Dropbox sets no limit on entries, and none free (`df -i` at 100%) sets
    /// off disk-full alerts that watch inodes. rclone shows as many.
    public static let freeNodes: UInt64 = 1_000_000_000
}
