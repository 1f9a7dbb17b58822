import CSQLite
import DropboxFS
import Foundation
import Logging
@testable import MetadataCache
import Synchronization
import TestSupport
import Testing

@Suite("SQLite metadata store")
struct SQLiteMetadataStoreTests {
    let directory: String
    let log = LogRecorder()

    init() {
        var template = Array((FileManager.default.temporaryDirectory.path + "/metadata-cache-XXXXXX").utf8CString)
        directory = String(cString: mkdtemp(&template)!)
    }

    func makeStore(key: String = "dbid:AAA/Photos", in directory: String? = nil) throws -> SQLiteMetadataStore {
        try SQLiteMetadataStore(directory: directory ?? self.directory, key: key, logger: log.logger())
    }

    static func file(_ path: String, size: UInt64 = 5, hash: String? = "ab12") -> PersistedEntry {
        PersistedEntry(path: path, file: PersistedFile(size: size, modified: 1_650_000_000, id: "id:\(path.count)",
                                                       rev: "015f0a", contentHash: hash))
    }

    static func folder(_ path: String) -> PersistedEntry { PersistedEntry(path: path, file: nil) }

    static let unicodeTree = PersistedTree(cursor: "AAHcursor-1", entries: [
        folder("/Fotos"),
        folder("/Fotos/Ünïcødé 日本語"),
        file("/Fotos/Ünïcødé 日本語/🐶 dog.jpg", size: 123_456_789),
        // NFD: "e" and a combining acute accent; must come back byte for byte, not as NFC "é".
        file("/Fotos/cafe\u{301}.txt", hash: nil),
        file("/it's \"quoted\" % _ \\ back.md", size: 0, hash: ""),
        file("/huge.bin", size: UInt64.max),
        folder("/Пустая папка"),
        PersistedEntry(path: "/Budget.xlsx", file: PersistedFile(size: 0, modified: 1_650_000_000, id: "id:b", rev: "015f0b",
                                                                 contentHash: nil, isExport: true,
                                                                 exportedFrom: "Budget.gsheet")),
        PersistedEntry(path: "/current", file: PersistedFile(size: 9, modified: 1_650_000_000, id: "id:l", rev: "015f0c",
                                                             contentHash: nil, symlinkTarget: "../v2/app")),
    ])

    @Test func nothingSavedLoadsNil() throws {
        #expect(try makeStore().load() == nil)
    }

    @Test func roundTripsFilesAndFoldersWithUnicodeNames() throws {
        try makeStore().save(Self.unicodeTree)
        let loaded = try #require(try makeStore().load())
        #expect(loaded == Self.unicodeTree)
        #expect(loaded.entries.map { Array($0.path.utf8) } == Self.unicodeTree.entries.map { Array($0.path.utf8) })
        #expect(log.lines.isEmpty)
    }

    @Test func emptyTreeIsSavedNotNothing() throws {
        let store = try makeStore()
        store.save(PersistedTree(cursor: "c", entries: []))
        #expect(store.load() == PersistedTree(cursor: "c", entries: []))
    }

    @Test func saveReplacesTheWholeTreeAndCursor() throws {
        let store = try makeStore()
        store.save(Self.unicodeTree)
        let smaller = PersistedTree(cursor: "AAHcursor-2", entries: [Self.folder("/B"), Self.file("/B/x")])
        #expect(store.save(smaller), "says it wrote the tree")
        #expect(store.load() == smaller)
        store.save(Self.unicodeTree)
        #expect(store.load() == Self.unicodeTree)
    }

    @Test func clearForgetsEverything() throws {
        let store = try makeStore()
        store.save(Self.unicodeTree)
        store.clear()
        #expect(store.load() == nil)
        #expect(try makeStore().load() == nil)
        store.save(Self.unicodeTree)
        #expect(store.load() == Self.unicodeTree)
    }

    @Test func garbageFileIsReplacedWithOneLogLine() throws {
        let path: String
        do {
            let store = try makeStore()
            store.save(Self.unicodeTree)
            path = store.path
        }
        // Seeded, so a failure replays with the same garbage.
        var generator = SeededGenerator(seed: 0xBAD_CAFE)
        try Data((0..<65_536).map { _ in UInt8.random(in: 0...255, using: &generator) }).write(to: URL(fileURLWithPath: path))
        let store = try makeStore()
        #expect(store.load() == nil)
        #expect(log.lines.count == 1)
        #expect(log.lines.first?.text.contains("unusable") == true)
        store.save(Self.unicodeTree)
        #expect(store.load() == Self.unicodeTree)
        #expect(try makeStore().load() == Self.unicodeTree)
        #expect(log.lines.count == 1)
    }

    @Test func garbageWrittenUnderAnOpenStoreIsSurvived() throws {
        do {
            let store = try makeStore()
            store.save(Self.unicodeTree)
            try Data(repeating: 0xA5, count: 65_536).write(to: URL(fileURLWithPath: store.path))
            // Pages SQLite still holds (in its cache or its log) may hide the damage for a while:
            // whatever comes back must be the tree or nothing.
            if let tree = store.load() { #expect(tree == Self.unicodeTree) }
            store.save(Self.unicodeTree)
            if let tree = store.load() { #expect(tree == Self.unicodeTree) }
        }
        let store = try makeStore()
        if let tree = store.load() { #expect(tree == Self.unicodeTree) }
        store.save(Self.unicodeTree)
        #expect(store.load() == Self.unicodeTree)
    }

    @Test func truncatedFileStartsEmpty() throws {
        let path = try makeStore().path
        try makeStore().save(Self.unicodeTree)
        truncate(path, 100)
        #expect(try makeStore().load() == nil)
        #expect(log.lines.count == 1)
    }

    @Test func otherSchemaVersionIsDiscarded() throws {
        let path: String
        do {
            let store = try makeStore()
            store.save(Self.unicodeTree)
            path = store.path
        }
        var database: OpaquePointer?
        #expect(sqlite3_open(path, &database) == SQLITE_OK)
        #expect(sqlite3_exec(database, "UPDATE meta SET schema_version = 99", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(database)
        let store = try makeStore()
        #expect(store.load() == nil)
        #expect(log.lines.count == 1)
        #expect(log.lines.first?.text.contains("schema version 99") == true)
        store.save(Self.unicodeTree)
        #expect(store.load() == Self.unicodeTree)
    }

    @Test func someoneElsesDatabaseIsDiscarded() throws {
        let path = directory + "/" + SQLiteMetadataStore.fileName(key: "k")
        var database: OpaquePointer?
        #expect(sqlite3_open(path, &database) == SQLITE_OK)
        #expect(sqlite3_exec(database, "CREATE TABLE t (x); INSERT INTO t VALUES (1)", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(database)
        let store = try makeStore(key: "k")
        #expect(store.load() == nil)
        #expect(log.lines.count == 1)
        store.save(Self.unicodeTree)
        #expect(store.load() == Self.unicodeTree)
    }

    @Test func directoryIs0700AndFileIs0600() throws {
        umask(0o022)
        let nested = directory + "/a/b/dbx-mount"
        let store = try makeStore(in: nested)
        store.save(Self.unicodeTree)
        #expect(try mode(nested) == 0o700)
        #expect(try mode(directory + "/a") == 0o700)
        #expect(try mode(store.path) == 0o600)
        for sidecar in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: store.path + sidecar) {
            #expect(try mode(store.path + sidecar) == 0o600, "\(sidecar)")
        }
        // A directory that already exists keeps its mode; a loose existing file is tightened.
        chmod(directory, 0o755)
        chmod(store.path, 0o644)
        _ = try makeStore(in: directory)
        _ = try makeStore(in: nested)
        #expect(try mode(directory) == 0o755)
        #expect(try mode(store.path) == 0o600)
    }

    @Test func twoKeysAreTwoFiles() throws {
        let photos = try makeStore(key: "dbid:AAA/Photos")
        let work = try makeStore(key: "dbid:AAA/Work")
        #expect(photos.path != work.path)
        #expect(try makeStore(key: "dbid:AAA/Photos").path == photos.path)
        let name = try #require(photos.path.split(separator: "/").last)
        #expect(name.count == 64 + ".sqlite".count)
        #expect(name.allSatisfy { "0123456789abcdef.sqlite".contains($0) })
        photos.save(Self.unicodeTree)
        #expect(work.load() == nil)
        let other = PersistedTree(cursor: "w", entries: [Self.folder("/W")])
        work.save(other)
        #expect(photos.load() == Self.unicodeTree)
        #expect(work.load() == other)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".sqlite") }
        #expect(files.count == 2)
    }

    @Test func defaultDirectoryFollowsXDG() {
        #expect(SQLiteMetadataStore.defaultDirectory(environment: ["XDG_CACHE_HOME": "/x/cache", "HOME": "/home/u"])
            == "/x/cache/dbx-mount")
        #expect(SQLiteMetadataStore.defaultDirectory(environment: ["XDG_CACHE_HOME": "relative", "HOME": "/home/u"])
            == "/home/u/.cache/dbx-mount")
        #expect(SQLiteMetadataStore.defaultDirectory(environment: ["HOME": "/home/u"]) == "/home/u/.cache/dbx-mount")
    }

    @Test func concurrentCallsAreSerialised() throws {
        let store = try makeStore()
        let trees = (0..<4).map { n in
            PersistedTree(cursor: "c\(n)", entries: [Self.folder("/\(n)")] + (0..<500).map { Self.file("/\(n)/f\($0)") })
        }
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            switch i % 4 {
            case 0: store.clear()
            case 1: if let tree = store.load() { #expect(trees.contains(tree)) }
            default: store.save(trees[i % trees.count])
            }
        }
        store.save(trees[3])
        #expect(store.load() == trees[3])
        #expect(log.lines.isEmpty)
    }

    @Test func aLargeTreeIsLoadedInBatchesInItsSavedOrder() throws {
        let batch = SQLiteMetadataStore.loadBatch
        let tree = Self.syntheticTree(entries: 2 * batch + 10)
        let store = try makeStore()
        store.save(tree)
        var sizes: [Int] = []
        var entries: [PersistedEntry] = []
        let cursor = store.load { sizes.append($0.count); entries += $0 }
        #expect(cursor == tree.cursor)
        #expect(sizes == [batch, batch, 10], "never the whole tree in one array")
        #expect(entries == tree.entries)
    }

    @Test func aFileCutShortGivesNoCursorWhateverItGaveBefore() throws {
        // A load hands batches over as it reads; damage found later must still end in no cursor,
        // so the mount drops what it was given (`loadPersistedTree`) and lists afresh.
        let tree = Self.syntheticTree(entries: 3 * SQLiteMetadataStore.loadBatch)
        let path: String
        do {
            let store = try makeStore()
            store.save(tree)
            path = store.path
        }
        var status = stat()
        #expect(stat(path, &status) == 0)
        #expect(truncate(path, status.st_size * 2 / 3) == 0)
        var received = 0
        let cursor = try makeStore().load { received += $0.count }
        #expect(cursor == nil)
        #expect(received < tree.entries.count)
        #expect(log.lines.count == 1)
    }

    @Test func aSaveLeavesNoCopyOfTheTreeInTheLog() throws {
        let store = try makeStore()
        let tree = Self.syntheticTree(entries: 20_000)
        store.save(tree)
        store.save(tree)
        var status = stat()
        let log = store.path + "-wal"
        #expect(stat(log, &status) != 0 || status.st_size == 0, "the log is emptied after each save")
        #expect(stat(store.path, &status) == 0 && status.st_size > 1_000_000, "the tree is in the database file")
        #expect(store.load() == tree)
    }

    @Test func aSaveTakesItsEntriesAsTheyComeAndWalksThemOnce() throws {
        let store = try makeStore()
        var walks = 0
        store.save(cursor: "c") { each in
            walks += 1
            for entry in Self.unicodeTree.entries { each(entry) }
        }
        #expect(walks == 1)
        #expect(store.load() == PersistedTree(cursor: "c", entries: Self.unicodeTree.entries))
    }

    @Test func timesA100000EntrySaveAndLoad() throws {
        try time(entries: 100_000)
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["METADATA_CACHE_1M"] != nil))
    func timesA1000000EntrySaveAndLoad() throws {
        try time(entries: 1_000_000)
    }

    /// Saves (twice: into an empty file, then over a full one) and loads a tree shaped like a
    /// mount's, with file entries as large as Dropbox's, and prints the times.
    func time(entries count: Int) throws {
        let tree = Self.syntheticTree(entries: count)
        let store = try makeStore()
        let clock = ContinuousClock()
        let firstSave = clock.measure { store.save(tree) }
        let secondSave = clock.measure { store.save(tree) }
        var loaded: PersistedTree?
        let load = clock.measure { loaded = store.load() }
        let reopened = try makeStore()
        let coldLoad = clock.measure { loaded = reopened.load() }
        #expect(loaded == tree)
        let size = try FileManager.default.attributesOfItem(atPath: store.path)[.size] as? Int ?? 0
        print("MetadataCache \(count) entries: save \(firstSave) (over a full file \(secondSave)), load \(load) "
              + "(reopened \(coldLoad)), file \(size / 1_000_000) MB")
    }

    /// `entries` entries in folders of 100 files, parents first, with real-sized ids, revs and hashes.
    static func syntheticTree(entries: Int) -> PersistedTree {
        var list: [PersistedEntry] = []
        list.reserveCapacity(entries)
        var folder = 0
        while list.count < entries {
            let folderPath = "/Projects/folder \(folder / 100)/sub \(folder)"
            if folder % 100 == 0 { list.append(Self.folder("/Projects/folder \(folder / 100)")) }
            list.append(Self.folder(folderPath))
            for n in 0..<99 where list.count < entries {
                let file = PersistedFile(
                    size: UInt64(n * 1000), modified: 1_650_000_000 + Int64(n), id: "id:a4ayc_80_OEAAAAAAAAA\(n)",
                    rev: "0\(String(folder, radix: 16))5f0a9c00000001", contentHash: String(repeating: "e3b0c442", count: 8))
                list.append(PersistedEntry(path: "\(folderPath)/IMG_\(n)_photo.jpg", file: file))
            }
            folder += 1
        }
        if list.count > entries { list.removeLast(list.count - entries) }
        return PersistedTree(cursor: "AAG" + String(repeating: "x", count: 200), entries: list)
    }
}

func mode(_ path: String) throws -> mode_t {
    var status = stat()
    guard stat(path, &status) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    return status.st_mode & 0o777
}
