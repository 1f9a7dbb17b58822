/// One entry of a saved tree: a path below the mounted folder and what Dropbox said of it.
public struct PersistedEntry: Sendable, Equatable {
    /// Display-case path below the mounted folder, e.g. `/Album/dog.jpg`.
    public var path: String
    /// nil for a folder.
    public var file: PersistedFile?

    public init(path: String, file: PersistedFile?) { self.path = path; self.file = file }
}

public struct PersistedFile: Sendable, Equatable {
    public var size: UInt64
    public var modified: Int64
    public var id: String
    public var rev: String
    public var contentHash: String?
    /// A document Dropbox cannot download, shown and read as its export (`files/export`).
    public var isExport: Bool
    /// For an export, the document's own name, which a deletion gives.
    public var exportedFrom: String?
    /// For a symbolic link, its target.
    public var symlinkTarget: String?

    public init(size: UInt64, modified: Int64, id: String, rev: String, contentHash: String?, isExport: Bool = false,
                exportedFrom: String? = nil, symlinkTarget: String? = nil) {
        self.size = size; self.modified = modified; self.id = id; self.rev = rev; self.contentHash = contentHash
        self.isExport = isExport; self.exportedFrom = exportedFrom; self.symlinkTarget = symlinkTarget
    }
}

/// A whole tree and the cursor that continues from it.
public struct PersistedTree: Sendable, Equatable {
    public var cursor: String
    /// Parents before children.
    public var entries: [PersistedEntry]

    public init(cursor: String, entries: [PersistedEntry]) { self.cursor = cursor; self.entries = entries }
}

/// Where a mount keeps its tree between runs, so a remount answers at once and catches up with
/// `list_folder/continue` instead of listing everything again. One store serves one account and
/// mounted folder. Failures are the store's to log; the mount works without it.
public protocol MetadataStore: Sendable {
    func load() -> PersistedTree?
    func save(_ tree: PersistedTree)
    /// Forgets the saved tree (its cursor was reset).
    func clear()
}
