// The one place a failed filesystem operation is given its context and logged. Every operation the
// kernel can ask for runs its body through `reporting`, so a failure deep in the tree, the read
// engine or an export is logged once, where it leaves the core, with the operation and the path
// it concerned; the code that throws only says what went wrong. The FUSE adapter then maps the
// same error to an errno, also in one place.
//
// Levels follow what a user can act on. Ordinary answers (no such name, no such attribute) are
// traced. A Dropbox failure is logged at debug here, because the Dropbox client has already logged
// the failed call at warning with Dropbox's request id, and one failure should be one line at the
// default level. Failures the core itself decides (a file changed since open, an unknown handle)
// have no other line, so they are logged here at info or warning.

import Logging

/// A filesystem operation, named as the kernel's request is.
public enum FilesystemOperation: String, Sendable {
    case lookup, getattr, readlink, opendir, readdir, open, read, statfs, getxattr, listxattr
}

extension FSError {
    /// How loudly a failure of this kind is logged at the boundary.
    var logLevel: Logger.Level {
        switch self {
        case .notFound, .nodeGone, .notADirectory, .isADirectory, .symbolicLink, .notASymbolicLink, .noAttribute,
             .attributeNamespaceUnsupported, .bufferTooSmall:
            .trace
        case .readOnly, .upstream, .accessDenied:
            .debug
        case .changedSinceOpen:
            .info
        case .badHandle:
            .warning
        }
    }
}

extension DropboxFilesystem {
    /// Runs one operation's `body`; a failure is logged once, with the operation, the path of the
    /// node or handle it concerned and `name` (a lookup's), then thrown on unchanged.
    func reporting<T>(_ operation: FilesystemOperation, inode: InodeNumber? = nil, handle: FileHandleID? = nil,
                      name: String? = nil, _ body: () throws(FSError) -> T) throws(FSError) -> T {
        do {
            return try body()
        } catch {
            report(error, operation: operation, inode: inode, handle: handle, name: name)
            throw error
        }
    }

    private func report(_ error: FSError, operation: FilesystemOperation, inode: InodeNumber?, handle: FileHandleID?,
                        name: String?) {
        let level = error.logLevel
        // Finding the path walks the tree; only a line that will be written pays for it.
        guard logger.logLevel <= level else { return }
        var metadata: Logger.Metadata = ["op": "\(operation.rawValue)", "error": "\(error)"]
        if let inode { metadata["inode"] = "\(inode)" }
        if let path = path(inode: inode, handle: handle, name: name) { metadata["path"] = "\(path)" }
        logger.log(level: level, "operation failed", metadata: metadata)
    }

    /// The Dropbox path an operation concerned, as far as the tree still knows it (or, for a file
    /// open while Dropbox moved, deleted or replaced it, where it was).
    private func path(inode: InodeNumber?, handle: FileHandleID?, name: String?) -> String? {
        state.withLock { state -> String? in
            var slot = inode.flatMap(Slot.init)
            if slot == nil, let handle {
                slot = state.fileHandles[handle]?.slot ?? state.directoryHandles[handle]?.folder
            }
            guard let slot else { return nil }
            // A file Dropbox moved, deleted or replaced while open: where it was.
            guard var components = state.tree.isAlive(slot) ? state.tree.components(slot) : state.tree.formerPaths[slot] else {
                return nil
            }
            if let name { components.append(name) }
            let path = options.rootPath + components.map { "/" + $0 }.joined()
            return path.isEmpty ? "/" : path
        }
    }
}
