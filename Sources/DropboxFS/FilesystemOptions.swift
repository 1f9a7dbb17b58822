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
    /// How long a reader waits for the first listing to reach a folder it is listing anyway. A
    /// subtree's pages take a round trip each, so this bounds what one `ls` can lose to a large
    /// subtree; within it, `find` right after mounting walks behind the first listing instead of
    /// listing each folder again, one round trip after another. A folder reached by name rather
    /// than by listing its parent is not waited for (`Freshness.swift`). Tests lengthen it.
    public var fillWaitSeconds: Double = 2
    /// How long `df` waits for the first figures from `users/get_space_usage` before it answers
    /// zeros and lets the call finish in the background: a hung link must not hold `df`, or a
    /// file manager's free-space line, for the call's whole deadline. Tests shorten it.
    public var firstStatisticsWaitSeconds: Double = 5
    /// Listings the first full listing runs at once (subtrees of the mounted folder); 1 lists it
    /// as one recursive chain of pages.
    public var listingConcurrency = 8
    /// Dropbox could not be reached when mounting and the tree comes from the persistent cache:
    /// what needs Dropbox fails at once until the change feed reaches it (`Reachability`).
    public var startsOffline = false
    /// False when nothing follows Dropbox's changes (a shared link, which has no change feed):
    /// folders are listed again when their TTL ends, and pins list the folders they cover.
    public var followsChanges = true
    /// A single file mounted on a file (a shared link to a file): the root inode stands for this
    /// file of the mounted folder instead of the folder itself.
    public var rootFileName: String?
    /// Bytes per second pinned folders may be fetched at, all pins together; nil: as fast as the
    /// link and four files at a time allow (`--pin-bandwidth`).
    public var pinBandwidth: UInt64?
    /// How thumbnails are fetched, when the mount keeps them (`--thumbnails`).
    public var thumbnails = ThumbnailOptions()

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
        // As every link on Linux: the target's own modes decide.
        case (.symlink, _): 0o777
        }
    }
}
