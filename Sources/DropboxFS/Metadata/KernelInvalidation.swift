/// A change the kernel must forget, because it may have cached the old state.
public enum KernelInvalidation: Sendable, Equatable {
    /// A name in a folder: a positive or negative dentry.
    case entry(parent: InodeNumber, name: String)
    /// A name whose node Dropbox no longer has there (deleted, moved away, or replaced under a
    /// handle open on it): the kernel forgets the entry as for `entry` and, where it still holds
    /// the node (a file open, a folder a shell is in), shows it with no link at once, as a disk
    /// shows a file removed while open. Node numbers are never reused, so the node cannot be
    /// one the name leads to later.
    case removed(parent: InodeNumber, name: String, node: InodeNumber)
    /// An inode's attributes and cached data (pages of a file, the listing of a folder).
    case inode(InodeNumber)
    /// An inode's attributes only: its pages stay (those of a node left behind for the handles
    /// open on it, `Tree.Upsert.replaced`).
    case attributes(InodeNumber)
    /// A byte range of a file's cached pages, which a long read has passed (`DropBehind`); its
    /// contents are unchanged.
    case pages(InodeNumber, Range<UInt64>)
}
