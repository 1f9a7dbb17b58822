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
final class FileIndex: Sendable {
    let rootPath: String
    let bootID: UInt64
    let inotifyFD: Int32
    let state: Mutex<State>
    let watcher: Mutex<pthread_t?> = Mutex(nil)
    let stopping = Atomic<Bool>(false)
    /// Written by stop() so the watcher's poll(2) returns at once.
    let wakePipe: (read: Int32, write: Int32)

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
        /// Ids of the entries removed by the inotify events being applied, by what makes them the
        /// same on disk (`Node.diskIdentity`): one that reappears at another path among the same
        /// events was moved, and keeps its id, as Dropbox keeps a file's or folder's id through a
        /// move or rename. Emptied after each batch of events.
        var movedAway: [String: String] = [:]
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

    func watchLoop() {
        while !stopping.load(ordering: .sequentiallyConsistent) {
            var fds = [pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 2, 1000)
            if n > 0, fds[0].revents != 0 { drain() }
        }
    }

    /// Applies every pending inotify event. Every API request calls this first.

    // MARK: Longpoll

    static func collectWakes(since: UInt64, state: inout State) -> [@Sendable () -> Void] {
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

    /// Whether a change at `pathLower` is reported to a cursor on `scope`: the folder's contents,
    /// and the folder itself (its first page names it too), whose deletion or move must wake a
    /// longpoll on it.
    static func inScope(_ pathLower: String, scope: String, recursive: Bool) -> Bool {
        if !scope.isEmpty && pathLower == scope { return true }
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
}

enum EmulatorError: Error, CustomStringConvertible {
    case badRoot(String)
    case tls(String)
    case sharedLink(String)

    var description: String {
        switch self {
        case .badRoot(let path): return "root \(path) is not a readable directory"
        case .tls(let message): return "TLS: \(message)"
        case .sharedLink(let message): return "shared link: \(message)"
        }
    }
}
