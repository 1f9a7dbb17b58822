// A compact in-memory tree of the mounted folder, built to hold a million entries in a few hundred
// bytes each (issue 5's memory target is 300 bytes per entry).
//
// - Every node is one fixed-size `Record` in one array; its index (a "slot") is its identity, and the
//   node id the kernel addresses it by is slot + 1, so the root (slot 0) is node 1. Slots are never
//   reused while mounted: the kernel may still hold an old node id, and reuse would alias it. The
//   inode number `stat` shows is another, the same in every mount (`serialNumber`).
// - Names, Dropbox ids, revs and content hashes live in one byte arena; a record holds offsets.
//   Space freed by deletions is reclaimed by compacting the arena when it is mostly garbage.
// - Children form a doubly linked sibling list (O(1) insert and remove, in-order readdir).
// - One open-addressing hash index maps (parent, case-folded name) to a slot. Dropbox names are
//   unique per folder case-insensitively, so the folded name is the key in both matching modes;
//   exact matching compares the stored name after the index finds the candidate.
// - Dropbox gives folders no time. A folder shows the newest mtime of the files below it, which
//   the same Dropbox tree gives every mount alike, so `rsync -a` from a new mount finds its
//   folders' times unchanged. A folder's record keeps that time in `modified` (`noFileBelow`
//   while none lies below). A file added, or given a later time, raises the folders above it at
//   once, up to the first that is already as new. A file removed, or given an earlier time, only
//   marks the folders whose time was its time (`timeStale`); `settleFolderTimes()` recomputes
//   those from their children at the end of a batch: once per batch, where recomputing at each
//   removal would pass over a large folder once for each of its files deleted.

import DropboxCase

struct Slot: Hashable, Comparable {
    var index: UInt32
    static let root = Slot(index: 0)
    static let none = Slot(index: UInt32.max)
    var inode: InodeNumber { InodeNumber(UInt64(index) + 1) }
    init(index: UInt32) { self.index = index }
    init?(_ inode: InodeNumber) {
        guard inode.rawValue >= 1, inode.rawValue <= UInt64(UInt32.max - 1) else { return nil }
        index = UInt32(inode.rawValue - 1)
    }
    static func < (a: Slot, b: Slot) -> Bool { a.index < b.index }
}

/// What Dropbox says about a file, as the tree stores it.
struct FileDetails: Equatable {
    var size: UInt64
    var modified: Int64
    var id: String
    var rev: String
    var contentHash: String?
    /// A document Dropbox cannot download: shown under its export name, read through `files/export`.
    var isExport = false
    /// For an export, the document's own name ("Budget.gsheet" shown as "Budget.xlsx"): a deleted
    /// entry names the document, not its export. Kept where a file keeps its content hash, which
    /// an export has none of.
    var exportedFrom: String?
    /// A symbolic link's target: the node is shown as a link, never read.
    var symlinkTarget: String?

    /// Whether the node's bytes are the file's own, as `files/download` gives them: not an
    /// export, not a link. Only such files are kept whole by a pin or get thumbnails.
    var isPlainFile: Bool { !isExport && symlinkTarget == nil }
}

struct Tree {
    private struct Record {
        var parent: UInt32
        var firstChild: UInt32 = Slot.none.index
        var nextSibling: UInt32 = Slot.none.index
        var previousSibling: UInt32 = Slot.none.index
        var nameOffset: UInt32
        var nameLength: UInt16
        var flags: UInt16
        /// Arena offset of the file's id, rev and hash; `noDetails` for folders and new records.
        var detailsOffset: UInt32 = Tree.noDetails
        var foldedHash: UInt32
        var subfolderCount: UInt32 = 0
        var size: UInt64 = 0
        var modified: Int64 = 0
        /// For folders: when the listing that made them complete was taken (monotonic seconds).
        var listedAt: Double = -.infinity
    }

    /// A folder's `modified` while no file lies below it.
    private static let noFileBelow = Int64.min

    private enum Flag {
        static let directory: UInt16 = 1
        static let alive: UInt16 = 2
        /// A folder whose children are all known (listed whole, or filled by a finished recursive listing).
        static let complete: UInt16 = 4
        /// A file whose current size has been given to the kernel since its content last changed.
        static let sizeReported: UInt16 = 8
        /// A document read through `files/export` (FileDetails.isExport).
        static let export: UInt16 = 16
        /// A complete folder whose listing may be out of date and is not trusted until listed
        /// again; unlike an incomplete one, it keeps its answer while Dropbox cannot be reached.
        static let mustListAgain: UInt16 = 32
        /// A file last opened at its current rev: whatever pages the kernel caches for it are
        /// that rev's. A bit here rather than a map of revs beside the tree, which kept an entry
        /// for every file ever opened (opening 100,000 files once each: 57 MiB, for good).
        static let openedAtCurrentRev: UInt16 = 64
        /// A folder whose time may be later than the newest file below it, until settled.
        static let timeStale: UInt16 = 128
        /// A folder in `retimedFolders`, so that it is listed there once however often it moves.
        static let retimed: UInt16 = 256
        /// A symbolic link (FileDetails.symlinkTarget), its target kept where a file keeps its hash.
        static let symlink: UInt16 = 512
    }

    private var records: [Record] = []
    private var arena: [UInt8] = []
    private var arenaGarbage = 0
    /// Slot + 1 of each indexed node; 0 is empty, `tombstone` a deleted place.
    private var index: [UInt32] = Array(repeating: 0, count: 1024)
    private var indexUsed = 0
    private static let tombstone = UInt32.max
    fileprivate static let noDetails = UInt32.max
    private(set) var liveCount = 0
    /// Folders marked `timeStale`, to recompute at the next `settleFolderTimes()`.
    private var staleFolders: [Slot] = []
    /// Folders whose time changed since the last `settleFolderTimes()`, each once (`Flag.retimed`).
    private var retimedFolders: [Slot] = []
    /// The extensions exports have been shown with ("html", "md", "xlsx", ...): the names a
    /// deleted document's export may have.
    private(set) var exportExtensions: Set<String> = []
    /// Files a handle has open (kept by the filesystem's open and release). A new rev of one of
    /// them becomes a new node (`Upsert.replaced`), so that the open handle reads on at its own
    /// rev, as a file replaced on a local disk stays readable through the handles open on it.
    var openFiles: Set<Slot> = [] {
        didSet { if !formerPaths.isEmpty { formerPaths = formerPaths.filter { openFiles.contains($0.key) } } }
    }
    /// Where open files the tree no longer holds were (moved, deleted, replaced), by their
    /// components, for the log lines of their handles' failures. Kept while they are open.
    private(set) var formerPaths: [Slot: [String]] = [:]
    /// The inode numbers of nodes that replaced an open file's (`serialNumber`).
    private var renumbered: [Slot: UInt64] = [:]

    init() {
        var root = Record(parent: 0, nameOffset: 0, nameLength: 0, flags: Flag.directory | Flag.alive, foldedHash: 0)
        root.modified = Self.noFileBelow
        records.append(root)
        liveCount = 1
    }

    // MARK: Reading

    func isAlive(_ slot: Slot) -> Bool {
        slot.index < records.count && records[Int(slot.index)].flags & Flag.alive != 0
    }

    func isDirectory(_ slot: Slot) -> Bool { records[Int(slot.index)].flags & Flag.directory != 0 }
    func isSymlink(_ slot: Slot) -> Bool { records[Int(slot.index)].flags & Flag.symlink != 0 }
    func isComplete(_ slot: Slot) -> Bool { records[Int(slot.index)].flags & Flag.complete != 0 }
    func mustListAgain(_ slot: Slot) -> Bool { records[Int(slot.index)].flags & Flag.mustListAgain != 0 }
    func listedAt(_ slot: Slot) -> Double { records[Int(slot.index)].listedAt }
    func parent(_ slot: Slot) -> Slot { Slot(index: records[Int(slot.index)].parent) }
    func subfolderCount(_ slot: Slot) -> UInt32 { records[Int(slot.index)].subfolderCount }
    func size(_ slot: Slot) -> UInt64 { records[Int(slot.index)].size }
    func modified(_ slot: Slot) -> Int64 { records[Int(slot.index)].modified }

    /// The time a folder shows: the newest mtime of the files below it or, with none below it, of
    /// the nearest folder above that has one; nil when the whole tree holds no file.
    func folderTime(_ folder: Slot) -> Int64? {
        var current = folder
        while true {
            let time = records[Int(current.index)].modified
            if time != Self.noFileBelow { return time }
            if current == .root { return nil }
            current = parent(current)
        }
    }

    func name(_ slot: Slot) -> String {
        let r = records[Int(slot.index)]
        return arena.withUnsafeBufferPointer { buffer in
            String(decoding: UnsafeBufferPointer(rebasing: buffer[Int(r.nameOffset)..<Int(r.nameOffset) + Int(r.nameLength)]),
                   as: UTF8.self)
        }
    }

    /// A live file's details; nil for a folder, and for a removed node, whose offsets may point
    /// at bytes a compaction of the arena has since given to other nodes, or past its end.
    func details(_ slot: Slot) -> FileDetails? {
        let r = records[Int(slot.index)]
        guard r.flags & (Flag.alive | Flag.directory) == Flag.alive, r.detailsOffset != Tree.noDetails else { return nil }
        var offset = Int(r.detailsOffset)
        let id = readString(&offset)
        let rev = readString(&offset)
        let third = readString(&offset)
        let isExport = r.flags & Flag.export != 0
        let isSymlink = r.flags & Flag.symlink != 0
        return FileDetails(size: r.size, modified: r.modified, id: id, rev: rev,
                           contentHash: isExport || isSymlink || third.isEmpty ? nil : third, isExport: isExport,
                           exportedFrom: isExport && !third.isEmpty ? third : nil,
                           symlinkTarget: isSymlink ? third : nil)
    }

    /// The child of `parent` whose name folds to the same key as `name`.
    func child(of parent: Slot, folded name: FoldedName) -> Slot? {
        guard !index.isEmpty else { return nil }
        let mask = index.count - 1
        var position = Int(Self.mix(parent.index, name.hash)) & mask
        while true {
            let entry = index[position]
            if entry == 0 { return nil }
            if entry != Self.tombstone {
                let slot = Slot(index: entry - 1)
                let r = records[Int(slot.index)]
                if r.parent == parent.index && r.foldedHash == name.hash && FoldedName(self.name(slot)) == name {
                    return slot
                }
            }
            position = (position + 1) & mask
        }
    }

    /// Whether `folder` holds anything, without collecting its children.
    func hasChildren(_ folder: Slot) -> Bool { records[Int(folder.index)].firstChild != Slot.none.index }

    /// Children in the order they were added (the sibling list is built by prepending).
    func children(of folder: Slot) -> [Slot] {
        var result: [Slot] = []
        var next = records[Int(folder.index)].firstChild
        while next != Slot.none.index {
            result.append(Slot(index: next))
            next = records[Int(next)].nextSibling
        }
        result.reverse()
        return result
    }

    /// The inode number `stat` and `readdir` show for a node (`NodeAttributes.serialNumber`): the
    /// same in every mount of the same Dropbox, since backup tools (restic, borg) take a file whose
    /// number changed for a changed file and read it again whole. A file's comes from its Dropbox id,
    /// which Dropbox keeps through renames and moves, as a disk keeps an inode; a folder's (or a
    /// file's without an id) from its case-folded path, folder ids being neither kept in the saved
    /// tree nor needed. The root's is 1. 63 bits, so that no reader sees a negative number.
    ///
    /// A new rev of a file open somewhere, which comes as a new node (`Upsert.replaced`), shows a
    /// number of its own for as long as the mount runs (`renumbered`), while the node left behind
    /// keeps the old one for its handles: as on a disk, where a file replaced by a rename is a new
    /// inode, `tail -F` sees the name lead to another file and opens it again.
    func serialNumber(_ slot: Slot) -> UInt64 {
        if slot == .root { return 1 }
        if !renumbered.isEmpty, let number = renumbered[slot] { return number }
        let r = records[Int(slot.index)]
        if r.flags & Flag.directory == 0, r.detailsOffset != Tree.noDetails {
            let id = field(at: Int(r.detailsOffset))   // the first of a file's details
            if id.length > 0 {
                var hash = SerialNumberHash(domain: 1)
                hash.add(arena[id.start..<(id.start + id.length)])
                return hash.value
            }
        }
        var below: [Slot] = []
        var current = slot
        while current != .root {
            below.append(current)
            current = parent(current)
        }
        var hash = SerialNumberHash(domain: 2)
        for folder in below.reversed() {
            hash.add(CollectionOfOne(UInt8(ascii: "/")))
            hash.add(FoldedName(name(folder)).bytes)
        }
        return hash.value
    }

    /// The inode number of a file's new node at `rev`, from the number its node before showed.
    private static func replacementSerialNumber(_ number: UInt64, rev: String) -> UInt64 {
        var hash = SerialNumberHash(domain: 3)
        hash.add((0..<8).lazy.map { UInt8(truncatingIfNeeded: number >> ($0 * 8)) })
        hash.add(rev.utf8)
        return hash.value
    }

    /// Names from the root down to `slot` (empty for the root).
    func components(_ slot: Slot) -> [String] {
        var names: [String] = []
        var current = slot
        while current != .root {
            names.append(name(current))
            current = parent(current)
        }
        return names.reversed()
    }

    /// Every live node below the root, parents before children.
    func walk(_ visit: (Slot) -> Void) {
        var stack = children(of: .root)
        while let slot = stack.popLast() {
            visit(slot)
            if isDirectory(slot) { stack.append(contentsOf: children(of: slot)) }
        }
    }

    /// Every live node below the root with its path below it (`/Album/dog.jpg`), parents before
    /// children. A folder's path is built once and shared by its children's, where asking
    /// `components` of each node would walk up from every one of them.
    func walkWithPaths(_ visit: (Slot, String) -> Void) {
        var stack = children(of: .root).map { ($0, "") }
        while let (slot, parentPath) = stack.popLast() {
            let path = parentPath + "/" + name(slot)
            visit(slot, path)
            if isDirectory(slot) { stack.append(contentsOf: children(of: slot).map { ($0, path) }) }
        }
    }

    /// The node at Dropbox path `path` (any case) below the mounted folder `root`, if the tree has it.
    func slot(atPath path: String, below root: String) -> Slot? {
        let rootDepth = root.split(separator: "/").count
        var slot = Slot.root
        for component in path.split(separator: "/").dropFirst(rootDepth) {
            guard let next = child(of: slot, folded: FoldedName(String(component))) else { return nil }
            slot = next
        }
        return slot
    }

    // MARK: Changing

    enum Upsert: Equatable {
        case added
        /// Same kind, same slot; `contentChanged` when a file's rev changed, `renamedFrom` when only the case differs.
        case updated(contentChanged: Bool, renamedFrom: String?)
        /// A new rev of a file a handle has open, in a new slot; the old slot (`former`) is
        /// removed, and the handle reads on from it at its rev. `formerName` is its spelling.
        case replaced(former: Slot, formerName: String)
        case unchanged
    }

    /// Makes `name` under `parent` a folder (`details == nil`) or a file. A node of the other kind
    /// at that name is removed with its subtree first and the new one gets a new slot; so is a
    /// file open somewhere (`openFiles`) that gets a new rev.
    @discardableResult
    mutating func upsert(parent: Slot, name: String, details: FileDetails?) -> (Slot, Upsert) {
        let folded = FoldedName(name)
        let isFolder = details == nil
        var replaced: (slot: Slot, name: String, number: UInt64)?
        if let existing = child(of: parent, folded: folded) {
            let newRevOfAnOpenFile = openFiles.contains(existing) && details != nil
                && self.details(existing).map { $0.rev != details?.rev } == true
            if newRevOfAnOpenFile { replaced = (existing, self.name(existing), serialNumber(existing)) }
            // A file that becomes a link (or back) is a new node too: the kernel never changes an
            // inode's type.
            if !newRevOfAnOpenFile, isDirectory(existing) == isFolder,
               isSymlink(existing) == (details?.symlinkTarget != nil) {
                var outcome = Upsert.unchanged
                let oldName = self.name(existing)
                var renamedFrom: String?
                if !oldName.utf8.elementsEqual(name.utf8) {   // a change of case or of normalization
                    replaceName(existing, with: name)
                    renamedFrom = oldName
                    outcome = .updated(contentChanged: false, renamedFrom: oldName)
                }
                if let details, self.details(existing) != details {
                    let contentChanged = self.details(existing)?.rev != details.rev
                    let oldTime = records[Int(existing.index)].modified
                    setDetails(existing, details)
                    if details.modified > oldTime { raiseFolderTimes(above: existing, to: details.modified) }
                    if details.modified < oldTime { folderTimesMayFall(above: existing, from: oldTime) }
                    if contentChanged {
                        records[Int(existing.index)].flags &= ~(Flag.sizeReported | Flag.openedAtCurrentRev)
                    }
                    outcome = .updated(contentChanged: contentChanged, renamedFrom: renamedFrom)
                }
                return (existing, outcome)
            }
            remove(existing)
        }
        let slot = Slot(index: UInt32(records.count))
        let nameRef = append(Array(name.utf8))
        var record = Record(parent: parent.index, nameOffset: nameRef.offset, nameLength: UInt16(clamping: nameRef.length),
                            flags: Flag.alive | (isFolder ? Flag.directory : 0), foldedHash: folded.hash)
        if isFolder { record.modified = Self.noFileBelow }
        record.nextSibling = records[Int(parent.index)].firstChild
        records.append(record)
        if record.nextSibling != Slot.none.index { records[Int(record.nextSibling)].previousSibling = slot.index }
        records[Int(parent.index)].firstChild = slot.index
        if isFolder { records[Int(parent.index)].subfolderCount += 1 }
        if let details {
            setDetails(slot, details)
            raiseFolderTimes(above: slot, to: details.modified)
        }
        insertIntoIndex(slot)
        liveCount += 1
        if let replaced, let rev = details?.rev {
            renumbered[slot] = Self.replacementSerialNumber(replaced.number, rev: rev)
        }
        return (slot, replaced.map { .replaced(former: $0.slot, formerName: $0.name) } ?? .added)
    }

    /// Removes `slot` and everything below it.
    mutating func remove(_ slot: Slot) {
        guard slot != .root, isAlive(slot) else { return }
        let time = records[Int(slot.index)].modified
        removeSubtree(slot)
        folderTimesMayFall(above: slot, from: time)
    }

    private mutating func removeSubtree(_ slot: Slot) {
        for child in children(of: slot) { removeSubtree(child) }
        if openFiles.contains(slot) { formerPaths[slot] = components(slot) }
        let r = records[Int(slot.index)]
        removeFromIndex(slot)
        if r.previousSibling != Slot.none.index {
            records[Int(r.previousSibling)].nextSibling = r.nextSibling
        } else {
            records[Int(r.parent)].firstChild = r.nextSibling
        }
        if r.nextSibling != Slot.none.index { records[Int(r.nextSibling)].previousSibling = r.previousSibling }
        if r.flags & Flag.directory != 0 { records[Int(r.parent)].subfolderCount -= 1 }
        arenaGarbage += Int(r.nameLength) + (r.flags & Flag.directory == 0 ? detailsLength(slot) : 0)
        records[Int(slot.index)].flags = 0
        records[Int(slot.index)].firstChild = Slot.none.index
        liveCount -= 1
        compactArenaIfWasteful()
    }

    /// Corrects a file's size (an export's length is known only once exported).
    mutating func setSize(_ slot: Slot, _ size: UInt64) {
        records[Int(slot.index)].size = size
        records[Int(slot.index)].flags &= ~Flag.sizeReported
    }

    func isSizeReported(_ slot: Slot) -> Bool { records[Int(slot.index)].flags & Flag.sizeReported != 0 }

    mutating func markSizeReported(_ slot: Slot) {
        // Every lookup marks its answer: written only when it changes, since a write to records a
        // save's copy of the tree shares copies all of them (64 bytes per entry).
        guard !isSizeReported(slot) else { return }
        records[Int(slot.index)].flags |= Flag.sizeReported
    }

    /// Whether the file was last opened at its current rev (cleared when its rev changes).
    func isOpenedAtCurrentRev(_ slot: Slot) -> Bool { records[Int(slot.index)].flags & Flag.openedAtCurrentRev != 0 }

    mutating func markOpenedAtCurrentRev(_ slot: Slot) {
        guard isAlive(slot), !isOpenedAtCurrentRev(slot) else { return }
        records[Int(slot.index)].flags |= Flag.openedAtCurrentRev
    }

    mutating func clearOpenedAtCurrentRev(_ slot: Slot) {
        guard isAlive(slot) else { return }
        records[Int(slot.index)].flags &= ~Flag.openedAtCurrentRev
    }

    mutating func markComplete(_ folder: Slot, listedAt: Double) {
        records[Int(folder.index)].flags |= Flag.complete
        records[Int(folder.index)].flags &= ~Flag.mustListAgain
        records[Int(folder.index)].listedAt = listedAt
    }

    /// Keeps what the folder holds, to answer with while Dropbox cannot be reached, but lists it
    /// again on its next use when Dropbox can.
    mutating func markMustListAgain(_ folder: Slot) {
        records[Int(folder.index)].flags |= Flag.mustListAgain
    }

    /// Sets the listing time of every complete folder (after a change feed catches up, say).
    mutating func touchCompleteFolders(at time: Double) {
        for i in records.indices where records[i].flags & (Flag.alive | Flag.directory | Flag.complete)
            == Flag.alive | Flag.directory | Flag.complete {
            records[i].listedAt = time
        }
    }

    /// Marks every live folder complete, listed at `time` (a recursive listing has finished).
    mutating func markAllFoldersComplete(at time: Double) {
        for i in records.indices where records[i].flags & (Flag.alive | Flag.directory) == Flag.alive | Flag.directory {
            records[i].flags |= Flag.complete
            records[i].flags &= ~Flag.mustListAgain
            records[i].listedAt = time
        }
    }

    // MARK: Folder times

    /// Recomputes the folders a removal or an earlier time may have made too new, and returns
    /// every live folder whose time changed since the last call, each once.
    mutating func settleFolderTimes() -> [Slot] {
        // Deepest first, so that each folder is recomputed from children already settled.
        let stale = staleFolders.map { (slot: $0, depth: depth($0)) }.sorted { $0.depth > $1.depth }
        staleFolders.removeAll()
        for (folder, _) in stale where records[Int(folder.index)].flags & Flag.timeStale != 0 {
            records[Int(folder.index)].flags &= ~Flag.timeStale
            guard isAlive(folder) else { continue }
            var newest = Self.noFileBelow
            var child = records[Int(folder.index)].firstChild
            while child != Slot.none.index {
                newest = max(newest, records[Int(child)].modified)
                child = records[Int(child)].nextSibling
            }
            if newest != records[Int(folder.index)].modified {
                records[Int(folder.index)].modified = newest
                noteRetimed(folder)
            }
        }
        for folder in retimedFolders { records[Int(folder.index)].flags &= ~Flag.retimed }
        let retimed = retimedFolders.filter(isAlive)
        retimedFolders.removeAll()
        return retimed
    }

    private mutating func noteRetimed(_ folder: Slot) {
        guard records[Int(folder.index)].flags & Flag.retimed == 0 else { return }
        records[Int(folder.index)].flags |= Flag.retimed
        retimedFolders.append(folder)
    }

    private func depth(_ slot: Slot) -> Int {
        var depth = 0
        var current = slot
        while current != .root { depth += 1; current = parent(current) }
        return depth
    }

    private mutating func raiseFolderTimes(above slot: Slot, to time: Int64) {
        var folder = parent(slot)
        while records[Int(folder.index)].modified < time {
            records[Int(folder.index)].modified = time
            noteRetimed(folder)
            if folder == .root { return }
            folder = parent(folder)
        }
    }

    /// Marks the folders above `slot` whose time was `time`, which may now be too new. A folder
    /// is never older than what lies below it, so the walk ends at the first one newer.
    private mutating func folderTimesMayFall(above slot: Slot, from time: Int64) {
        guard time != Self.noFileBelow else { return }
        var folder = parent(slot)
        while records[Int(folder.index)].modified == time {
            if records[Int(folder.index)].flags & Flag.timeStale == 0 {
                records[Int(folder.index)].flags |= Flag.timeStale
                staleFolders.append(folder)
            }
            if folder == .root { return }
            folder = parent(folder)
        }
    }

    // MARK: Storage

    /// Approximate bytes held, for the memory figures issue 5 asks for.
    var approximateBytes: Int {
        records.capacity * MemoryLayout<Record>.stride + arena.capacity + index.capacity * 4
    }

    private mutating func append(_ bytes: [UInt8]) -> (offset: UInt32, length: Int) {
        let offset = UInt32(arena.count)
        arena.append(contentsOf: bytes)
        return (offset, bytes.count)
    }

    private mutating func replaceName(_ slot: Slot, with name: String) {
        removeFromIndex(slot)
        arenaGarbage += Int(records[Int(slot.index)].nameLength)
        let ref = append(Array(name.utf8))
        records[Int(slot.index)].nameOffset = ref.offset
        records[Int(slot.index)].nameLength = UInt16(clamping: ref.length)
        records[Int(slot.index)].foldedHash = FoldedName(name).hash
        insertIntoIndex(slot)
    }

    private mutating func setDetails(_ slot: Slot, _ details: FileDetails) {
        arenaGarbage += detailsLength(slot)
        var bytes: [UInt8] = []
        Self.appendField(details.id, to: &bytes)
        Self.appendField(details.rev, to: &bytes)
        // A content hash is 64 hex digits; kept as its 32 bytes it costs half (issue 5's memory target).
        if let target = details.symlinkTarget {
            Self.appendField(target, to: &bytes)
        } else if !details.isExport, let hash = details.contentHash, let raw = Self.rawHash(hash) {
            bytes.append(Self.rawHashMarker)
            bytes.append(contentsOf: raw)
        } else {
            Self.appendField((details.isExport ? details.exportedFrom : details.contentHash) ?? "", to: &bytes)
        }
        records[Int(slot.index)].detailsOffset = append(bytes).offset
        records[Int(slot.index)].size = details.size
        records[Int(slot.index)].modified = details.modified
        if details.isExport {
            records[Int(slot.index)].flags |= Flag.export
            let name = self.name(slot)
            if let dot = name.lastIndex(of: ".") { exportExtensions.insert(String(name[name.index(after: dot)...])) }
        } else {
            records[Int(slot.index)].flags &= ~Flag.export
        }
        if details.symlinkTarget != nil {
            records[Int(slot.index)].flags |= Flag.symlink
        } else {
            records[Int(slot.index)].flags &= ~Flag.symlink
        }
    }

    private func detailsLength(_ slot: Slot) -> Int {
        guard records[Int(slot.index)].detailsOffset != Tree.noDetails else { return 0 }
        var offset = Int(records[Int(slot.index)].detailsOffset)
        let start = offset
        for _ in 0..<3 { offset = field(at: offset).end }
        return offset - start
    }

    /// A field's length byte that means: 32 raw bytes of a content hash follow.
    private static let rawHashMarker: UInt8 = 0xFF
    /// A field's length byte that means: a two-byte length (low byte first) and that many bytes
    /// follow (a link's target, which may be longer than a length byte says).
    private static let longTextMarker: UInt8 = 0xFE

    /// Appends `text` as one field: a length byte and its bytes, or, from 254 bytes (a link's
    /// target, a long export name), the long form; at most 65,535 bytes are kept.
    private static func appendField(_ text: String, to bytes: inout [UInt8]) {
        let utf8 = Array(text.utf8.prefix(Int(UInt16.max)))
        if utf8.count < Int(longTextMarker) {
            bytes.append(UInt8(utf8.count))
        } else {
            bytes.append(longTextMarker)
            bytes.append(UInt8(utf8.count & 0xFF))
            bytes.append(UInt8(utf8.count >> 8))
        }
        bytes.append(contentsOf: utf8)
    }

    /// Where the bytes of the field at `offset` start, how many there are, and where it ends.
    private func field(at offset: Int) -> (start: Int, length: Int, end: Int) {
        switch arena[offset] {
        case Self.rawHashMarker: return (offset + 1, 32, offset + 33)
        case Self.longTextMarker:
            let length = Int(arena[offset + 1]) | Int(arena[offset + 2]) << 8
            return (offset + 3, length, offset + 3 + length)
        case let length: return (offset + 1, Int(length), offset + 1 + Int(length))
        }
    }

    private func readString(_ offset: inout Int) -> String {
        let lengthByte = arena[offset]
        let (start, length, end) = field(at: offset)
        offset = end
        if lengthByte == Self.rawHashMarker {
            let digits = Array("0123456789abcdef".utf8)
            var hex: [UInt8] = []
            hex.reserveCapacity(64)
            for byte in arena[start..<start + length] {
                hex.append(digits[Int(byte >> 4)])
                hex.append(digits[Int(byte & 0xF)])
            }
            return String(decoding: hex, as: UTF8.self)
        }
        return String(decoding: arena[start..<start + length], as: UTF8.self)
    }

    /// The 32 bytes of a 64-digit lowercase hex hash, or nil for anything else (kept as text).
    private static func rawHash(_ hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count == 64 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var raw: [UInt8] = []
        raw.reserveCapacity(32)
        for i in stride(from: 0, to: 64, by: 2) {
            guard let high = value(digits[i]), let low = value(digits[i + 1]) else { return nil }
            raw.append(high << 4 | low)
        }
        return raw
    }

    private mutating func compactArenaIfWasteful() {
        guard arenaGarbage > 1 << 20, arenaGarbage > arena.count / 2 else { return }
        var fresh: [UInt8] = []
        fresh.reserveCapacity(arena.count - arenaGarbage)
        for i in records.indices where records[i].flags & Flag.alive != 0 {
            let r = records[i]
            let nameStart = Int(r.nameOffset)
            records[i].nameOffset = UInt32(fresh.count)
            fresh.append(contentsOf: arena[nameStart..<nameStart + Int(r.nameLength)])
            if r.detailsOffset != Tree.noDetails {
                let length = detailsLength(Slot(index: UInt32(i)))
                let start = Int(r.detailsOffset)
                records[i].detailsOffset = UInt32(fresh.count)
                fresh.append(contentsOf: arena[start..<start + length])
            }
        }
        arena = fresh
        arenaGarbage = 0
    }

    // MARK: Hash index

    private static func mix(_ parent: UInt32, _ hash: UInt32) -> UInt32 {
        var x = UInt64(parent) << 32 | UInt64(hash)
        x ^= x >> 33
        x &*= 0xff51afd7ed558ccd
        x ^= x >> 33
        return UInt32(truncatingIfNeeded: x)
    }

    private mutating func insertIntoIndex(_ slot: Slot) {
        if (indexUsed + 1) * 10 > index.count * 7 { rehash(capacity: max(1024, liveCount * 2).nextPowerOfTwo) }
        let r = records[Int(slot.index)]
        let mask = index.count - 1
        var position = Int(Self.mix(r.parent, r.foldedHash)) & mask
        while index[position] != 0 && index[position] != Self.tombstone { position = (position + 1) & mask }
        if index[position] == 0 { indexUsed += 1 }
        index[position] = slot.index + 1
    }

    private mutating func removeFromIndex(_ slot: Slot) {
        let r = records[Int(slot.index)]
        let mask = index.count - 1
        var position = Int(Self.mix(r.parent, r.foldedHash)) & mask
        while index[position] != 0 {
            if index[position] == slot.index + 1 {
                index[position] = Self.tombstone
                return
            }
            position = (position + 1) & mask
        }
    }

    private mutating func rehash(capacity: Int) {
        index = Array(repeating: 0, count: capacity)
        indexUsed = 0
        let mask = capacity - 1
        for i in records.indices.dropFirst() where records[i].flags & Flag.alive != 0 {
            var position = Int(Self.mix(records[i].parent, records[i].foldedHash)) & mask
            while index[position] != 0 { position = (position + 1) & mask }
            index[position] = UInt32(i) + 1
            indexUsed += 1
        }
    }
}

/// FNV-1a over 64 bits, then a final mix (splitmix64's) so that ids differing in one character are
/// far apart; never Swift's `Hasher`, which is seeded afresh in every process.
struct SerialNumberHash {
    private var state: UInt64 = 14_695_981_039_346_656_037

    init(domain: UInt8) { add(CollectionOfOne(domain)) }

    mutating func add(_ bytes: some Sequence<UInt8>) {
        for byte in bytes { state = (state ^ UInt64(byte)) &* 1_099_511_628_211 }
    }

    /// At least 2 (1 is the root) and below 2^63.
    var value: UInt64 {
        var x = state
        x = (x ^ (x >> 30)) &* 0xBF58_476D_1CE4_E5B9
        x = (x ^ (x >> 27)) &* 0x94D0_49BB_1331_11EB
        x ^= x >> 31
        x &= UInt64.max >> 1
        return x < 2 ? x + 2 : x
    }
}

/// A name folded the way lookups compare it: lowercased as Dropbox lowercases paths.
struct FoldedName: Equatable {
    let bytes: [UInt8]
    let hash: UInt32

    init(_ name: String) {
        var folded: [UInt8] = []
        folded.reserveCapacity(name.utf8.count)
        var ascii = true
        for byte in name.utf8 {
            if byte >= 0x80 { ascii = false; break }
            folded.append(byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte)
        }
        if !ascii { folded = Array(DropboxCase.lowercased(name).utf8) }
        bytes = folded
        // FNV-1a: cheap, and good enough behind the index's own mixing.
        var h: UInt32 = 2_166_136_261
        for byte in folded { h = (h ^ UInt32(byte)) &* 16_777_619 }
        hash = h
    }

    static func == (a: FoldedName, b: FoldedName) -> Bool { a.hash == b.hash && a.bytes == b.bytes }
}

extension Int {
    var nextPowerOfTwo: Int {
        var n = 1
        while n < self { n <<= 1 }
        return n
    }
}
