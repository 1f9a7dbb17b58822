// An optional on-disk cache of file blocks, so a file read once is not downloaded again, in this
// mount or the next. Blocks are 1 MiB, aligned, and keyed by file id, rev and index: a rev never
// changes content, so a cached block can never be stale, only unused (and evicted). The last block
// of a file is shorter. Only whole blocks that a part downloaded completely are stored.
//
// Layout: one file per block, `<hex of id>.<rev>.<index>`, created 0600 in a 0700 directory,
// written to a temporary name and renamed, so a crash leaves no torn block under a real name.
// A block whose length is wrong is treated as missing and removed.
//
// Eviction is least recently used, over `capacity` bytes. The order survives remounts through the
// files' modification times (a hit touches its file); in memory it is a queue of touches with
// lazy deletion, so eviction is amortised O(1) however large the cache. Blocks of pinned files
// (`Pins`: a folder kept available offline) are never evicted; eviction passes over them.
//
// Disk I/O is never done under the index's lock; the index is loaded on first use, which is after
// libfuse's daemonizing fork.

import DropboxClient
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

final class BlockCache: Sendable {
    static let blockSize: UInt64 = 1 << 20

    let directory: String
    let capacity: UInt64
    private let logger: Logger
    private let index = Mutex<Index?>(nil)
    /// An NSLock, not a Mutex: it is held across the directory scan (blocking I/O), and Mutexes here
    /// guard only short critical sections.
    private let loading = NSLock()

    private struct Index {
        var entries: [String: (size: UInt64, tick: UInt64)] = [:]
        var order: [(key: String, tick: UInt64)] = []
        var orderHead = 0
        var total: UInt64 = 0
        var tick: UInt64 = 0

        mutating func touch(_ key: String, size: UInt64) {
            tick += 1
            if let old = entries[key] { total -= old.size }
            entries[key] = (size, tick)
            total += size
            order.append((key, tick))
            compactOrderIfWasteful()
        }

        /// Drops the places eviction has passed and those a later touch of their key made stale,
        /// once they are most of `order`. On every touch, not only while evicting: a cache that
        /// is seldom full seldom evicts, and a mount re-reading cached files would grow `order`
        /// by one key per block read, for good. Each key has one current place, so what is kept
        /// is at most `entries.count`, and the next sweep is thousands of touches away.
        private mutating func compactOrderIfWasteful() {
            guard order.count > 2 * entries.count + 4096 else { return }
            order = order[orderHead...].filter { entries[$0.key]?.tick == $0.tick }
            orderHead = 0
        }

        /// Places `order` holds, passed and stale ones included.
        var orderLength: Int { order.count }

        /// The least recently used key that `isPinned` does not keep, removed from the index.
        mutating func evictOne(isPinned: (String) -> Bool) -> String? {
            var passedOver = 0
            while orderHead < order.count {
                if let entry = entries[order[orderHead].key], entry.tick == order[orderHead].tick,
                   isPinned(order[orderHead].key) {
                    // Kept: moved to the back, once each; a cache full of pinned blocks evicts nothing.
                    passedOver += 1
                    if passedOver > entries.count { return nil }
                    let key = order[orderHead].key
                    orderHead += 1
                    touch(key, size: entry.size)
                    continue
                }
                let (key, tick) = order[orderHead]
                orderHead += 1
                guard let entry = entries[key], entry.tick == tick else { continue }
                entries[key] = nil
                total -= entry.size
                compactOrderIfWasteful()
                return key
            }
            return nil
        }
    }

    /// Bytes of blocks on disk, as far as the index knows (0 before the first use loads it).
    var storedBytes: UInt64 { index.withLock { $0?.total ?? 0 } }

    /// The `<hex id>.<rev>` prefixes of pinned files' blocks.
    private let pinned = Mutex<Set<String>>([])

    /// Keeps every block of these files (by id and rev) from eviction, and lets go of the rest.
    func setPinned(_ files: [ReadFile]) {
        let prefixes = Set(files.map { Self.filePrefix($0) })
        pinned.withLock { $0 = prefixes }
    }

    private static func filePrefix(_ file: ReadFile) -> String {
        file.id.utf8.map { String($0, radix: 16).leftPadded(to: 2) }.joined() + "." + file.rev
    }

    private func isPinned(_ key: String) -> Bool {
        guard let lastDot = key.lastIndex(of: ".") else { return false }
        let prefix = String(key[..<lastDot])
        return pinned.withLock { $0.contains(prefix) }
    }

    /// Bytes of `file` whose blocks are cached.
    func cachedBytes(of file: ReadFile) -> UInt64 {
        let blocks = (file.size + Self.blockSize - 1) / Self.blockSize
        return withIndex { index in
            (0..<blocks).reduce(UInt64(0)) { sum, block in
                index.entries[Self.key(file, block: block)] == nil ? sum : sum + blockLength(file, block)
            }
        }
    }

    init(directory: String, capacity: UInt64, logger: Logger) {
        self.directory = directory
        self.capacity = capacity
        self.logger = logger
    }

    static func key(_ file: ReadFile, block: UInt64) -> String {
        "\(filePrefix(file)).\(block)"
    }

    private func blockLength(_ file: ReadFile, _ block: UInt64) -> UInt64 {
        min(Self.blockSize, file.size - block * Self.blockSize)
    }

    private func path(_ key: String) -> String { directory + "/" + key }

    // MARK: - Index

    private func withIndex<R>(_ body: (inout Index) -> R) -> R {
        if index.withLock({ $0 == nil }) {
            // Once, and by one thread: a second scan racing the first writer's temporary files
            // would delete them as leftovers. The index's own lock is not held for the scan.
            loading.lock()
            if index.withLock({ $0 == nil }) {
                let loaded = load()
                index.withLock { $0 = loaded }
            }
            loading.unlock()
        }
        return index.withLock { body(&$0!) }
    }

    /// Reads the directory: existing blocks in order of last use; leftovers of interrupted writes go.
    private func load() -> Index {
        let fm = FileManager.default
        var isDirectory: ObjCBool = false
        if !fm.fileExists(atPath: directory, isDirectory: &isDirectory) {
            do {
                try fm.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                       attributes: [.posixPermissions: 0o700])
            } catch {
                logger.warning("cannot create the block cache directory", metadata: ["path": "\(directory)", "error": "\(error)"])
            }
        }
        var found: [(key: String, size: UInt64, used: Date)] = []
        for name in (try? fm.contentsOfDirectory(atPath: directory)) ?? [] {
            if name.hasPrefix(".tmp-") { try? fm.removeItem(atPath: path(name)); continue }
            guard Self.isBlockName(name),
                  let attributes = try? fm.attributesOfItem(atPath: path(name)),
                  let size = (attributes[.size] as? NSNumber)?.uint64Value else { continue }
            found.append((name, size, attributes[.modificationDate] as? Date ?? .distantPast))
        }
        var index = Index()
        for block in found.sorted(by: { $0.used < $1.used }) { index.touch(block.key, size: block.size) }
        return index
    }

    /// Whether `name` has the shape of a block's key. The folder holds other files too: `pins.json`
    /// and, while it is being rewritten, Foundation's hidden temporary copy of it
    /// (`.dat.nosync….…`), which a scan must not count as a block.
    static func isBlockName(_ name: String) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let id = parts.first, let index = parts.last,
              !id.isEmpty, !parts[1].isEmpty, !index.isEmpty else { return false }
        return id.allSatisfy(\.isHexDigit) && index.allSatisfy { $0.isASCII && $0.isNumber }
    }

    private func isCached(_ key: String) -> Bool { withIndex { $0.entries[key] != nil } }

    // MARK: - Reading and writing

    /// If the block at `part`'s next missing byte is cached, appends its bytes and returns true.
    /// They are read from the block's file straight into the part's buffer: a block read through
    /// an intermediate buffer cost a fresh 1 MiB allocation (page faults and zeroed pages) and a
    /// second copy per block, more than the read itself.
    func fill(_ part: Part, file: ReadFile) -> Bool {
        let position = part.range.lowerBound + UInt64(part.filledCount)
        let block = position / Self.blockSize
        let key = Self.key(file, block: block)
        guard isCached(key) else { return false }
        let length = blockLength(file, block)
        let descriptor = open(path(key), O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            forget(key)
            return false
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, UInt64(status.st_size) == length else {
            forget(key)
            return false
        }
        let blockStart = block * Self.blockSize
        let from = Int(position - blockStart)
        let to = Int(min(part.range.upperBound, blockStart + length) - blockStart)
        var readFailed = false
        let appended = part.append(count: to - from) { buffer in
            readFailed = !Self.readFully(descriptor, into: buffer, at: from)
            return !readFailed
        }
        if readFailed { forget(key) }
        guard appended else { return false }
        withIndex { $0.touch(key, size: length) }
        _ = futimens(descriptor, nil)   // its time of last use, the LRU order of the next mount
        return true
    }

    /// Where the next cached block after `start` begins, if before `end`; else `end`. A download
    /// stops there, and the rest comes from disk.
    func nextCachedOffset(after start: UInt64, before end: UInt64, file: ReadFile) -> UInt64 {
        var block = start / Self.blockSize + 1
        while block * Self.blockSize < end {
            if isCached(Self.key(file, block: block)) { return block * Self.blockSize }
            block += 1
        }
        return end
    }

    /// Keeps every whole block of a completed part that is not cached yet.
    func store(_ part: Part, file: ReadFile) {
        var block = (part.range.lowerBound + Self.blockSize - 1) / Self.blockSize
        while block * Self.blockSize < part.range.upperBound {
            let start = block * Self.blockSize
            let length = blockLength(file, block)
            guard start + length <= part.range.upperBound else { break }
            let key = Self.key(file, block: block)
            if !isCached(key) {
                let offsets = Int(start - part.range.lowerBound)..<Int(start + length - part.range.lowerBound)
                if writeBlock(part.bytes(offsets), key: key) {
                    let evicted = withIndex { index -> [String] in
                        index.touch(key, size: length)
                        var evicted: [String] = []
                        while index.total > capacity, let victim = index.evictOne(isPinned: isPinned) { evicted.append(victim) }
                        return evicted
                    }
                    for victim in evicted { try? FileManager.default.removeItem(atPath: path(victim)) }
                }
            }
            block += 1
        }
    }

    /// Writes a block under a temporary name, then renames it into place. Straight from the
    /// part's buffer: no copy into a `Data`, and no second temporary file as an atomic
    /// `FileManager` write would make.
    private func writeBlock(_ bytes: UnsafeRawBufferPointer, key: String) -> Bool {
        let temporary = path(".tmp-" + UUID().uuidString)
        let failure = WholeFileWrite.write(bytes, to: path(key), through: temporary)
        return failure == 0 || writeFailed(failure, temporary)
    }

    /// The last write that failed since `takeWriteFailure` was asked: a reader's blocks are only
    /// not kept, but a pin fetches to keep, and stops on this rather than download for nothing.
    private let writeFailure = Mutex<Int32?>(nil)

    private func writeFailed(_ code: Int32, _ temporary: String) -> Bool {
        logger.debug("cannot write a cache block", metadata: ["path": "\(temporary)", "errno": "\(code)"])
        writeFailure.withLock { $0 = code }
        return false
    }

    /// Why a block could not be written since the last call ("No space left on device"), or nil.
    func takeWriteFailure() -> String? {
        writeFailure.withLock { code in
            defer { code = nil }
            return code.map { String(cString: strerror($0)) }
        }
    }

    /// Fills `buffer` from `descriptor` at `offset`; false on an error or an early end of file.
    private static func readFully(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) -> Bool {
        var done = 0
        while done < buffer.count {
            let got = pread(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { return false }
            done += got
        }
        return true
    }

    /// Writes all of `bytes` to `descriptor`; false on an error.
    private func forget(_ key: String) {
        withIndex { index in
            if let entry = index.entries.removeValue(forKey: key) { index.total -= entry.size }
        }
        try? FileManager.default.removeItem(atPath: path(key))
    }

    /// Bytes and blocks held (for tests and logs).
    var usage: (bytes: UInt64, blocks: Int) { withIndex { ($0.total, $0.entries.count) } }

    /// How many places the eviction order holds (tests: it stays near the number of blocks).
    var evictionOrderLength: Int { withIndex { $0.orderLength } }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
