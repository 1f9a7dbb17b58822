// What routes ask the index: lookups by path, id and rev, pages of a listing, changes since a
// cursor, content hashes.

import Crypto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

extension FileIndex {

    var currentSeq: UInt64 { state.withLock { $0.seq } }
    var cursorEpoch: Int { state.withLock { $0.cursorEpoch } }

    func expireCursors() {
        state.withLock { $0.cursorEpoch += 1 }
    }

    func isCursorUsable(seq: UInt64, epoch: Int, boot: UInt64) -> Bool {
        state.withLock { state in
            boot == bootID && epoch == state.cursorEpoch && seq >= state.journalFloor && seq <= state.seq
        }
    }

    /// Resolves lowercased components below the served root.
    static func node(at lower: [String], in state: borrowing State) -> Node? {
        var node = state.root
        for c in lower {
            guard node.isDirectory, let next = node.children[c] else { return nil }
            node = next
        }
        return node
    }

    /// Looks up a path made of lowercased components from the served root.
    func lookup(lower: [String]) -> EntrySnapshot? {
        state.withLock { state in FileIndex.node(at: lower, in: state).map(FileIndex.snapshot) }
    }

    func lookup(id: String) -> EntrySnapshot? {
        state.withLock { state in state.byID[id].map(FileIndex.snapshot) }
    }

    func lookup(rev: String) -> EntrySnapshot? {
        state.withLock { state in state.byRev[rev].map(FileIndex.snapshot) }
    }

    static func snapshot(_ node: Node) -> EntrySnapshot {
        var s = EntrySnapshot(kind: node.isDirectory ? .folder : .file, name: node.name, components: node.components)
        s.id = node.id
        if !node.isDirectory {
            s.rev = node.rev
            s.size = node.size
            s.clientModified = node.mtime.tv_sec
            s.serverModified = node.serverModified
            s.contentHash = node.contentHash
            s.isDownloadable = !node.isPaper
            s.symlinkTarget = node.symlinkTarget
            s.inode = node.inode
            s.modifications = node.modifications
        }
        return s
    }

    /// One page of the first pass over a folder, resuming after `resumeAfter` (lowercased
    /// components relative to the folder; empty to start).
    func listPage(folder: [String], resumeAfter: [String], recursive: Bool, limit: Int,
                  includeNonDownloadable: Bool, seq: UInt64) -> Page? {
        state.withLock { state -> Page? in
            guard let top = FileIndex.node(at: folder, in: state), top.isDirectory else { return nil }
            struct Frame { var node: Node; var prefix: [String]; var keys: [String]; var next: Int }
            var stack: [Frame] = []
            if resumeAfter.isEmpty {
                stack.append(Frame(node: top, prefix: [], keys: top.sortedKeys, next: 0))
            } else {
                var dir = top
                var prefix: [String] = []
                for (depth, key) in resumeAfter.enumerated() {
                    let keys = dir.sortedKeys
                    var lo = 0, hi = keys.count
                    while lo < hi { let mid = (lo + hi) / 2; if keys[mid] < key { lo = mid + 1 } else { hi = mid } }
                    let exists = lo < keys.count && keys[lo] == key
                    stack.append(Frame(node: dir, prefix: prefix, keys: keys, next: exists ? lo + 1 : lo))
                    guard exists, let child = dir.children[key], child.isDirectory, recursive else { break }
                    if depth == resumeAfter.count - 1 {
                        stack.append(Frame(node: child, prefix: prefix + [key], keys: child.sortedKeys, next: 0))
                    }
                    dir = child
                    prefix.append(key)
                }
            }
            var entries: [EntrySnapshot] = []
            var last: [String] = resumeAfter
            var hasMore = false
            while !stack.isEmpty {
                let i = stack.count - 1
                if stack[i].next >= stack[i].keys.count { stack.removeLast(); continue }
                let key = stack[i].keys[stack[i].next]
                guard let child = stack[i].node.children[key] else { stack[i].next += 1; continue }
                if !includeNonDownloadable && child.isPaper { stack[i].next += 1; continue }
                if entries.count >= limit { hasMore = true; break }
                stack[i].next += 1
                let path = stack[i].prefix + [key]
                entries.append(FileIndex.snapshot(child))
                last = path
                if recursive && child.isDirectory {
                    stack.append(Frame(node: child, prefix: path, keys: child.sortedKeys, next: 0))
                }
            }
            return Page(entries: entries, hasMore: hasMore, resumeAfter: hasMore ? last : nil, seq: seq)
        }
    }

    /// Changes after `seq` below `folder` (lowercased absolute path, "" for the root).
    func changes(folder: String, recursive: Bool, since seq: UInt64, limit: Int, includeNonDownloadable: Bool) -> Page {
        state.withLock { state in
            let start = FileIndex.firstIndex(after: seq, in: state.journal)
            var latest: [String: Int] = [:]
            var order: [Int] = []
            var removed: Set<String> = []
            for i in start..<state.journal.count where FileIndex.inScope(state.journal[i].pathLower, scope: folder, recursive: recursive) {
                latest[state.journal[i].pathLower] = i
                order.append(i)
                if state.journal[i].removed { removed.insert(state.journal[i].pathLower) }
            }
            // Each changed path once, at its last change, in journal order: parents are created
            // before their children. A folder removed and made again is reported deleted, then
            // as it is now: a folder entry alone would keep the old folder's children, which a
            // client must keep for a folder that was only modified. (A file entry replaces
            // whatever was there, so a file made again needs no deleted entry.)
            let picks = order.filter { latest[state.journal[$0].pathLower] == $0 }
            var entries: [EntrySnapshot] = []
            var newSeq = state.seq
            var hasMore = false
            for (n, i) in picks.enumerated() {
                if entries.count >= limit {
                    hasMore = true
                    newSeq = state.journal[picks[n - 1]].seq
                    break
                }
                let entry = state.journal[i]
                let lower = entry.pathLower.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
                if let node = FileIndex.node(at: lower, in: state) {
                    if !includeNonDownloadable && node.isPaper { continue }
                    if node.isDirectory && removed.contains(entry.pathLower) {
                        entries.append(EntrySnapshot(kind: .deleted, name: entry.components.last ?? "", components: entry.components))
                    }
                    entries.append(FileIndex.snapshot(node))
                } else {
                    entries.append(EntrySnapshot(kind: .deleted, name: entry.components.last ?? "", components: entry.components))
                }
            }
            return Page(entries: entries, hasMore: hasMore, resumeAfter: nil, seq: newSeq)
        }
    }

    /// Hashes every file now, as Dropbox has every content_hash long before anyone lists: without
    /// it the first listing of a large tree would pay for hashing (5x slower per page, measured
    /// on 100,000 small files), and a benchmark's cold run would time the emulator, not the client.
    func precomputeHashes() {
        guard let everything = listPage(folder: [], resumeAfter: [], recursive: true, limit: .max,
                                        includeNonDownloadable: true, seq: 0) else { return }
        _ = withHashes(everything.entries)
    }

    /// Fills in content hashes, hashing outside the lock (a 2 GiB file takes about a second)
    /// and caching the result on the node, keyed by what identifies its content.
    func withHashes(_ entries: [EntrySnapshot]) -> [EntrySnapshot] {
        entries.map { entry in
            guard entry.kind == .file, entry.contentHash == nil else { return entry }
            var out = entry
            let path = realPath(entry.components)
            // A link is never followed: its content is its target.
            out.contentHash = entry.symlinkTarget.map { ContentHash.hex(of: Array($0.utf8)) }
                ?? ContentHash.hex(ofFileAt: path) ?? ContentHash.hex(of: [UInt8]())
            let lower = entry.components.map { $0.dropboxLowercased }
            let hash = out.contentHash
            state.withLock { state in
                if let node = FileIndex.node(at: lower, in: state), !node.isDirectory,
                   node.inode == entry.inode, node.rev == entry.rev, node.modifications == entry.modifications {
                    node.contentHash = hash
                }
            }
            return out
        }
    }

    func realPath(_ components: [String]) -> String {
        components.isEmpty ? rootPath : rootPath + "/" + components.joined(separator: "/")
    }

    /// Whether a path existed earlier in this run (get_metadata with include_deleted).
    func wasDeleted(lower: [String]) -> Bool {
        let key = "/" + lower.joined(separator: "/")
        return state.withLock { $0.incarnations[key] != nil }
    }

    /// Bytes in served files, for get_space_usage.
    func usedBytes() -> UInt64 {
        state.withLock { state in
            var total: UInt64 = 0
            var stack = [state.root]
            while let n = stack.popLast() {
                for c in n.children.values {
                    if c.isDirectory { stack.append(c) } else { total += c.size }
                }
            }
            return total
        }
    }
}
