// The little of SQLite's C API that the store needs, with one owner per C resource: `Connection`
// closes its `sqlite3`, `Statement` finalizes its `sqlite3_stmt`. C spellings stay in this file.

import CSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// `SQLITE_TRANSIENT` is the macro `((sqlite3_destructor_type)-1)`, which Swift cannot import. It
// tells SQLite to copy a bound string before the bind call returns, so the Swift buffer behind it
// may go away at once.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A failed SQLite call, or a database file this version of dbx-mount cannot use.
enum SQLiteError: Error, CustomStringConvertible {
    /// An SQLite result code and the connection's message for it.
    case call(code: Int32, message: String)
    /// A database that is readable but not ours: another schema version, a missing table, a row
    /// that breaks the schema's rules.
    case foreign(String)
    /// A POSIX call on the cache directory or the database file failed.
    case system(call: String, path: String, errno: Int32)

    /// True when the file is beyond use as it is (not a database, damaged, unreadable, another
    /// schema), so the store deletes it and starts empty. Busy, locked, a full disk or no memory
    /// pass: the file is kept and the next call tries again.
    var meansDiscard: Bool {
        switch self {
        case .call(let code, _):
            switch code & 0xff {
            case SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_PERM, SQLITE_IOERR,
                 SQLITE_FORMAT:
                return true
            default:
                return false
            }
        case .foreign, .system:
            // A database file that cannot be opened or made private is replaced like a damaged one.
            return true
        }
    }

    var description: String {
        switch self {
        case .call(let code, let message): "\(message) (SQLite result code \(code))"
        case .foreign(let reason): reason
        case .system(let call, let path, let errno): "\(call) \(path): \(String(cString: strerror(errno)))"
        }
    }
}

/// One open database. The store's mutex is its only way in.
final class Connection {
    private let handle: OpaquePointer

    /// The corresponding C function is `sqlite3_open_v2`.
    init(path: String) throws(SQLiteError) {
        var handle: OpaquePointer?
        // NOMUTEX: the store's own mutex already serialises every use of the connection.
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw .call(code: code, message: message)
        }
        self.handle = handle
    }

    deinit { sqlite3_close_v2(handle) }

    /// Waits up to `milliseconds` for another process's lock before failing with `SQLITE_BUSY`.
    func setBusyTimeout(milliseconds: Int32) {
        sqlite3_busy_timeout(handle, milliseconds)
    }

    /// Runs SQL that returns no rows the caller needs. The corresponding C function is `sqlite3_exec`.
    func execute(_ sql: String) throws(SQLiteError) {
        var message: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &message)
        defer { sqlite3_free(message) }
        guard code == SQLITE_OK else {
            throw .call(code: code, message: message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(code)))
        }
    }

    /// The corresponding C function is `sqlite3_prepare_v2`.
    func prepare(_ sql: String) throws(SQLiteError) -> Statement {
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        guard code == SQLITE_OK, let statement else { throw error(code) }
        return Statement(handle: statement, connection: handle)
    }

    /// Runs `body` in one transaction, committed if it returns and rolled back if anything throws.
    func transaction<Result>(
        _ begin: String = "BEGIN", _ body: () throws(SQLiteError) -> Result
    ) throws(SQLiteError) -> Result {
        try execute(begin)
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            // After some errors SQLite has already rolled back; then this one fails, harmlessly.
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Rows the last INSERT, UPDATE or DELETE changed. The corresponding C function is `sqlite3_changes`.
    var changes: Int32 { sqlite3_changes(handle) }

    private func error(_ code: Int32) -> SQLiteError {
        .call(code: code, message: String(cString: sqlite3_errmsg(handle)))
    }
}

/// A prepared statement, reused by `reset` between rows. It must not outlive its connection, which
/// holds because both live within one critical section of the store.
struct Statement: ~Copyable {
    fileprivate let handle: OpaquePointer
    fileprivate let connection: OpaquePointer

    deinit { sqlite3_finalize(handle) }

    /// Binds parameter `index` (from 1). The corresponding C function is `sqlite3_bind_int64`.
    func bind(_ index: Int32, _ value: Int64?) throws(SQLiteError) {
        let code = value.map { sqlite3_bind_int64(handle, index, $0) } ?? sqlite3_bind_null(handle, index)
        try check(code)
    }

    /// Binds parameter `index` (from 1) to UTF-8 text, copied. The corresponding C function is
    /// `sqlite3_bind_text64`.
    func bind(_ index: Int32, _ value: String?) throws(SQLiteError) {
        guard var value else { return try check(sqlite3_bind_null(handle, index)) }
        let code = value.withUTF8 { bytes -> Int32 in
            // An empty buffer may have no address, and a null pointer would bind NULL, not "".
            guard let base = bytes.baseAddress, !bytes.isEmpty else {
                return sqlite3_bind_text(handle, index, "", 0, transient)
            }
            return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                sqlite3_bind_text64(handle, index, $0, UInt64(bytes.count), transient, UInt8(SQLITE_UTF8))
            }
        }
        try check(code)
    }

    /// Advances to the next row: true when one is ready, false when there are no more. The
    /// corresponding C function is `sqlite3_step`.
    func step() throws(SQLiteError) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code: throw error(code)
        }
    }

    /// Makes the statement ready to run again; bindings are kept. The corresponding C function is
    /// `sqlite3_reset`.
    func reset() {
        sqlite3_reset(handle)
    }

    /// Column `index` (from 0) of the current row, nil for NULL.
    func int64(_ index: Int32) -> Int64? {
        sqlite3_column_type(handle, index) == SQLITE_NULL ? nil : sqlite3_column_int64(handle, index)
    }

    /// Column `index` (from 0) of the current row as UTF-8 text, nil for NULL.
    func text(_ index: Int32) -> String? {
        guard let bytes = sqlite3_column_text(handle, index) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    private func check(_ code: Int32) throws(SQLiteError) {
        guard code == SQLITE_OK else { throw error(code) }
    }

    private func error(_ code: Int32) -> SQLiteError {
        .call(code: code, message: String(cString: sqlite3_errmsg(connection)))
    }
}
