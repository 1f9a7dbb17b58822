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

extension FileBytes {
    /// Bytes that are not the read engine's, in the shape the FUSE adapter replies from.
    static func copying(_ bytes: ArraySlice<UInt8>) -> FileBytes {
        guard !bytes.isEmpty else { return .empty }
        let part = Part(range: 0..<UInt64(bytes.count))
        _ = part.claim()
        _ = bytes.withUnsafeBytes { part.append($0) }
        part.finish()
        return FileBytes(pieces: [(part, 0..<bytes.count)])
    }
}

extension DropboxFS {
    /// Opens an export document, or returns nil for an ordinary file.
    func openExport(_ slot: Slot) throws(FSError) -> OpenedFile? {
        guard let file = state.withLock({ $0.tree.isAlive(slot) ? $0.tree.details(slot) : nil }), file.isExport else {
            return nil
        }
        let bytes = try exports.bytes(id: file.id, rev: file.rev) { () throws(FSError) -> [UInt8] in
            do throws(DropboxError) {
                return try api.export(path: file.id, format: nil).bytes
            } catch {
                logger.warning("export failed", metadata: ["id": "\(file.id)", "error": "\(error)"])
                throw FSError(error)
            }
        }
        let (handle, resized) = state.withLock { state -> (FileHandleID, Bool) in
            let resized = state.tree.isAlive(slot) && state.tree.size(slot) != UInt64(bytes.count)
            if resized { state.tree.setSize(slot, UInt64(bytes.count)) }
            let handle = state.addFileHandle(OpenFile(slot: slot, rev: file.rev, size: UInt64(bytes.count), exported: bytes))
            return (handle, resized)
        }
        if resized { invalidate([.inode(slot.inode)]) }
        return OpenedFile(handle: handle, contentUnchanged: false, kernelSizeMayBeStale: true)
    }
}
