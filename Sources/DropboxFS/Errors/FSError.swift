import DropboxClient

/// What a filesystem operation can fail with, in filesystem words. The core logs a failure once, with
/// its context, where the operation leaves it (`FailureReport.swift`); the FUSE adapter maps each
/// case to an errno in exactly one place (`Errno.swift` there). The core never speaks errno.
public enum FSError: Error, Sendable, Equatable {
    case notFound
    case notADirectory
    case isADirectory
    /// Opening a symbolic link itself (the kernel follows links before it opens; only
    /// `O_NOFOLLOW` reaches one).
    case symbolicLink
    /// Reading the target of what is no symbolic link.
    case notASymbolicLink
    /// Any attempt to change anything: the mount is read-only by design.
    case readOnly
    /// Dropbox refused the credentials, or the file cannot be read (e.g. not downloadable).
    case accessDenied
    /// A handle the core does not know (already released, or never opened).
    case badHandle
    /// The extended attribute does not exist on this node.
    case noAttribute
    /// The extended attribute's namespace (ACLs, security labels, ...) is not supported here.
    /// Tools such as `ls -l` stop asking a filesystem that says so, which saves two round trips per file.
    case attributeNamespaceUnsupported
    /// The rev this handle reads can no longer be served: Dropbox no longer has it (a handle reads
    /// on at its rev through moves, deletions and new revs while Dropbox keeps that rev). ESTALE,
    /// as NFS and mountpoint-s3 answer: the handle is stale, and opening the file again reads what
    /// is there now.
    case changedSinceOpen
    /// A node the tree no longer holds (its file moved, deleted, or given a new rev while open,
    /// on Dropbox), reached through an entry the kernel still had. ESTALE: open, stat and the
    /// other calls by path look the path up again once (the kernel's retry on ESTALE), and find
    /// what is there now, or nothing. (While a handle has the node open, getattr answers what
    /// the handle saw instead, for its `fstat`.)
    case nodeGone
    /// The caller's buffer cannot hold the answer (getxattr and listxattr with too small a size).
    case bufferTooSmall
    /// Dropbox (or the way to it) failed; the operation cannot be answered correctly.
    case upstream(DropboxError)

    /// Translates a Dropbox answer into filesystem terms. Route errors that name a path problem
    /// become the matching filesystem error; everything else is an upstream failure.
    init(_ error: DropboxError) {
        if error.isRoute("path", "not_found") { self = .notFound }
        else if error.isRoute("path", "not_folder") { self = .notADirectory }
        else if error.isRoute("path", "not_file") { self = .isADirectory }
        else if case .auth = error { self = .accessDenied }
        else { self = .upstream(error) }
    }
}

extension FSError: CustomStringConvertible {
    /// A short phrase for logs; an upstream failure carries Dropbox's own summary (never a token).
    public var description: String {
        switch self {
        case .notFound: "no such file or folder"
        case .notADirectory: "not a folder"
        case .isADirectory: "is a folder"
        case .symbolicLink: "is a symbolic link"
        case .notASymbolicLink: "not a symbolic link"
        case .readOnly: "the mount is read-only"
        case .accessDenied: "access denied"
        case .badHandle: "unknown handle"
        case .noAttribute: "no such attribute"
        case .attributeNamespaceUnsupported: "attribute namespace not supported"
        case .changedSinceOpen: "the version it was opened at is no longer on Dropbox"
        case .nodeGone: "no longer in the tree at this node"
        case .bufferTooSmall: "buffer too small"
        case .upstream(let error): error.description
        }
    }
}
