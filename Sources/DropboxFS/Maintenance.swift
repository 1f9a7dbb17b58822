// What an administrator can ask of a running mount through signals (the FUSE adapter turns
// SIGHUP and SIGUSR1 into these calls): drop what is cached, and report what the mount holds.

import Foundation

/// A snapshot of what one mount holds, for the stats line.
public struct FilesystemUsage: Sendable {
    /// Entries in the tree, and roughly the bytes they take.
    public var entries: Int
    public var treeBytes: Int
    /// File and folder handles the kernel holds open.
    public var openFiles: Int
    public var openDirectories: Int
    /// Read-ahead memory reserved now, of the budget (`--readahead-memory`).
    public var readAheadBytes: UInt64
    public var readAheadBudget: UInt64 = 0
    /// The block cache's bytes on disk and its capacity; nil without a block cache.
    public var blockCacheBytes: UInt64?
    public var blockCacheCapacity: UInt64?
    /// Reads fetched on their own, outside any read-ahead (random, behind or beside a stream),
    /// and the bytes they downloaded, since mounting. Their buffers are outside the budget.
    public var directReads: Int = 0
    public var directReadBytes: UInt64 = 0
    /// Bytes of page cache the kernel was told to drop behind long streams (`DropBehind`), since
    /// mounting.
    public var droppedPageBytes: UInt64 = 0
    /// The link as downloads measured it (`LinkEstimate`): seconds to a request's first byte and
    /// bytes per second of one request's body; nil before the first part arrived.
    public var linkLatency: Double?
    public var linkRate: Double?
}

extension DropboxFilesystem {
    /// Forgets every listing, so each folder is listed again when next used (with the kernel told
    /// of whatever changed), and tells the kernel to forget what it caches of every node. Nodes
    /// and their numbers stay: the kernel may hold them. For a tree Dropbox changed in a way the
    /// feed did not report, or that went stale while the feed was down.
    public func dropCaches() {
        let inodes = state.withLock { state -> [KernelInvalidation] in
            state.cachesDroppedAt = now()
            state.statistics = nil
            var inodes: [KernelInvalidation] = [.inode(Slot.root.inode)]
            inodes.reserveCapacity(state.tree.liveCount)
            state.tree.walk { inodes.append(.inode($0.inode)) }
            return inodes
        }
        invalidate(inodes)
        logger.notice("dropped cached listings; folders are listed again when next used",
                      metadata: ["entries": "\(inodes.count)"])
    }

    public var usage: FilesystemUsage {
        let (entries, bytes, files, folders) = state.withLock {
            ($0.tree.liveCount, $0.tree.approximateBytes, $0.fileHandles.count, $0.directoryHandles.count)
        }
        let direct = reader.directReadCounts
        let link = reader.linkEstimate
        return FilesystemUsage(entries: entries, treeBytes: bytes, openFiles: files, openDirectories: folders,
                               readAheadBytes: reader.budget.usage.reserved, readAheadBudget: reader.options.memoryBudget,
                               blockCacheBytes: reader.cache?.storedBytes, blockCacheCapacity: reader.cache?.capacity,
                               directReads: direct.reads, directReadBytes: direct.bytes,
                               droppedPageBytes: droppedPageBytes.load(ordering: .relaxed),
                               linkLatency: link.latency, linkRate: link.rate)
    }
}
