// The Dropbox API v2 metadata shapes dbx-mount reads (spec files.stone, users.stone), reduced to
// the fields a read-only mount uses. Decoding lives in `JSONDecoding.swift`; nothing here knows HTTP.

/// Seconds since the Unix epoch, as Dropbox's `%Y-%m-%dT%H:%M:%SZ` timestamps carry no fraction.
public typealias UnixSeconds = Int64

public struct FileMetadata: Sendable, Equatable {
    public var name: String
    public var id: String
    public var pathLower: String?
    public var pathDisplay: String?
    public var clientModified: UnixSeconds
    public var serverModified: UnixSeconds
    /// Changes whenever the content changes; reads are pinned to it with `rev:<rev>`.
    public var rev: String
    public var size: UInt64
    public var isDownloadable: Bool
    public var contentHash: String?
    /// For files Dropbox cannot download (`is_downloadable=false`): the format `files/export` gives.
    public var exportAs: String?
    /// A symbolic link's target (`symlink_info.target`), as the link on the computer that synced
    /// it held it; nil for a file that is no link.
    public var symlinkTarget: String?

    public init(name: String, id: String, pathLower: String?, pathDisplay: String?,
                clientModified: UnixSeconds, serverModified: UnixSeconds, rev: String, size: UInt64,
                isDownloadable: Bool = true, contentHash: String? = nil, exportAs: String? = nil,
                symlinkTarget: String? = nil) {
        self.name = name; self.id = id; self.pathLower = pathLower; self.pathDisplay = pathDisplay
        self.clientModified = clientModified; self.serverModified = serverModified
        self.rev = rev; self.size = size; self.isDownloadable = isDownloadable
        self.contentHash = contentHash; self.exportAs = exportAs; self.symlinkTarget = symlinkTarget
    }
}

public struct FolderMetadata: Sendable, Equatable {
    public var name: String
    public var id: String
    public var pathLower: String?
    public var pathDisplay: String?

    public init(name: String, id: String, pathLower: String?, pathDisplay: String?) {
        self.name = name; self.id = id; self.pathLower = pathLower; self.pathDisplay = pathDisplay
    }
}

public struct DeletedMetadata: Sendable, Equatable {
    public var name: String
    public var pathLower: String?
    public var pathDisplay: String?

    public init(name: String, pathLower: String?, pathDisplay: String?) {
        self.name = name; self.pathLower = pathLower; self.pathDisplay = pathDisplay
    }
}

/// `Metadata` with its subtypes, as the `.tag` field names them.
public enum Metadata: Sendable, Equatable {
    case file(FileMetadata)
    case folder(FolderMetadata)
    case deleted(DeletedMetadata)

    public var name: String {
        switch self {
        case .file(let f): f.name
        case .folder(let f): f.name
        case .deleted(let d): d.name
        }
    }

    public var pathLower: String? {
        switch self {
        case .file(let f): f.pathLower
        case .folder(let f): f.pathLower
        case .deleted(let d): d.pathLower
        }
    }

    public var pathDisplay: String? {
        switch self {
        case .file(let f): f.pathDisplay
        case .folder(let f): f.pathDisplay
        case .deleted(let d): d.pathDisplay
        }
    }
}

/// One page of `files/list_folder` or `files/list_folder/continue`.
public struct ListFolderPage: Sendable, Equatable {
    public var entries: [Metadata]
    public var cursor: String
    public var hasMore: Bool
    /// Entries of the page left out (an unknown `.tag`, a name with a slash, a field missing),
    /// and why the first was: one entry the mount cannot show must not keep a folder from it.
    public var skippedEntries: Int
    public var firstSkipReason: String?

    public init(entries: [Metadata], cursor: String, hasMore: Bool, skippedEntries: Int = 0,
                firstSkipReason: String? = nil) {
        self.entries = entries; self.cursor = cursor; self.hasMore = hasMore
        self.skippedEntries = skippedEntries; self.firstSkipReason = firstSkipReason
    }
}

/// `files/list_folder/longpoll`'s result.
public struct LongpollResult: Sendable, Equatable {
    public var changes: Bool
    /// Seconds the server asks us to wait before polling again.
    public var backoff: Int?

    public init(changes: Bool, backoff: Int?) { self.changes = changes; self.backoff = backoff }
}

/// The parts of `users/get_current_account` (`FullAccount`) the mount uses.
public struct Account: Sendable, Equatable {
    public var accountID: String
    public var displayName: String
    public var email: String
    public var rootNamespaceID: String
    public var homeNamespaceID: String

    public init(accountID: String, displayName: String, email: String,
                rootNamespaceID: String, homeNamespaceID: String) {
        self.accountID = accountID; self.displayName = displayName; self.email = email
        self.rootNamespaceID = rootNamespaceID; self.homeNamespaceID = homeNamespaceID
    }
}

/// `users/get_space_usage`: bytes used, and bytes allocated (individual or team allocation).
public struct SpaceUsage: Sendable, Equatable {
    public var used: UInt64
    public var allocated: UInt64

    public init(used: UInt64, allocated: UInt64) { self.used = used; self.allocated = allocated }
}
