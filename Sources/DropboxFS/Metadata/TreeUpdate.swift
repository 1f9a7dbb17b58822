import DropboxClient
import Logging

/// How one batch of Dropbox metadata lands in the tree.
struct TreeUpdate {
    let rootPath: String
    private let rootFolded: [UInt8]
    private let rootDepth: Int
    let logger: Logger
    /// Kernel invalidations the batch requires, in order.
    var invalidations: [KernelInvalidation] = []
    /// Slots written by the batch (a fill collects them to find what vanished).
    var touched: Set<Slot>?
    /// Files whose content changed (a new rev) or that were added, for the thumbnailer to refresh
    /// those it had thumbnails of.
    var changedFiles: [Slot] = []

    /// Whether documents Dropbox cannot download appear as their exports.
    let showExports: Bool

    init(rootPath: String, logger: Logger, collectTouched: Bool = false, showExports: Bool = true) {
        self.rootPath = rootPath
        rootFolded = FoldedName(rootPath).bytes
        rootDepth = rootPath.split(separator: "/").count
        self.logger = logger
        self.showExports = showExports
        touched = collectTouched ? [] : nil
    }

    /// Replaces the children of `folder` with one whole non-recursive listing, and marks it complete.
    /// `notify` is false for a folder's first listing: the kernel cannot have cached anything in it.
    mutating func replaceChildren(of folder: Slot, with entries: [Metadata], in tree: inout Tree, listedAt: Double,
                                  notify: Bool) {
        var seen = Set<Slot>()
        for entry in entries {
            guard let (name, details) = acceptable(entry, in: "listing") else { continue }
            if let earlier = tree.child(of: folder, folded: FoldedName(name)), seen.contains(earlier) {
                // A file takes its name from a document's export listed before it; otherwise the
                // first entry keeps the name.
                let fileOverExport = details.map { !$0.isExport } == true && tree.details(earlier)?.isExport == true
                if !fileOverExport {
                    logSkipped(name, export: details?.isExport == true)
                    continue
                }
            }
            let (slot, outcome) = tree.upsert(parent: folder, name: name, details: details)
            seen.insert(slot)
            if notify { record(outcome, slot: slot, name: name, parent: folder) }
        }
        for child in tree.children(of: folder) where !seen.contains(child) {
            if notify { invalidations.append(.removed(parent: folder.inode, name: tree.name(child), node: child.inode)) }
            tree.remove(child)
        }
        if notify { invalidations.append(.inode(folder.inode)) }
        tree.markComplete(folder, listedAt: listedAt)
        settleFolderTimes(in: &tree, notify: notify)
    }

    /// Removes everything below the mounted folder, which Dropbox no longer has.
    mutating func emptyMountedFolder(in tree: inout Tree, listedAt: Double, notify: Bool) {
        guard tree.hasChildren(.root) else { return }
        replaceChildren(of: .root, with: [], in: &tree, listedAt: listedAt, notify: notify)
    }

    /// Settles the times of the folders the batch changed, which the kernel must forget too.
    private mutating func settleFolderTimes(in tree: inout Tree, notify: Bool) {
        let retimed = tree.settleFolderTimes()
        if notify { invalidations.append(contentsOf: retimed.map { .inode($0.inode) }) }
    }

    /// Applies entries of a recursive listing or of the change feed, in order: missing parents are
    /// created, a file replaces a subtree, a folder keeps its children, a deleted entry removes one.
    /// With `newFoldersListedAt` (the feed, once the tree is whole), a folder that first appears here
    /// is complete from birth: the recursive cursor reports everything that lands in it.
    mutating func apply(_ entries: some Sequence<Metadata>, to tree: inout Tree, notify: Bool, newFoldersListedAt: Double? = nil) {
        // The folder the last entry landed in, by the display path the walk followed. A listing
        // sends a folder's entries one after another, so most entries skip the walk from the root.
        // The slot stays valid: only an entry at that folder's own path or above can remove it, and
        // such an entry misses the cache (its parent is higher up) and replaces it after its walk.
        var lastParent: (displayPath: Substring, slot: Slot)?
        for entry in entries {
            // Checked before walking the path: an entry that will be skipped (a name with `/`,
            // `..`, ...) must not leave behind the folders its path implies (found by fuzzing).
            var accepted: (String, FileDetails?)?
            if case .deleted = entry {} else {
                guard let ok = acceptable(entry, in: "change") else { continue }
                accepted = ok
            }
            let parentKey = (entry.pathDisplay ?? entry.pathLower).flatMap(Self.parentPath)
            let parent: Slot
            let leaf: String
            if let key = parentKey, let cached = lastParent, cached.displayPath == key, isUnderRoot(entry) {
                parent = cached.slot
                leaf = entry.name
            } else {
                guard let components = relativeComponents(entry) else { continue }
                guard !components.isEmpty else {
                    // The mounted folder itself. Deleted (or moved away), it takes its contents
                    // with it, as any deleted folder does; a folder entry for it changes nothing.
                    // Only an entry that names it exactly: "/Photos/" or "/Photos/." from a hostile
                    // server split to the same components, and the whole account cannot be deleted.
                    if case .deleted = entry, !rootPath.isEmpty, let lower = entry.pathLower, FoldedName(lower).bytes == rootFolded {
                        emptyMountedFolder(in: &tree, listedAt: tree.listedAt(.root), notify: notify)
                    }
                    continue
                }
                guard let found = walkToParent(of: entry, along: components, in: &tree, notify: notify,
                                               newFoldersListedAt: newFoldersListedAt) else { continue }
                parent = found
                leaf = components.last!
                if let key = parentKey { lastParent = (key, found) }
            }
            if case .deleted = entry {
                // A deleted document was shown under its export name, which the deleted entry does
                // not give: try its name with each extension exports have had, and take only the
                // export made from this document (deleting "Budget.gdoc" must not take the export
                // "Budget.xlsx" of "Budget.gsheet").
                let leafFolded = FoldedName(leaf)
                var found = tree.child(of: parent, folded: leafFolded)
                if found == nil {
                    for ext in tree.exportExtensions {   // only this document's export can match
                        guard let slot = tree.child(of: parent, folded: FoldedName(ExportName.visibleName(leaf, exportAs: ext))),
                              let details = tree.details(slot), details.isExport,
                              details.exportedFrom.map({ FoldedName($0) == leafFolded }) ?? true else { continue }
                        found = slot
                        break
                    }
                }
                if let gone = found {
                    if notify {
                        invalidations.append(.removed(parent: parent.inode, name: tree.name(gone), node: gone.inode))
                        invalidations.append(.inode(parent.inode))
                    }
                    tree.remove(gone)
                }
                continue
            }
            guard let (name, details) = accepted else { continue }
            if exportGivesWay(details, name: name, in: parent, tree: tree) {
                logSkipped(name, export: true)
                continue
            }
            let (slot, outcome) = tree.upsert(parent: parent, name: name, details: details)
            if notify { record(outcome, slot: slot, name: name, parent: parent) }
            if details == nil, outcome == .added, let time = newFoldersListedAt { tree.markComplete(slot, listedAt: time) }
            touched?.insert(slot)
        }
        settleFolderTimes(in: &tree, notify: notify)
    }

    /// Whether a document's export must give way to what already has its name in `parent`: a
    /// file or folder of its own (`Notes.html` beside `Notes.paper`), or another document's
    /// export. Otherwise the two would share one node and its bytes would flip with each change.
    private func exportGivesWay(_ details: FileDetails?, name: String, in parent: Slot, tree: Tree) -> Bool {
        guard let details, details.isExport, let existing = tree.child(of: parent, folded: FoldedName(name)) else { return false }
        guard let old = tree.details(existing), old.isExport else { return true }
        return old.exportedFrom.map(FoldedName.init) != details.exportedFrom.map(FoldedName.init)
    }

    private func logSkipped(_ name: String, export: Bool) {
        logger.warning(export ? "skipping a document's export: another entry has its name"
                              : "skipping a second entry whose name differs only in case",
                       metadata: ["name": "\(name)"])
    }

    private mutating func record(_ outcome: Tree.Upsert, slot: Slot, name: String, parent: Slot) {
        switch outcome {
        case .unchanged:
            break
        case .added:
            invalidations.append(.entry(parent: parent.inode, name: name))
            invalidations.append(.inode(parent.inode))
            // A file replaced by deleting and adding it is new content at a known path too.
            changedFiles.append(slot)
        case .updated(let contentChanged, let renamedFrom):
            if let old = renamedFrom {
                // The new spelling too: the kernel may hold a "no such name" for it.
                invalidations.append(.entry(parent: parent.inode, name: old))
                invalidations.append(.entry(parent: parent.inode, name: name))
                invalidations.append(.inode(parent.inode))
            }
            if contentChanged { changedFiles.append(slot) }
            invalidations.append(.inode(slot.inode))
        case .replaced(let former, let formerName):
            // The kernel's entry (under either spelling) leads to the old node, which only the
            // handles already open on it still use: the next lookup finds the new one. The old
            // node shows no link from now on, and its attributes go too, not its pages, which its
            // handles read on.
            invalidations.append(.attributes(former.inode))
            invalidations.append(.removed(parent: parent.inode, name: formerName, node: former.inode))
            if !formerName.utf8.elementsEqual(name.utf8) { invalidations.append(.entry(parent: parent.inode, name: name)) }
            invalidations.append(.inode(parent.inode))
            changedFiles.append(slot)
        }
    }

    /// The entry's name and file details, or nil (with a log line) for what cannot be shown.
    private func acceptable(_ entry: Metadata, in context: String) -> (String, FileDetails?)? {
        let name = entry.name
        guard EntryName.isValid(name) else {
            logger.warning("skipping an entry whose name cannot be a file name",
                           metadata: ["context": "\(context)", "name": "\(name.debugDescription)"])
            return nil
        }
        switch entry {
        case .folder:
            return (name, nil)
        case .file(let f):
            if let target = f.symlinkTarget {
                // Shown as the link it is, whatever Dropbox would download for it. A target that
                // cannot be a link's (empty, or holding NUL) leaves the entry out.
                guard !target.isEmpty, !target.utf8.contains(0) else { return nil }
                return (name, FileDetails(size: UInt64(target.utf8.count), modified: f.clientModified, id: f.id,
                                          rev: f.rev, contentHash: nil, symlinkTarget: target))
            }
            guard f.isDownloadable else {
                // Paper and other cloud docs cannot be read with files/download: they are shown as
                // their export (`files/export`) under the export format's name, or left out.
                guard showExports, let format = f.exportAs else { return nil }
                let visible = ExportName.visibleName(name, exportAs: format)
                guard EntryName.isValid(visible) else { return nil }
                return (visible, FileDetails(size: f.size, modified: f.clientModified, id: f.id, rev: f.rev,
                                             contentHash: nil, isExport: true, exportedFrom: name))
            }
            return (name, FileDetails(size: f.size, modified: f.clientModified, id: f.id, rev: f.rev,
                                      contentHash: f.contentHash))
        case .deleted:
            return nil
        }
    }

    /// Finds (or, for an entry that is not a deletion, creates) the folders on the entry's path;
    /// nil when a deletion's folder is not known or a folder name on the path cannot be shown.
    private mutating func walkToParent(of entry: Metadata, along components: [String], in tree: inout Tree,
                                       notify: Bool, newFoldersListedAt: Double?) -> Slot? {
        var parent = Slot.root
        for component in components.dropLast() {
            if let next = tree.child(of: parent, folded: FoldedName(component)), tree.isDirectory(next) {
                parent = next
                continue
            }
            if case .deleted = entry { return nil }   // nothing under an unknown path to delete
            guard EntryName.isValid(component) else { return nil }
            let (slot, outcome) = tree.upsert(parent: parent, name: component, details: nil)
            if notify { record(outcome, slot: slot, name: component, parent: parent) }
            if outcome == .added, let time = newFoldersListedAt { tree.markComplete(slot, listedAt: time) }
            touched?.insert(slot)
            parent = slot
        }
        return parent
    }

    /// Whether the entry's lower-case path is the mounted folder or lies below it.
    private func isUnderRoot(_ entry: Metadata) -> Bool {
        guard let lower = entry.pathLower else { return false }
        let lowerBytes = FoldedName(lower).bytes
        guard lowerBytes.starts(with: rootFolded) else { return false }
        let rest = lowerBytes.dropFirst(rootFolded.count)
        return rest.isEmpty || rest.first == UInt8(ascii: "/")
    }

    /// A path without its last component ("/a/b/c" gives "/a/b"), the key under which `apply`
    /// remembers the folder the walk found. Nil unless the path is plain ("/" then non-empty
    /// names), so that one key always stands for the same components of the walk: "/A/" or
    /// "/A//b" (never from Dropbox, but a hostile server may send them) split differently.
    private static func parentPath(_ path: String) -> Substring? {
        let utf8 = path.utf8
        guard utf8.first == UInt8(ascii: "/"), utf8.last != UInt8(ascii: "/") else { return nil }
        var previous: UInt8 = 0
        for byte in utf8 {
            if byte == UInt8(ascii: "/") && previous == UInt8(ascii: "/") { return nil }
            previous = byte
        }
        guard let slash = utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        return path[..<slash]
    }

    /// The entry's path below the mounted folder, as display-case components; nil when it lies
    /// outside the mounted folder or carries no path.
    private func relativeComponents(_ entry: Metadata) -> [String]? {
        guard isUnderRoot(entry), let lower = entry.pathLower else { return nil }
        // Parent names come from path_display (which may have the wrong case in places), the leaf from `name`.
        let display = entry.pathDisplay ?? lower
        var components = display.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard components.count >= rootDepth else { return nil }
        components.removeFirst(rootDepth)
        if !components.isEmpty { components[components.count - 1] = entry.name }
        return components
    }
}
