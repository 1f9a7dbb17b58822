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
///
/// Entries pass one at a time (a save) or a batch at a time (a load), never as one array: for an
/// account of a million entries such an array is hundreds of MiB beside the tree itself, and a
/// mount's memory is bounded by its tree, not by twice or three times it.
public protocol MetadataStore: Sendable {
    /// Reads the saved tree: hands its entries to `receive` a batch at a time, parents before
    /// children, and returns the cursor saved with them. nil when nothing is saved; a file found
    /// damaged part way also gives nil, after the batches read until then.
    func load(_ receive: ([PersistedEntry]) -> Void) -> String?
    /// Replaces the saved tree with the entries `entries` hands to its argument, parents before
    /// children, and the cursor that continues from them. `entries` may be called more than once
    /// (a store that finds its file damaged starts again on a fresh one). Returns whether the tree
    /// was written; a store that could not write it (a full disk, say) logs why.
    @discardableResult
    func save(cursor: String, entries: (_ each: (PersistedEntry) -> Void) -> Void) -> Bool
    /// Forgets the saved tree (its cursor was reset).
    func clear()
}

extension MetadataStore {
    /// The whole saved tree at once, for tests and small trees.
    public func load() -> PersistedTree? {
        var entries: [PersistedEntry] = []
        guard let cursor = load({ entries += $0 }) else { return nil }
        return PersistedTree(cursor: cursor, entries: entries)
    }

    @discardableResult
    public func save(_ tree: PersistedTree) -> Bool {
        save(cursor: tree.cursor) { each in tree.entries.forEach(each) }
    }
}
