// The mirror's records: nodes of the tree, what routes see of them, the journal, pages.

import Crypto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A file or folder in the mirror. Only touched under `FileIndex.state`'s lock.
final class Node {
    var name: String
    let isDirectory: Bool
    weak var parent: Node?
    var id: String = ""
    var inode: UInt64 = 0
    var size: UInt64 = 0
    var mtime: timespec = timespec()
    var ctime: timespec = timespec()
    /// Bumped by inotify content events, so the rev changes even when a rewrite lands within one
    /// timestamp tick and keeps the same size.
    var modifications: UInt64 = 0
    var rev: String = ""
    var serverModified: Int = 0
    var contentHash: String?
    /// A symbolic link's target (the node is a link, listed with `symlink_info`).
    var symlinkTarget: String?
    var children: [String: Node] = [:]
    private var sortedKeysCache: [String]?

    init(name: String, isDirectory: Bool, parent: Node?) {
        self.name = name
        self.isDirectory = isDirectory
        self.parent = parent
    }

    /// What the disk keeps of the node through a rename: its inode, and for a file its size and
    /// mtime too (an inode freed and given to a new file among the same events is another file).
    var diskIdentity: String {
        isDirectory ? "d\(inode)" : "f\(inode):\(size):\(mtime.tv_sec).\(mtime.tv_nsec)"
    }

    var sortedKeys: [String] {
        if let cached = sortedKeysCache { return cached }
        let keys = children.keys.sorted()
        sortedKeysCache = keys
        return keys
    }

    func invalidateOrder() { sortedKeysCache = nil }

    /// Real names from the served root, e.g. ["Docs", "a.txt"].
    var components: [String] {
        var out: [String] = []
        var node: Node? = self
        while let n = node, let p = n.parent {
            out.append(n.name)
            node = p
        }
        return out.reversed()
    }

    var isPaper: Bool { !isDirectory && name.lowercased().hasSuffix(".paper") }
}

/// Immutable facts about one entry, taken under the lock and rendered outside it.
struct EntrySnapshot: Sendable {
    enum Kind: Sendable { case file, folder, deleted }
    var kind: Kind
    var name: String
    /// Real names from the served root.
    var components: [String]
    var id: String = ""
    var rev: String = ""
    var size: UInt64 = 0
    var clientModified: Int = 0
    var serverModified: Int = 0
    var contentHash: String?
    var isDownloadable = true
    var symlinkTarget: String?
    var inode: UInt64 = 0
    var modifications: UInt64 = 0
}

struct JournalEntry {
    var seq: UInt64
    /// Lowercased absolute path from the served root, "/a/b".
    var pathLower: String
    var components: [String]
    /// Whatever was at the path was removed (perhaps to be replaced, coalesced into this entry).
    var removed = false
}

/// What a page of a listing or a change feed produced.
struct Page: Sendable {
    var entries: [EntrySnapshot]
    var hasMore: Bool
    /// Initial pass: the last key handed out, nil when the pass is finished.
    var resumeAfter: [String]?
    var seq: UInt64
}

enum LookupFailure: Error { case notFound, notFolder, notFile, malformed }

struct LongpollWaiter {
    var scope: String
    var recursive: Bool
    var seq: UInt64
    var wake: @Sendable () -> Void
}
