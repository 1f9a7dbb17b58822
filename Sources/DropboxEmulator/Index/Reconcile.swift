// Keeping the mirror in step with the directory: inotify events drained under the index's lock,
// a subtree re-read where events cannot say what changed, and every change journaled.

import Crypto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

extension FileIndex {
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
            state.movedAway.removeAll()
            guard state.seq != before else { return [] }
            return FileIndex.collectWakes(since: before, state: &state)
        }
        for wake in wakes { wake() }
    }

    static func apply(wd: Int32, mask: UInt32, name: String, rootPath: String, inotifyFD: Int32, state: inout State) {
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
    static func reconcileTree(rootPath: String, inotifyFD: Int32, state: inout State) {
        func walk(_ node: Node, realPath: String) {
            var seen = Set<String>()
            for entry in listDirectory(realPath) {
                seen.insert(entry.name.dropboxLowercased)
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
    static func reconcile(components: [String], contentChanged: Bool, rootPath: String, inotifyFD: Int32, state: inout State) {
        guard let name = components.last else { return }
        var parent = state.root
        for c in components.dropLast() {
            guard let next = parent.children[c.dropboxLowercased], next.isDirectory, next.name == c else { return }
            parent = next
        }
        let key = name.dropboxLowercased
        let realPath = rootPath + "/" + components.joined(separator: "/")
        var st = stat()
        let exists = lstat(realPath, &st) == 0
        let kind = st.st_mode & S_IFMT
        let served = exists && (kind == S_IFREG || kind == S_IFDIR || kind == S_IFLNK)
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
            if existing.isDirectory != (kind == S_IFDIR) || (existing.symlinkTarget != nil) != (kind == S_IFLNK) {
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
                fill(existing, from: st, realPath: realPath)
                state.byRev[existing.rev] = existing
                journal(existing, state: &state)
            }
        } else {
            add(name: name, st: st, parent: parent, realPath: realPath, inotifyFD: inotifyFD, state: &state)
        }
    }

    static func fill(_ node: Node, from st: stat, realPath: String) {
        node.inode = UInt64(st.st_ino)
        node.symlinkTarget = st.st_mode & S_IFMT == S_IFLNK ? linkTarget(realPath) : nil
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

    static func add(name: String, st: stat, parent: Node, realPath: String, inotifyFD: Int32, state: inout State) {
        let isDir = st.st_mode & S_IFMT == S_IFDIR
        let node = Node(name: name, isDirectory: isDir, parent: parent)
        fill(node, from: st, realPath: realPath)
        let pathLower = "/" + node.components.joined(separator: "/").dropboxLowercased
        if let id = state.movedAway.removeValue(forKey: node.diskIdentity), state.byID[id] == nil {
            node.id = id
        } else {
            node.id = makeID(pathLower: pathLower, incarnation: state.incarnations[pathLower, default: 0])
        }
        parent.children[name.dropboxLowercased] = node
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

    static func remove(_ node: Node, state: inout State) {
        guard let parent = node.parent else { return }
        parent.children[node.name.dropboxLowercased] = nil
        parent.invalidateOrder()
        // Children of a removed folder are implied by its own `deleted` entry, as on Dropbox.
        journal(node, state: &state, removed: true)
        func forget(_ n: Node) {
            let lower = "/" + n.components.joined(separator: "/").dropboxLowercased
            state.incarnations[lower, default: 0] += 1
            state.movedAway[n.diskIdentity] = n.id
            if state.byID[n.id] === n { state.byID[n.id] = nil }
            if !n.isDirectory, state.byRev[n.rev] === n { state.byRev[n.rev] = nil }
            for child in n.children.values { forget(child) }
        }
        forget(node)
        node.parent = nil
    }

    static func journal(_ node: Node, state: inout State, removed: Bool = false) {
        let components = node.components
        let pathLower = "/" + components.joined(separator: "/").dropboxLowercased
        state.seq += 1
        // Coalesce a burst of writes to one file into one entry (a 1 GiB copy is thousands of
        // IN_MODIFY events); moving the seq forward keeps every older cursor seeing it.
        if var last = state.journal.last, last.pathLower == pathLower {
            last.seq = state.seq
            last.components = components
            last.removed = last.removed || removed
            state.journal[state.journal.count - 1] = last
            return
        }
        state.journal.append(JournalEntry(seq: state.seq, pathLower: pathLower, components: components, removed: removed))
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

    static func addWatch(fd: Int32, realPath: String, components: [String], state: inout State) {
        let mask = UInt32(IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO
                          | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
        let wd = inotify_add_watch(fd, realPath, mask)
        if wd >= 0 { state.watches[wd] = components }
    }

    struct DirectoryEntry { var name: String; var st: stat }

    /// A symbolic link's target; "" if it cannot be read.
    static func linkTarget(_ realPath: String) -> String {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = buffer.withUnsafeMutableBufferPointer { readlink(realPath, $0.baseAddress!, $0.count) }
        return length > 0 ? String(decoding: buffer[..<length], as: UTF8.self) : ""
    }

    /// Regular files, directories and symbolic links (served as links, as Dropbox keeps them:
    /// never followed); special files are not served.
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
            guard kind == S_IFREG || kind == S_IFDIR || kind == S_IFLNK else { continue }
            out.append(DirectoryEntry(name: name, st: st))
        }
        return out
    }

    static func scanChildren(of node: Node, realPath: String, inotifyFD: Int32, state: inout State, journal doJournal: Bool) {
        for entry in listDirectory(realPath) {
            let key = entry.name.dropboxLowercased
            if node.children[key] != nil { continue }
            if doJournal {
                add(name: entry.name, st: entry.st, parent: node, realPath: realPath + "/" + entry.name, inotifyFD: inotifyFD, state: &state)
                continue
            }
            let isDir = entry.st.st_mode & S_IFMT == S_IFDIR
            let child = Node(name: entry.name, isDirectory: isDir, parent: node)
            fill(child, from: entry.st, realPath: realPath + "/" + entry.name)
            child.id = makeID(pathLower: "/" + child.components.joined(separator: "/").dropboxLowercased, incarnation: 0)
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
}
