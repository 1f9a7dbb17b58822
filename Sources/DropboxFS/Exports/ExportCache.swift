// Documents Dropbox cannot download (Paper and other cloud docs) are read through `files/export`.
// An export is produced whole (no Range), and its length is known only once it is made, so an open
// exports the document once, keeps the bytes in a small bounded cache keyed by id and rev, corrects
// the size the kernel was shown, and serves reads from those bytes. Export handles bypass the page
// cache, so a reader is never clamped to a listed size that differed from the export's.

import DropboxClient
import Synchronization

/// Whole exports, least recently used first out, within `capacity` bytes.
final class ExportCache: Sendable {
    private struct Cached {
        var bytes: [UInt8]
        var lastUse: UInt64
    }

    private struct Contents {
        var byKey: [String: Cached] = [:]
        var total = 0
        var clock: UInt64 = 0
    }

    private let contents = Mutex(Contents())
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// The export of `id` at `rev`, made with `export` (outside the lock) when not cached.
    func bytes(id: String, rev: String, export: () throws(FSError) -> [UInt8]) throws(FSError) -> [UInt8] {
        let key = id + "\u{0}" + rev
        let cached = contents.withLock { c -> [UInt8]? in
            c.clock += 1
            c.byKey[key]?.lastUse = c.clock
            return c.byKey[key]?.bytes
        }
        if let cached { return cached }
        let made = try export()
        contents.withLock { c in
            guard made.count <= capacity, c.byKey[key] == nil else { return }
            while c.total + made.count > capacity, let oldest = c.byKey.min(by: { $0.value.lastUse < $1.value.lastUse }) {
                c.total -= oldest.value.bytes.count
                c.byKey.removeValue(forKey: oldest.key)
            }
            c.clock += 1
            c.byKey[key] = Cached(bytes: made, lastUse: c.clock)
            c.total += made.count
        }
        return made
    }
}
