import DropboxFS
import Foundation
import Logging
import MetadataCache
import Synchronization

/// Opens the SQLite cache on first use rather than at startup: the store is first used by the sync
/// thread, after libfuse's daemonizing fork, and SQLite connections must not cross a fork.
final class DeferredStore: MetadataStore {
    let directory: String
    let key: String
    private let logger: Logger
    private let opened = Mutex<(tried: Bool, store: SQLiteMetadataStore?)>((false, nil))

    init(directory: String, key: String, logger: Logger) {
        self.directory = directory
        self.key = key
        self.logger = logger
    }

    private var store: SQLiteMetadataStore? {
        opened.withLock { opened in
            if !opened.tried {
                opened.tried = true
                do {
                    opened.store = try SQLiteMetadataStore(directory: directory, key: key, logger: logger)
                } catch {
                    logger.warning("persistent cache unavailable; continuing without it",
                                   metadata: ["directory": "\(directory)", "error": "\(error)"])
                }
            }
            return opened.store
        }
    }

    /// Whether a tree is saved for this key, asked before the fork: the file is opened and
    /// closed again here (SQLite starts no thread), and opened afresh when first used after.
    var holdsASavedTree: Bool {
        guard FileManager.default.fileExists(atPath: directory + "/" + SQLiteMetadataStore.fileName(key: key)) else { return false }
        return (try? SQLiteMetadataStore(directory: directory, key: key, logger: logger))?.holdsASavedTree ?? false
    }

    func load(_ receive: ([PersistedEntry]) -> Void) -> String? { store?.load(receive) }
    func save(cursor: String, entries: ((PersistedEntry) -> Void) -> Void) -> Bool { store?.save(cursor: cursor, entries: entries) ?? false }
    func clear() { store?.clear() }
}
