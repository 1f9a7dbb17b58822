// Pinned folders: folders kept available offline. Every file under a pinned folder is kept whole
// in the block cache, at its current rev: fetched in the background (four files at a time, each in
// 8 MiB Range requests one after another through the read engine's own fetch, which reads and
// fills the block cache as usual: at most 32 MiB and four connections; `--pin-bandwidth` spaces
// the requests to stay under a rate), fetched again when the change feed brings a new rev, and never evicted while pinned
// (`BlockCache.setPinned`; blocks of an old rev become ordinary and age out). The list of pins is
// kept in the block cache's folder (`pins.json`), so a remount goes on keeping them.
//
// A pin needs the block cache (it is where pinned files live) and room in it: pinning a folder
// larger than the cache's capacity, less what other pins hold, is refused with the room it needs.
// The folder must be listed whole (the first listing, or the saved tree): until it is, the pin
// waits, and `status` says so.

import DropboxClient
import Foundation
import Logging
import Synchronization

/// One pinned folder and how much of it is in the block cache.
public struct PinStatus: Sendable, Equatable {
    /// The folder's path inside the mount, as it was pinned ("/Photos/2024").
    public var path: String
    /// The folder and everything below it are listed (before, the totals are not known yet).
    public var listed: Bool
    public var files: Int
    public var bytesTotal: UInt64
    public var bytesDone: UInt64
    /// Why the pin is not being kept, when it is not: no such folder (any more), a file, more
    /// than the block cache holds beside the pins before it, or a block cache that cannot be
    /// written. nil while it is kept.
    public var problem: String? = nil
    public var complete: Bool { listed && problem == nil && bytesDone >= bytesTotal }
}

public enum PinError: Error, Equatable, CustomStringConvertible {
    case noBlockCache
    case notFound(String)
    case notAFolder(String)
    case tooLarge(path: String, needs: UInt64, room: UInt64)
    case notPinned(String)
    /// The list of pins could not be written (it is what the next mount pins again).
    case cannotSave(file: String, reason: String)

    public var description: String {
        switch self {
        case .noBlockCache:
            "pinning keeps files in the block cache: mount with --block-cache-dir (and a --block-cache-size that holds the folder)"
        case .notFound(let path): "\(path): no such folder in the mount"
        case .notAFolder(let path): "\(path) is a file; pin the folder that holds it"
        case .tooLarge(let path, let needs, let room):
            "\(path) needs \(Self.mebibytes(needs)) MiB in the block cache, which has room for \(Self.mebibytes(room)) MiB; raise --block-cache-size"
        case .notPinned(let path): "\(path) is not pinned"
        case .cannotSave(let file, let reason): "cannot save the pins in \(file): \(reason)"
        }
    }

    private static func mebibytes(_ bytes: UInt64) -> UInt64 { (bytes + (1 << 20) - 1) >> 20 }
}

/// Spaces the parts pins fetch so that together they stay under a rate: each part reserves its
/// bytes' share of time, and waits until its slot comes. A pure schedule over a given clock.
struct PinPacer {
    let bytesPerSecond: Double
    private(set) var nextFree = -Double.infinity

    init(bytesPerSecond: UInt64) { self.bytesPerSecond = Double(max(1, bytesPerSecond)) }

    /// Seconds to wait, at `now`, before fetching `bytes`.
    mutating func reserve(_ bytes: UInt64, now: Double) -> Double {
        let start = max(now, nextFree)
        nextFree = start + Double(bytes) / bytesPerSecond
        return start - now
    }
}

/// The pins and their progress, and the wake-up of the thread that fetches them.
final class Pins: @unchecked Sendable {
    // `@unchecked Sendable`: every var is read and written under `condition`'s lock.
    private let condition = NSCondition()
    private var paths: [String] = []
    private var progress: [String: PinStatus] = [:]
    private var workWaiting = false
    /// `pins.json` in the block cache's folder.
    let file: String
    /// Holds nil without `--pin-bandwidth`.
    private let pacer: Mutex<PinPacer?>
    /// The 8 MiB buffers of the parts being fetched, one per file fetched at once, reused from
    /// part to part: a fresh buffer for every 8 MiB would cost page faults and zeroed pages for
    /// every byte pinned. Freed when a pass ends, so an idle mount does not keep them.
    let buffers = ReadBudget(capacity: UInt64(DropboxFilesystem.pinConcurrency) * UInt64(Pins.partSize))

    /// The most one request of a pin asks for.
    static let partSize = 8 << 20

    init(directory: String, bandwidth: UInt64? = nil) {
        pacer = Mutex(bandwidth.map { PinPacer(bytesPerSecond: $0) })
        file = directory + "/pins.json"
        if let data = FileManager.default.contents(atPath: file),
           let saved = try? JSONSerialization.jsonObject(with: data) as? [String] {
            paths = saved
        }
    }

    var list: [String] { condition.withLock { paths } }

    /// A part for `range` (at most `partSize`) in one of the pins' own buffers; in a one-off
    /// buffer if none is free (a part still held elsewhere).
    func part(_ range: Range<UInt64>) -> Part {
        let size = ReadBudget.bufferSize(for: Int(range.upperBound - range.lowerBound))
        guard let buffer = buffers.reserveBuffer(size) else { return Part(range: range) }
        return Part(range: range, buffer: buffer, budget: buffers)
    }

    /// Frees the buffers kept for reuse (a pass is over).
    func freeBuffers() { buffers.freeParked() }

    /// Waits until fetching `bytes` more keeps the pins under their bandwidth.
    func pace(_ bytes: UInt64) {
        let now = Date().timeIntervalSinceReferenceDate
        let wait = pacer.withLock { $0?.reserve(bytes, now: now) ?? 0 }
        if wait > 0 { Thread.sleep(forTimeInterval: wait) }
    }

    var statuses: [PinStatus] {
        condition.withLock { paths.map { progress[$0.lowercased()] ?? PinStatus(path: $0, listed: false, files: 0, bytesTotal: 0, bytesDone: 0) } }
    }

    /// Adds `path` and saves the list; a list that cannot be saved is left as it was (a pin the
    /// next mount would silently drop is not made).
    func add(_ path: String) throws(PinError) {
        try change { paths in
            if !paths.contains(where: { $0.lowercased() == path.lowercased() }) { paths.append(path) }
        }
        wake()
    }

    /// Removes `path` and saves the list (left as it was if it cannot be saved); false if it was
    /// not pinned.
    func remove(_ path: String) throws(PinError) -> Bool {
        var removed = false
        try change { paths in
            let before = paths.count
            paths.removeAll { $0.lowercased() == path.lowercased() }
            removed = paths.count < before
        }
        guard removed else { return false }
        condition.withLock { progress[path.lowercased()] = nil }
        wake()
        return true
    }

    /// Edits the list and saves it, under the lock, so that changes are saved in the order they
    /// are made; the list changes only once saved.
    private func change(_ edit: (inout [String]) -> Void) throws(PinError) {
        condition.lock()
        defer { condition.unlock() }
        var edited = paths
        edit(&edited)
        guard edited != paths else { return }
        try save(edited)
        paths = edited
    }

    func update(_ status: PinStatus) {
        condition.withLock {
            if paths.contains(where: { $0.lowercased() == status.path.lowercased() }) { progress[status.path.lowercased()] = status }
        }
    }

    /// The problem each pin was last logged with: a warning when one appears or changes, not
    /// at every pass.
    private var warned: [String: String] = [:]

    func warnOnce(path: String, problem: String?, logger: Logger) {
        let changed = condition.withLock { () -> Bool in
            let key = path.lowercased()
            defer { warned[key] = problem }
            return problem != nil && warned[key] != problem
        }
        if changed, let problem { logger.warning("a pinned folder is not kept", metadata: ["path": "\(path)", "why": "\(problem)"]) }
    }

    /// There may be something to fetch (a pin added, the tree changed).
    func wake() {
        condition.withLock {
            workWaiting = true
            condition.broadcast()
        }
    }

    /// Waits for `wake` or `timeout` seconds.
    func waitForWork(timeout: TimeInterval) {
        condition.withLock {
            let deadline = Date().addingTimeInterval(timeout)
            while !workWaiting && condition.wait(until: deadline) {}
            workWaiting = false
        }
    }

    /// Writes the list whole (a new file renamed over the old one: never half a list).
    private func save(_ list: [String]) throws(PinError) {
        guard let data = try? JSONSerialization.data(withJSONObject: list) else { return }
        let directory = (file as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw .cannotSave(file: file, reason: (error as NSError).localizedDescription)
        }
        let failure = data.withUnsafeBytes {
            WholeFileWrite.write($0, to: file, through: file + WholeFileWrite.temporarySuffix, synced: true)
        }
        guard failure == 0 else { throw .cannotSave(file: file, reason: String(cString: strerror(failure))) }
    }
}

extension DropboxFilesystem {
    /// Pins the folder at `path` (inside the mount): refused without a block cache, for a file, or
    /// for a folder larger than the room left in the cache.
    public func pin(_ path: String) throws(PinError) -> PinStatus {
        guard let pins, let cache = reader.cache else { throw .noBlockCache }
        let normalized = Self.mountPath(path)
        if !options.followsChanges { listBelow(normalized) }
        var scan = scanPinned(normalized)
        if options.followsChanges, case .folder(_, false) = scan {
            // Right after mounting the first listing may still run: its end tells the folder's
            // size, which decides whether the pin fits.
            let deadline = Date().addingTimeInterval(Self.pinListingWait)
            feedChanged.lock()
            while !state.withLock({ $0.feed.live }) && Date() < deadline { _ = feedChanged.wait(until: deadline) }
            feedChanged.unlock()
            scan = scanPinned(normalized)
        }
        switch scan {
        case .missing: throw .notFound(normalized)
        case .file: throw .notAFolder(normalized)
        case .folder(let files, let listed):
            if listed {
                let others = pins.statuses.filter { $0.path.lowercased() != normalized.lowercased() }.reduce(UInt64(0)) { $0 + $1.bytesTotal }
                let needs = files.reduce(UInt64(0)) { $0 + $1.size }
                let room = cache.capacity > others ? cache.capacity - others : 0
                guard needs <= room else { throw .tooLarge(path: normalized, needs: needs, room: room) }
            }
            try pins.add(normalized)
            let status = PinStatus(path: normalized, listed: listed, files: files.count,
                                   bytesTotal: files.reduce(0) { $0 + $1.size },
                                   bytesDone: files.reduce(0) { $0 + cache.cachedBytes(of: $1.file) })
            pins.update(status)
            return status
        }
    }

    /// Pins `path` without checking it now (`-o pin=` at mount time, before anything is listed):
    /// the pin waits for its folder to be listed, and says so in `pinStatus`.
    public func keepPinned(_ path: String) throws(PinError) {
        guard let pins else { throw .noBlockCache }
        try pins.add(Self.mountPath(path))
    }

    public func unpin(_ path: String) throws(PinError) {
        guard let pins else { throw .noBlockCache }
        let normalized = Self.mountPath(path)
        guard try pins.remove(normalized) else { throw .notPinned(normalized) }
    }

    /// Lists the folders at and below `path` that are missing or past their TTL, one at a time:
    /// with no change feed (a shared link) nothing else lists the folders below a pin, or sees
    /// a new rev in them.
    func listBelow(_ path: String) {
        var inode = InodeNumber.root
        for name in path.split(separator: "/") {
            guard let found = try? lookup(parent: inode, name: String(name)), found.kind == .directory else { return }
            inode = found.inode
        }
        guard let top = Slot(inode) else { return }
        var stack = [top]
        while let folder = stack.popLast(), !stopped.load(ordering: .relaxed) {
            guard (try? ensureFreshListing(of: folder)) != nil else { continue }
            stack += state.withLock { state in
                state.tree.isAlive(folder) ? state.tree.children(of: folder).filter { state.tree.isDirectory($0) } : []
            }
        }
    }

    /// How long `pin` waits for a first listing under way to reach the folder.
    static let pinListingWait: TimeInterval = 15

    /// Every pin with its progress (empty without a block cache).
    public var pinStatus: [PinStatus] { pins?.statuses ?? [] }

    /// "/a/b" from "a/b/", "/a/b" or "/a//b"; "/" for the whole mount.
    static func mountPath(_ path: String) -> String {
        "/" + path.split(separator: "/").joined(separator: "/")
    }

    enum PinScan {
        case missing, file
        /// The files below (at their current revs, exports left out: they have no blocks) and
        /// whether every folder below is listed.
        case folder(files: [PinnedFile], listed: Bool)
    }

    /// A file below a pinned folder, and where the tree holds it.
    struct PinnedFile {
        var slot: Slot
        var file: ReadFile
        var size: UInt64 { file.size }
    }

    func scanPinned(_ path: String) -> PinScan {
        state.withLock { state in
            let tree = state.tree
            let full = options.rootPath + (path == "/" ? "" : path)
            guard let folder = tree.slot(atPath: full, below: options.rootPath), tree.isAlive(folder) else {
                // Missing only once the folder that would hold it is listed: right after mounting
                // with no saved tree, the pin waits for the first listing like any other.
                return Self.deepestListed(path, in: tree) ? .missing : .folder(files: [], listed: false)
            }
            guard tree.isDirectory(folder) else { return .file }
            var files: [PinnedFile] = []
            var listed = true
            var stack = [folder]
            while let next = stack.popLast() {
                if !tree.isComplete(next) { listed = false }
                for child in tree.children(of: next) {
                    if tree.isDirectory(child) {
                        stack.append(child)
                    } else if let details = tree.details(child), details.isPlainFile {
                        files.append(PinnedFile(slot: child, file: ReadFile(id: details.id, rev: details.rev, size: details.size)))
                    }
                }
            }
            return .folder(files: files, listed: listed)
        }
    }

    /// Whether the deepest folder of `path` (inside the mount) the tree holds is listed (so what
    /// is below it and not in the tree does not exist).
    private static func deepestListed(_ path: String, in tree: Tree) -> Bool {
        var slot = Slot.root
        for component in path.split(separator: "/") {
            guard let next = tree.child(of: slot, folded: FoldedName(String(component))), tree.isAlive(next) else { break }
            slot = next
        }
        return tree.isComplete(slot)
    }

    /// The thread that keeps pinned files in the block cache, until the mount stops. A pass that
    /// could not keep what it fetched (a full disk, an unwritable cache) is not followed by the
    /// same downloads ten seconds later: the wait doubles, up to `mostPinBackoff`, until a pass
    /// stores again.
    func startPinning() {
        guard let pins, reader.cache != nil else { return }
        let thread = Thread { [self] in
            var wait: TimeInterval = Self.pinPassInterval
            while !stopped.load(ordering: .relaxed) {
                let stored = keepPinnedFiles(pins)
                guard !stored else {
                    wait = Self.pinPassInterval
                    pins.waitForWork(timeout: wait)
                    continue
                }
                // Changes in the tree wake the pins often; only a pin added or removed, or the
                // time, ends this wait.
                wait = min(wait * 2, Self.mostPinBackoff)
                let retry = Date().addingTimeInterval(wait), list = pins.list
                while !stopped.load(ordering: .relaxed), Date() < retry, pins.list == list {
                    pins.waitForWork(timeout: retry.timeIntervalSinceNow)
                }
            }
        }
        thread.name = "dbx-pins"
        thread.start()
    }

    /// Seconds between passes over the pins; and the longest wait after passes that failed.
    static let pinPassInterval: TimeInterval = 10
    static let mostPinBackoff: TimeInterval = 600

    /// One pass: marks every pinned file's current rev as kept, then fetches what is missing.
    /// Pins are kept in the order they were made, as far as the block cache holds them: one that
    /// no longer fits (pinned at mount time, by an earlier mount with a larger cache, or grown on
    /// Dropbox since) is neither fetched nor protected, and says why in `status` and once in the
    /// log, so the cache never grows past its size. False when fetched bytes could not be kept.
    private func keepPinnedFiles(_ pins: Pins) -> Bool {
        guard let cache = reader.cache else { return true }
        if !options.followsChanges { for path in pins.list { listBelow(path) } }
        var scans: [(path: String, scan: PinScan, problem: String?)] = []
        var held: UInt64 = 0
        for path in pins.list {
            let scan = scanPinned(path)
            var problem: String?
            switch scan {
            case .missing: problem = "no such folder in the mount"
            case .file: problem = "a file, not a folder"
            case .folder(let files, _):
                let needs = files.reduce(UInt64(0)) { $0 + $1.size }
                if held + needs > cache.capacity {
                    problem = PinError.tooLarge(path: path, needs: needs, room: cache.capacity - min(held, cache.capacity)).description
                } else {
                    held += needs
                }
            }
            scans.append((path, scan, problem))
        }
        var kept: [ReadFile] = []
        for case (_, .folder(let files, _), nil) in scans { kept += files.map(\.file) }
        cache.setPinned(kept)
        var stored = true
        for (path, scan, problem) in scans {
            pins.warnOnce(path: path, problem: problem, logger: logger)
            guard case .folder(let files, let listed) = scan, problem == nil else {
                pins.update(PinStatus(path: path, listed: false, files: 0, bytesTotal: 0, bytesDone: 0, problem: problem))
                continue
            }
            let total = files.reduce(UInt64(0)) { $0 + $1.size }
            let done = Mutex(files.reduce(UInt64(0)) { $0 + cache.cachedBytes(of: $1.file) })
            pins.update(PinStatus(path: path, listed: listed, files: files.count, bytesTotal: total, bytesDone: done.withLock { $0 }))
            let missing = files.filter { cache.cachedBytes(of: $0.file) < $0.size }
            guard stored else { continue }   // the cache could not keep another pin's bytes either
            // `pinConcurrency` files at a time, each one request of at most 8 MiB at a time: a
            // round trip per file no longer adds up file after file, and the memory stays bounded.
            let next = Mutex(0)
            let writeFailure = Mutex<String?>(nil)
            let finished = DispatchGroup()
            for _ in 0..<min(Self.pinConcurrency, missing.count) {
                finished.enter()
                let worker = Thread { [self] in
                    defer { finished.leave() }
                    while true {
                        let index = next.withLock { i -> Int in defer { i += 1 }; return i }
                        guard index < missing.count, !stopped.load(ordering: .relaxed), !reachability.isUnreachable,
                              pins.list.contains(path) else { return }
                        let pinned = missing[index]
                        let before = cache.cachedBytes(of: pinned.file)
                        fetchWhole(pinned, pins: pins)
                        let after = cache.cachedBytes(of: pinned.file)
                        let now = done.withLock { $0 += after - min(before, after); return $0 }
                        if let failure = cache.takeWriteFailure() {
                            // Every file after this one would be downloaded only to be dropped.
                            next.withLock { $0 = missing.count }
                            writeFailure.withLock { $0 = failure }
                        }
                        pins.update(PinStatus(path: path, listed: listed, files: files.count, bytesTotal: total, bytesDone: now))
                    }
                }
                worker.name = "dbx-pin"
                worker.start()
            }
            finished.wait()
            if let failure = writeFailure.withLock({ $0 }) {
                stored = false
                let problem = "the block cache cannot be written (\(failure)); trying again later"
                pins.warnOnce(path: path, problem: problem, logger: logger)
                pins.update(PinStatus(path: path, listed: listed, files: files.count, bytesTotal: total,
                                      bytesDone: done.withLock { $0 }, problem: problem))
            }
        }
        pins.freeBuffers()
        return stored
    }

    /// Pinned files fetched at once.
    static let pinConcurrency = 4

    /// The blocks of `file` not in the cache yet, downloaded through the read engine (so they land
    /// in the block cache) in parts of 8 MiB, one after another: one request and 8 MiB of memory
    /// at a time per file, beside whatever the user reads.
    private func fetchWhole(_ pinned: PinnedFile, pins: Pins) {
        let file = pinned.file
        let stream = reader.open(file) { [weak self] in self?.isCurrent(pinned) ?? false }
        defer { reader.close(stream) }
        let step = UInt64(Pins.partSize)
        var offset: UInt64 = 0
        while offset < file.size, !stopped.load(ordering: .relaxed) {
            let part = pins.part(offset..<min(file.size, offset + step))
            pins.pace(UInt64(part.length))
            _ = part.claim()
            reader.fetch(part, of: stream)
            guard (try? part.wait(forPrefix: part.length)) == .ready else { return }
            offset += step
        }
    }

    /// Whether the tree still holds `pinned` where the scan found it, at the same rev. Asked
    /// before each part: it looks at one record, where it used to walk the whole tree under the
    /// state lock (on a tree of a million entries, every filesystem call waited out each walk). A
    /// file moved meanwhile stops here; the next pass finds it where it went.
    private func isCurrent(_ pinned: PinnedFile) -> Bool {
        state.withLock { state in
            guard state.tree.isAlive(pinned.slot), let details = state.tree.details(pinned.slot) else { return false }
            return details.id == pinned.file.id && details.rev == pinned.file.rev
        }
    }
}
