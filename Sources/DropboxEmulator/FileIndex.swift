// The served directory as Dropbox sees it.
//
// An in-memory tree mirrors the directory (names, kinds, sizes, times, ids, revs, cached content
// hashes) and an append-only journal records every path that changed, with a sequence number.
// That split gives each route its cost model:
//  * `list_folder` pages walk the tree in a fixed order (children sorted by lowercased name,
//    parents before children), and the cursor remembers the last key handed out, so a page costs
//    O(log n + limit) however large the folder, and a changing tree never breaks a cursor.
//  * `continue` after the first pass reads the journal from the cursor's sequence number, so it
//    costs in proportion to the changes, not the tree.
// inotify keeps the tree in step. Each API request first drains pending inotify events, which
// makes a change that a test made before sending its request visible to that request
// (read-your-writes); a watcher thread blocked in poll(2) drains them too, so longpoll wakes
// within milliseconds of a change.

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
    var children: [String: Node] = [:]
    private var sortedKeysCache: [String]?

    init(name: String, isDirectory: Bool, parent: Node?) {
        self.name = name
        self.isDirectory = isDirectory
        self.parent = parent
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
    var inode: UInt64 = 0
    var modifications: UInt64 = 0
}

struct JournalEntry {
    var seq: UInt64
    /// Lowercased absolute path from the served root, "/a/b".
    var pathLower: String
    var components: [String]
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

final class FileIndex: Sendable {
    let rootPath: String
    let bootID: UInt64
    private let inotifyFD: Int32
    private let state: Mutex<State>
    private let watcher: Mutex<pthread_t?> = Mutex(nil)
    private let stopping = Atomic<Bool>(false)
    /// Written by stop() so the watcher's poll(2) returns at once.
    private let wakePipe: (read: Int32, write: Int32)

    struct State: ~Copyable {
        var root: Node
        var seq: UInt64 = 0
        var journal: [JournalEntry] = []
        /// Cursors older than this have lost their journal and answer `reset`.
        var journalFloor: UInt64 = 0
        var cursorEpoch: Int = 0
        var watches: [Int32: [String]] = [:]
        var byID: [String: Node] = [:]
        var byRev: [String: Node] = [:]
        /// How often a path has been deleted, so a re-created path gets a new id.
        var incarnations: [String: Int] = [:]
        var waiters: [Int: LongpollWaiter] = [:]
        var nextWaiter = 0
    }

    static let maxJournal = 2_000_000

    init(rootPath: String) throws {
        var st = stat()
        guard stat(rootPath, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw EmulatorError.badRoot(rootPath)
        }
        self.rootPath = rootPath.count > 1 && rootPath.hasSuffix("/") ? String(rootPath.dropLast()) : rootPath
        self.bootID = UInt64.random(in: 1..<UInt64.max)
        self.inotifyFD = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        var fds: [Int32] = [0, 0]
        _ = pipe(&fds)
        self.wakePipe = (fds[0], fds[1])
        self.state = Mutex(State(root: Node(name: "", isDirectory: true, parent: nil)))
        let fd = inotifyFD
        let base = self.rootPath
        state.withLock { state in
            FileIndex.addWatch(fd: fd, realPath: base, components: [], state: &state)
            let root = state.root
            FileIndex.scanChildren(of: root, realPath: base, inotifyFD: fd, state: &state, journal: false)
        }
    }

    // MARK: Watching

    func startWatching() {
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let index = Unmanaged<FileIndex>.fromOpaque(raw!).takeRetainedValue()
            index.watchLoop()
            return nil
        }, box.toOpaque())
        if rc == 0 { watcher.withLock { $0 = thread } } else { box.release() }
    }

    func stop() {
        stopping.store(true, ordering: .sequentiallyConsistent)
        var byte: UInt8 = 1
        _ = write(wakePipe.write, &byte, 1)
        if let thread = watcher.withLock({ t -> pthread_t? in let x = t; t = nil; return x }) {
            pthread_join(thread, nil)
        }
        let pending = state.withLock { state -> [LongpollWaiter] in
            let all = Array(state.waiters.values)
            state.waiters.removeAll()
            return all
        }
        for waiter in pending { waiter.wake() }
        close(inotifyFD)
        close(wakePipe.read)
        close(wakePipe.write)
    }

    private func watchLoop() {
        while !stopping.load(ordering: .sequentiallyConsistent) {
            var fds = [pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 2, 1000)
            if n > 0, fds[0].revents != 0 { drain() }
        }
    }

    /// Applies every pending inotify event. Every API request calls this first.
    func drain() {
        let fd = inotifyFD
        let root = rootPath
        let wakes = state.withLock { state -> [@Sendable () -> Void] in
            // Checked under the lock: a drain in progress on another thread holds it, so once
            // we get here every event queued before this call is either applied or readable.
            var pending = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pending, 1, 0) > 0 else { return [] }
            let before = state.seq
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                var offset = 0
                while offset + 16 <= n {
                    let (wd, mask, len) = buffer.withUnsafeBytes { raw -> (Int32, UInt32, Int) in
                        (raw.loadUnaligned(fromByteOffset: offset, as: Int32.self),
                         raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                         Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)))
                    }
                    var name = ""
                    if len > 0 {
                        let bytes = buffer[(offset + 16)..<(offset + 16 + len)]
                        name = String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
                    }
                    offset += 16 + len
                    FileIndex.apply(wd: wd, mask: mask, name: name, rootPath: root, inotifyFD: fd, state: &state)
                }
            }
            guard state.seq != before else { return [] }
            return FileIndex.collectWakes(since: before, state: &state)
        }
        for wake in wakes { wake() }
    }

    private static func apply(wd: Int32, mask: UInt32, name: String, rootPath: String, inotifyFD: Int32, state: inout State) {
        if mask & UInt32(IN_Q_OVERFLOW) != 0 {
            reconcileTree(rootPath: rootPath, inotifyFD: inotifyFD, state: &state)
            return
        }
        if mask & UInt32(IN_IGNORED) != 0 {
            state.watches[wd] = nil
            return
        }
        guard !name.isEmpty, let dir = state.watches[wd] else { return }
        let contentChanged = mask & UInt32(IN_MODIFY | IN_CLOSE_WRITE) != 0
        reconcile(components: dir + [name], contentChanged: contentChanged, rootPath: rootPath, inotifyFD: inotifyFD, state: &state)
    }

    /// After an inotify queue overflow nothing can be trusted: compare the whole tree with disk.
    private static func reconcileTree(rootPath: String, inotifyFD: Int32, state: inout State) {
        func walk(_ node: Node, realPath: String) {
            var seen = Set<String>()
            for entry in listDirectory(realPath) {
                seen.insert(entry.name.lowercased())
                reconcile(components: node.components + [entry.name], contentChanged: false, rootPath: rootPath, inotifyFD: inotifyFD, state: &state)
            }
            for (key, child) in node.children where !seen.contains(key) {
                reconcile(components: child.components, contentChanged: false, rootPath: rootPath, inotifyFD: inotifyFD, state: &state)
            }
            for child in node.children.values where child.isDirectory {
                walk(child, realPath: realPath + "/" + child.name)
            }
        }
        walk(state.root, realPath: rootPath)
    }

    /// Brings one path of the mirror in line with the disk, journaling what changed.
    private static func reconcile(components: [String], contentChanged: Bool, rootPath: String, inotifyFD: Int32, state: inout State) {
        guard let name = components.last else { return }
        var parent = state.root
        for c in components.dropLast() {
            guard let next = parent.children[c.lowercased()], next.isDirectory, next.name == c else { return }
            parent = next
        }
        let key = name.lowercased()
        let realPath = rootPath + "/" + components.joined(separator: "/")
        var st = stat()
        let exists = lstat(realPath, &st) == 0
        let kind = st.st_mode & S_IFMT
        let served = exists && (kind == S_IFREG || kind == S_IFDIR)
        let existing = parent.children[key]
        if let existing, existing.name != name {
            // Another spelling of this name owns the entry (case collision on disk): only its
            // own disappearance matters.
            var other = stat()
            if lstat(rootPath + "/" + (components.dropLast() + [existing.name]).joined(separator: "/"), &other) == 0 { return }
            remove(existing, state: &state)
            if served { add(name: name, st: st, parent: parent, realPath: realPath, inotifyFD: inotifyFD, state: &state) }
            return
        }
        guard served else {
            if let existing { remove(existing, state: &state) }
            return
        }
        if let existing {
            if existing.isDirectory != (kind == S_IFDIR) {
                remove(existing, state: &state)
                add(name: name, st: st, parent: parent, realPath: realPath, inotifyFD: inotifyFD, state: &state)
            } else if existing.isDirectory {
                // A directory moved in over an old one: its contents may differ entirely.
                if st.st_ino != existing.inode {
                    remove(existing, state: &state)
                    add(name: name, st: st, parent: parent, realPath: realPath, inotifyFD: inotifyFD, state: &state)
                }
            } else if contentChanged || st.st_ino != existing.inode || UInt64(st.st_size) != existing.size
                        || st.st_mtim.tv_sec != existing.mtime.tv_sec || st.st_mtim.tv_nsec != existing.mtime.tv_nsec {
                if state.byRev[existing.rev] === existing { state.byRev[existing.rev] = nil }
                existing.modifications += 1
                fill(existing, from: st)
                state.byRev[existing.rev] = existing
                journal(existing, state: &state)
            }
        } else {
            add(name: name, st: st, parent: parent, realPath: realPath, inotifyFD: inotifyFD, state: &state)
        }
    }

    private static func fill(_ node: Node, from st: stat) {
        node.inode = UInt64(st.st_ino)
        node.size = UInt64(st.st_size)
        node.mtime = st.st_mtim
        node.ctime = st.st_ctim
        node.contentHash = nil
        node.serverModified = max(st.st_mtim.tv_sec, st.st_ctim.tv_sec)
        guard !node.isDirectory else { return }
        let signature = "\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec):\(node.modifications)"
        let digest = SHA256.hash(data: Array(signature.utf8))
        // 16 hex digits: Dropbox revs are at least 9 lowercase hex characters.
        node.rev = digest.prefix(8).map { b in (b < 16 ? "0" : "") + String(b, radix: 16) }.joined()
    }

    private static func add(name: String, st: stat, parent: Node, realPath: String, inotifyFD: Int32, state: inout State) {
        let isDir = st.st_mode & S_IFMT == S_IFDIR
        let node = Node(name: name, isDirectory: isDir, parent: parent)
        fill(node, from: st)
        let pathLower = "/" + node.components.joined(separator: "/").lowercased()
        node.id = makeID(pathLower: pathLower, incarnation: state.incarnations[pathLower, default: 0])
        parent.children[name.lowercased()] = node
        parent.invalidateOrder()
        state.byID[node.id] = node
        if !isDir { state.byRev[node.rev] = node }
        journal(node, state: &state)
        if isDir {
            // Watch before scanning, so nothing created in between is missed.
            addWatch(fd: inotifyFD, realPath: realPath, components: node.components, state: &state)
            scanChildren(of: node, realPath: realPath, inotifyFD: inotifyFD, state: &state, journal: true)
        }
    }

    private static func remove(_ node: Node, state: inout State) {
        guard let parent = node.parent else { return }
        parent.children[node.name.lowercased()] = nil
        parent.invalidateOrder()
        // Children of a removed folder are implied by its own `deleted` entry, as on Dropbox.
        journal(node, state: &state)
        func forget(_ n: Node) {
            let lower = "/" + n.components.joined(separator: "/").lowercased()
            state.incarnations[lower, default: 0] += 1
            if state.byID[n.id] === n { state.byID[n.id] = nil }
            if !n.isDirectory, state.byRev[n.rev] === n { state.byRev[n.rev] = nil }
            for child in n.children.values { forget(child) }
        }
        forget(node)
        node.parent = nil
    }

    private static func journal(_ node: Node, state: inout State) {
        let components = node.components
        let pathLower = "/" + components.joined(separator: "/").lowercased()
        state.seq += 1
        // Coalesce a burst of writes to one file into one entry (a 1 GiB copy is thousands of
        // IN_MODIFY events); moving the seq forward keeps every older cursor seeing it.
        if var last = state.journal.last, last.pathLower == pathLower {
            last.seq = state.seq
            last.components = components
            state.journal[state.journal.count - 1] = last
            return
        }
        state.journal.append(JournalEntry(seq: state.seq, pathLower: pathLower, components: components))
        if state.journal.count > maxJournal {
            let drop = maxJournal / 2
            state.journalFloor = state.journal[drop - 1].seq
            state.journal.removeFirst(drop)
        }
    }

    static func makeID(pathLower: String, incarnation: Int) -> String {
        let digest = SHA256.hash(data: Array("\(pathLower)\u{0}\(incarnation)".utf8))
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var out = "id:"
        for b in digest.prefix(22) { out.append(alphabet[Int(b) & 63]) }
        return out
    }

    private static func addWatch(fd: Int32, realPath: String, components: [String], state: inout State) {
        let mask = UInt32(IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO
                          | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
        let wd = inotify_add_watch(fd, realPath, mask)
        if wd >= 0 { state.watches[wd] = components }
    }

    struct DirectoryEntry { var name: String; var st: stat }

    /// Regular files and directories only: symlinks and special files are not served.
    static func listDirectory(_ realPath: String) -> [DirectoryEntry] {
        guard let dir = opendir(realPath) else { return [] }
        defer { closedir(dir) }
        let dfd = dirfd(dir)
        var out: [DirectoryEntry] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { ptr in
                ptr.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name == "." || name == ".." { continue }
            var st = stat()
            guard fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            let kind = st.st_mode & S_IFMT
            guard kind == S_IFREG || kind == S_IFDIR else { continue }
            out.append(DirectoryEntry(name: name, st: st))
        }
        return out
    }

    private static func scanChildren(of node: Node, realPath: String, inotifyFD: Int32, state: inout State, journal doJournal: Bool) {
        for entry in listDirectory(realPath) {
            let key = entry.name.lowercased()
            if node.children[key] != nil { continue }
            if doJournal {
                add(name: entry.name, st: entry.st, parent: node, realPath: realPath + "/" + entry.name, inotifyFD: inotifyFD, state: &state)
                continue
            }
            let isDir = entry.st.st_mode & S_IFMT == S_IFDIR
            let child = Node(name: entry.name, isDirectory: isDir, parent: node)
            fill(child, from: entry.st)
            child.id = makeID(pathLower: "/" + child.components.joined(separator: "/").lowercased(), incarnation: 0)
            node.children[key] = child
            state.byID[child.id] = child
            if !isDir { state.byRev[child.rev] = child }
            if isDir {
                let childPath = realPath + "/" + entry.name
                addWatch(fd: inotifyFD, realPath: childPath, components: child.components, state: &state)
                scanChildren(of: child, realPath: childPath, inotifyFD: inotifyFD, state: &state, journal: false)
            }
        }
        node.invalidateOrder()
    }

    // MARK: Longpoll

    private static func collectWakes(since: UInt64, state: inout State) -> [@Sendable () -> Void] {
        var wakes: [@Sendable () -> Void] = []
        let fresh = state.journal.suffix(from: firstIndex(after: since, in: state.journal))
        for (key, waiter) in state.waiters {
            if fresh.contains(where: { $0.seq > waiter.seq && inScope($0.pathLower, scope: waiter.scope, recursive: waiter.recursive) }) {
                wakes.append(waiter.wake)
                state.waiters[key] = nil
            }
        }
        return wakes
    }

    /// Registers a waiter unless changes are already there. Returns nil when it should answer
    /// at once, else a token for `cancelWaiter`.
    func addWaiter(_ waiter: LongpollWaiter) -> Int? {
        state.withLock { state in
            let start = FileIndex.firstIndex(after: waiter.seq, in: state.journal)
            if state.journal[start...].contains(where: { FileIndex.inScope($0.pathLower, scope: waiter.scope, recursive: waiter.recursive) }) {
                return nil
            }
            state.nextWaiter += 1
            state.waiters[state.nextWaiter] = waiter
            return state.nextWaiter
        }
    }

    /// Returns whether the waiter was still registered (false: it was already woken).
    func cancelWaiter(_ token: Int) -> Bool {
        state.withLock { $0.waiters.removeValue(forKey: token) != nil }
    }

    static func inScope(_ pathLower: String, scope: String, recursive: Bool) -> Bool {
        let prefix = scope + "/"
        guard pathLower.hasPrefix(prefix) else { return false }
        return recursive || !pathLower.dropFirst(prefix.count).contains("/")
    }

    static func firstIndex(after seq: UInt64, in journal: [JournalEntry]) -> Int {
        var lo = 0, hi = journal.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if journal[mid].seq <= seq { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    // MARK: Queries

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
    private static func node(at lower: [String], in state: borrowing State) -> Node? {
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
            for i in start..<state.journal.count where FileIndex.inScope(state.journal[i].pathLower, scope: folder, recursive: recursive) {
                latest[state.journal[i].pathLower] = i
                order.append(i)
            }
            // Each changed path once, at its last change, in journal order: parents are created
            // before their children, and a delete-then-recreate ends as the recreation.
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
            out.contentHash = ContentHash.hex(ofFileAt: path) ?? ContentHash.hex(of: [UInt8]())
            let lower = entry.components.map { $0.lowercased() }
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

enum EmulatorError: Error, CustomStringConvertible {
    case badRoot(String)
    case tls(String)

    var description: String {
        switch self {
        case .badRoot(let path): return "root \(path) is not a readable directory"
        case .tls(let message): return "TLS: \(message)"
        }
    }
}
