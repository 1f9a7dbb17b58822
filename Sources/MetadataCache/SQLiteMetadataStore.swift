// The persistent cache: one mount's tree and its cursor in one SQLite file, so that a remount
// answers `find` at once and catches up with `list_folder/continue` instead of listing again.
//
// The file is a cache, never a source of truth. Anything wrong with it (not a database, damaged,
// unreadable, written by another schema version) is logged once; the file is deleted and the store
// starts empty, and the mount simply lists the folder as if it had never been cached. No error
// reaches the caller: the protocol's methods do not throw.
//
// The core hands over the whole tree each time (after the first full listing, then at most every
// 30 s while changes flow), so `save` replaces everything in one transaction: a crash or a second
// process never sees half a tree, or a tree with another tree's cursor. Rows are kept in the order
// given (the rowid), which is parents before children, so `load` needs no sort and no index; an
// index on the path would only slow every save.
//
// WAL with `synchronous=NORMAL`: a save is one sequential append to the log and no fsync per
// commit; a power cut may lose the last save, which costs one `continue` from an older cursor.
//
// Two mounts of one account and folder share a file; SQLite's own locks keep them apart (the later
// save wins), and a busy timeout rides out the other's save.

import CSQLite
import Crypto
import DropboxFS
import Foundation
import Logging
import Synchronization

/// A `MetadataStore` in an SQLite database file, one file per account and mounted folder.
public final class SQLiteMetadataStore: MetadataStore {
    /// Bumped whenever the tables change; a file with another version is discarded.
    /// 2: `is_folder` became a kind (0 file, 1 folder, 2 exported document).
    /// 3: `exported_from`, an export's document name.
    /// 4: `symlink_target`, a symbolic link's target.
    static let schemaVersion: Int64 = 4

    /// The database file.
    public let path: String
    private let directory: String
    private let logger: Logger
    // Every use of the connection, and so every transaction, is one critical section. The mutex is
    // held across SQLite I/O (a large save takes seconds), which is acceptable only because the
    // callers are the mount's one sync thread and `load` once before it starts: nobody waits on it.
    // nil after a failure that closed the file; the next call opens it again.
    private let connection: Mutex<Connection?>

    /// Opens (or creates) the database for `key` in `directory`, creating the directory with mode
    /// 0700 if it is missing. The file is named by the SHA-256 of `key`, so any key is a safe name.
    /// An unusable file is replaced by an empty one; this throws only when no database can be opened
    /// at all, e.g. when the directory cannot be created.
    public init(directory: String, key: String, logger: Logger) throws {
        let directory = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        self.directory = directory
        self.path = directory + "/" + Self.fileName(key: key)
        self.logger = logger
        try Self.makeDirectory(directory)
        connection = Mutex(try Self.openDatabase(path, logger: logger))
    }

    /// `$XDG_CACHE_HOME/dbx-mount`, else `$HOME/.cache/dbx-mount`.
    public static var defaultDirectory: String {
        defaultDirectory(environment: ProcessInfo.processInfo.environment)
    }

    static func defaultDirectory(environment: [String: String]) -> String {
        // The XDG spec says a relative (or empty) value is invalid and must be ignored.
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") {
            return cache + "/dbx-mount"
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? FileManager.default.homeDirectoryForCurrentUser.path
        return home + "/.cache/dbx-mount"
    }

    /// Entries handed over at a time by `load`: large enough that the per-batch work (a lock, a
    /// tree update) is nothing, small enough that the batch is nothing beside the tree.
    static let loadBatch = 4096

    public func load(_ receive: ([PersistedEntry]) -> Void) -> String? {
        let cursor = withDatabase("load") { database throws(SQLiteError) -> String? in
            // One read transaction, so the cursor and the entries come from the same save.
            try database.transaction { () throws(SQLiteError) -> String? in
                let meta = try database.prepare("SELECT cursor FROM meta")
                guard try meta.step() else { throw .foreign("the meta table has no row") }
                guard let cursor = meta.text(0) else { return nil }
                let rows = try database.prepare(
                    "SELECT path, is_folder, size, modified, id, rev, content_hash, exported_from, symlink_target FROM entries ORDER BY rowid")
                var batch: [PersistedEntry] = []
                batch.reserveCapacity(Self.loadBatch)
                while try rows.step() {
                    batch.append(try Self.entry(rows))
                    if batch.count == Self.loadBatch {
                        receive(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                if !batch.isEmpty { receive(batch) }
                return cursor
            }
        }
        return cursor ?? nil
    }

    /// Whether a tree is saved here (a cursor, which every save writes with its entries): what a
    /// mount that cannot reach Dropbox needs in order to start offline. A file that exists but
    /// holds none (created by a mount that ended before its first save, cleared by a `reset`,
    /// or found damaged) does not count.
    public var holdsASavedTree: Bool {
        withDatabase("check") { database throws(SQLiteError) -> Bool in
            let meta = try database.prepare("SELECT cursor IS NOT NULL FROM meta")
            return try meta.step() && meta.int64(0) == 1
        } ?? false
    }

    @discardableResult
    public func save(cursor: String, entries: ((PersistedEntry) -> Void) -> Void) -> Bool {
        withDatabase("save") { database throws(SQLiteError) -> Bool in
            // IMMEDIATE takes the write lock at once, so a second process makes this wait (busy
            // timeout) at the start instead of failing at the first insert.
            try database.transaction("BEGIN IMMEDIATE") { () throws(SQLiteError) in
                try database.execute("DELETE FROM entries")
                let insert = try database.prepare(
                    "INSERT INTO entries (path, is_folder, size, modified, id, rev, content_hash, exported_from, symlink_target) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
                // The entries come from a walk of the tree, which cannot throw: the first failure
                // is kept, the rest of the walk skipped, and the transaction rolled back after it.
                var failure: SQLiteError?
                entries { entry in
                    guard failure == nil else { return }
                    do throws(SQLiteError) { try Self.insert(entry, with: insert) } catch { failure = error }
                }
                if let failure { throw failure }
                let meta = try database.prepare("UPDATE meta SET cursor = ?, saved_at = ?")
                try meta.bind(1, cursor)
                try meta.bind(2, Int64(Date().timeIntervalSince1970))
                _ = try meta.step()
                guard database.changes == 1 else { throw .foreign("the meta table has no row") }
            }
            // Every save rewrites the whole tree, so the log holds the tree a second time (172 MB
            // for a million entries) until the next save starts, and at exit for good: write it
            // into the database now and empty it. A reader in another process may hold it back;
            // the next save tries again.
            try? database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return true
        } ?? false
    }

    private static func insert(_ entry: PersistedEntry, with insert: borrowing Statement) throws(SQLiteError) {
        try insert.bind(1, entry.path)
        if let file = entry.file {
            try insert.bind(2, file.isExport ? 2 : 0 as Int64)
            // A size is stored by its bit pattern: SQLite's integers are signed 64-bit.
            try insert.bind(3, Int64(bitPattern: file.size))
            try insert.bind(4, file.modified)
            try insert.bind(5, file.id)
            try insert.bind(6, file.rev)
            try insert.bind(7, file.contentHash)
            try insert.bind(8, file.exportedFrom)
            try insert.bind(9, file.symlinkTarget)
        } else {
            try insert.bind(2, 1 as Int64)
            for column: Int32 in 3...9 { try insert.bind(column, nil as Int64?) }
        }
        _ = try insert.step()
        insert.reset()
    }

    public func clear() {
        withDatabase("clear") { database throws(SQLiteError) in
            try database.transaction("BEGIN IMMEDIATE") { () throws(SQLiteError) in
                try database.execute("DELETE FROM entries; UPDATE meta SET cursor = NULL, saved_at = NULL")
            }
        }
    }

    // MARK: - The database file

    /// Runs `body` on the open database. When the file turns out to be unusable it is deleted,
    /// logged once, and `body` runs again on an empty one (a `load` then finds nothing, a `save`
    /// goes through). Any other failure is logged and swallowed.
    @discardableResult
    private func withDatabase<Result: Sendable>(
        _ operation: String, _ body: (Connection) throws(SQLiteError) -> Result
    ) -> Result? {
        connection.withLock { connection -> Result? in
            do throws(SQLiteError) {
                do throws(SQLiteError) {
                    if connection == nil {
                        // Someone may have removed the cache directory while mounted.
                        try Self.makeDirectory(directory)
                        connection = try Self.openDatabase(path, logger: logger)
                    }
                    return try body(connection!)
                } catch where error.meansDiscard {
                    // No other reference to the connection is left, so this closes the file before
                    // it is deleted.
                    connection = nil
                    Self.discard(path, because: error, logger: logger)
                    connection = try Self.openDatabase(path, logger: logger)
                    return try body(connection!)
                }
            } catch {
                if error.meansDiscard { connection = nil }
                logger.error("metadata cache \(operation) failed", metadata: ["file": "\(path)", "error": "\(error)"])
                return nil
            }
        }
    }

    /// Opens the database at `path`, ready to use. An unusable file is deleted (logged once) and
    /// created again empty; a second failure throws.
    private static func openDatabase(_ path: String, logger: Logger) throws(SQLiteError) -> Connection {
        do throws(SQLiteError) {
            return try openAsIs(path)
        } catch where error.meansDiscard {
            discard(path, because: error, logger: logger)
            return try openAsIs(path)
        }
    }

    private static func openAsIs(_ path: String) throws(SQLiteError) -> Connection {
        try createPrivateFile(path)
        let database = try Connection(path: path)
        // Long enough to ride out another mount's save of a large tree, short enough not to hang.
        database.setBusyTimeout(milliseconds: 5000)
        // The first statement reads the header: a file that is not a database fails here.
        try database.execute("PRAGMA journal_mode = WAL")
        try database.execute("PRAGMA synchronous = NORMAL")
        // Without a limit, the log keeps the size of the largest save after each checkpoint.
        try database.execute("PRAGMA journal_size_limit = 4194304")
        try database.transaction("BEGIN IMMEDIATE") { () throws(SQLiteError) in
            let tables = try database.prepare("SELECT count(*) FROM sqlite_master")
            _ = try tables.step()
            if tables.int64(0) == 0 {
                try database.execute(schema)
                return
            }
            let version: Int64?
            do throws(SQLiteError) {
                let meta = try database.prepare("SELECT schema_version FROM meta")
                version = try meta.step() ? meta.int64(0) : nil
            } catch .call(SQLITE_ERROR, let message) {
                throw .foreign("no meta table (\(message))")
            }
            guard version == schemaVersion else {
                throw .foreign("schema version \(version.map(String.init) ?? "missing"), expected \(schemaVersion)")
            }
        }
        return database
    }

    private static let schema = """
        CREATE TABLE meta (
            schema_version INTEGER NOT NULL,
            cursor TEXT,          -- NULL when nothing is saved
            saved_at INTEGER      -- Unix time of the last save
        );
        INSERT INTO meta (schema_version) VALUES (\(schemaVersion));
        -- One row per file or folder below the mounted folder, parents first (rowid order).
        CREATE TABLE entries (
            path TEXT NOT NULL,   -- display case, e.g. /Album/dog.jpg
            is_folder INTEGER NOT NULL,
            size INTEGER,         -- the rest are NULL for a folder
            modified INTEGER,
            id TEXT,
            rev TEXT,
            content_hash TEXT,
            exported_from TEXT,   -- an export's document name (Notes.paper shown as Notes.html)
            symlink_target TEXT   -- a symbolic link's target
        );
        """

    /// The entry in the current row of `rows`.
    private static func entry(_ rows: borrowing Statement) throws(SQLiteError) -> PersistedEntry {
        guard let path = rows.text(0), let isFolder = rows.int64(1) else { throw .foreign("an entry without path") }
        if isFolder == 1 { return PersistedEntry(path: path, file: nil) }
        guard let size = rows.int64(2), let modified = rows.int64(3), let id = rows.text(4), let rev = rows.text(5)
        else { throw .foreign("a file entry without size, modified time, id or rev") }
        let file = PersistedFile(
            size: UInt64(bitPattern: size), modified: modified, id: id, rev: rev, contentHash: rows.text(6),
            isExport: isFolder == 2, exportedFrom: rows.text(7), symlinkTarget: rows.text(8))
        return PersistedEntry(path: path, file: file)
    }

    /// Deletes the database and its log files, after saying so in one line.
    private static func discard(_ path: String, because error: SQLiteError, logger: Logger) {
        logger.warning(
            "metadata cache file unusable; starting empty", metadata: ["file": "\(path)", "reason": "\(error)"])
        for suffix in ["", "-wal", "-shm", "-journal"] {
            unlink(path + suffix)
        }
    }

    /// Creates the database file with mode 0600 before SQLite does (SQLite would use 0644 less the
    /// umask), and tightens an existing one. SQLite gives its -wal and -shm files the same mode.
    private static func createPrivateFile(_ path: String) throws(SQLiteError) {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system(call: "open", path: path, errno: errno) }
        defer { close(descriptor) }
        guard fchmod(descriptor, 0o600) == 0 else { throw .system(call: "fchmod", path: path, errno: errno) }
    }

    /// Creates `directory` and any missing parents with mode 0700 (the XDG spec's mode for the
    /// cache home). Existing directories are left as they are.
    private static func makeDirectory(_ directory: String) throws(SQLiteError) {
        var prefix = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) == 0 {
                // mkdir's mode is filtered by the umask; the cache must be exactly 0700.
                guard chmod(prefix, 0o700) == 0 else { throw .system(call: "chmod", path: prefix, errno: errno) }
            } else if errno != EEXIST {
                throw .system(call: "mkdir", path: prefix, errno: errno)
            }
        }
        var status = stat()
        guard stat(directory, &status) == 0 else { throw .system(call: "stat", path: directory, errno: errno) }
        guard status.st_mode & S_IFMT == S_IFDIR else { throw .system(call: "mkdir", path: directory, errno: ENOTDIR) }
    }

    /// The hex SHA-256 of `key`: the key holds an account id and a Dropbox path, which may contain
    /// anything a file name must not.
    public static func fileName(key: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var name: [UInt8] = []
        for byte in SHA256.hash(data: Array(key.utf8)) {
            name.append(digits[Int(byte >> 4)])
            name.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: name, as: UTF8.self) + ".sqlite"
    }
}
