import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

/// Pinned folders (issue 18): kept whole in the block cache, never evicted while pinned, refused
/// when they cannot be kept.
@Suite("Pinned folders")
struct PinTests {
    let clock = ManualClock()
    static let MiB = 1 << 20

    func makeFS(_ dropbox: FakeDropbox, directory: String, capacity: UInt64 = 64 << 20) -> DropboxFilesystem {
        var options = FilesystemOptions(metadataTTL: .seconds(60))
        options.readAhead = ReadAheadOptions(blockCacheDirectory: directory, blockCacheBytes: capacity)
        return DropboxFilesystem(api: dropbox, options: options, folderModified: 0, now: clock.now)
    }

    func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("dbx-pins-\(UUID())").path
    }

    /// The cache folder's files and their sizes, for failure messages.
    static func blocks(in directory: String) -> [String: UInt64] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return Dictionary(uniqueKeysWithValues: names.map { name in
            let size = (try? FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? NSNumber)??.uint64Value
            return (name, size ?? 0)
        })
    }

    func tree() -> FakeDropbox {
        let dropbox = FakeDropbox()
        dropbox.addFolder("/Pinned")
        dropbox.addFolder("/Pinned/Sub")
        dropbox.addFile("/Pinned/a.bin", Array(repeating: 1, count: 3 * Self.MiB + 5))
        dropbox.addFile("/Pinned/Sub/b.txt", Array("bee".utf8))
        dropbox.addFolder("/Other")
        dropbox.addFile("/Other/c.bin", Array(repeating: 3, count: Self.MiB))
        return dropbox
    }

    @Test func pinPartsReuseTheirBuffersWithinABoundAndGiveThemBackWhenAPassEnds() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pins = Pins(directory: directory)
        let size = UInt64(Pins.partSize), pool = UInt64(DropboxFilesystem.pinConcurrency) * UInt64(Pins.partSize)
        var parts = [pins.part(0..<size)]
        let address = parts[0].bytes(0..<1).baseAddress
        parts = []
        parts.append(pins.part(size..<(2 * size)))
        #expect(parts[0].bytes(0..<1).baseAddress == address, "the next part gets the buffer just given back")
        // One buffer per file fetched at once; a part beyond them gets a buffer of its own.
        for index in 1...UInt64(DropboxFilesystem.pinConcurrency) {
            parts.append(pins.part(index * size..<(index + 1) * size - 7))
        }
        #expect(parts.allSatisfy { $0.length >= Int(size) - 7 })
        #expect(pins.buffers.usage.reserved == pool, "never more than the pool")
        parts = []
        #expect(pins.buffers.usage.reserved == 0)
        #expect(pins.buffers.parkedBytes == pool, "kept for the next part")
        pins.freeBuffers()
        #expect(pins.buffers.parkedBytes == 0, "a finished pass keeps no memory")
    }

    @Test func aPinnedFolderEndsUpWholeInTheBlockCacheAndStaysPinnedAcrossRemounts() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let dropbox = tree()
        let fs = makeFS(dropbox, directory: directory)
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        let pinned = try fs.pin("Pinned/")
        #expect(pinned.path == "/Pinned" && pinned.files == 2 && pinned.bytesTotal == UInt64(3 * Self.MiB + 8))
        #expect(eventually(within: 20) { fs.pinStatus.first?.complete == true }, "\(fs.pinStatus)")
        #expect(fs.reader.cache?.usage.bytes == UInt64(3 * Self.MiB + 8),
                "exactly the pinned files are cached: \(Self.blocks(in: directory)), \(fs.pinStatus)")
        #expect(FileManager.default.fileExists(atPath: directory + "/pins.json"))
        #expect(eventually { fs.pins?.buffers.parkedBytes == 0 }, "the pass that fetched them freed its buffers")

        let remounted = makeFS(dropbox, directory: directory)
        #expect(remounted.pinStatus.map(\.path) == ["/Pinned"], "pins are kept in the block cache's folder")
        try remounted.unpin("/pinned")
        #expect(remounted.pinStatus.isEmpty)
        #expect(throws: PinError.notPinned("/Pinned")) { try remounted.unpin("/Pinned") }
    }

    @Test func aPinnedFileChangedWhileItIsFetchedIsFetchedAgainAtItsNewRev() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let dropbox = FakeDropbox()
        dropbox.addFolder("/Pinned")
        let oldSize = 3 * Pins.partSize, newSize = 2 * Pins.partSize + 5   // no part of the new rev ends where the old one does
        dropbox.addFile("/Pinned/v.bin", Array(repeating: 1, count: oldSize))
        let fs = makeFS(dropbox, directory: directory)
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        let folder = try fs.lookup(parent: .root, name: "Pinned").inode
        // When the old rev's second part starts, Dropbox gets a new rev and the tree learns it.
        let changed = Mutex(false)
        dropbox.setChunkGate { range, sent in
            guard range.lowerBound == UInt64(Pins.partSize), sent == 0, !changed.withLock({ $0 }) else { return }
            changed.withLock { $0 = true }
            dropbox.addFile("/Pinned/v.bin", Array(repeating: 2, count: newSize))
            _ = eventually(within: 10) { (try? fs.lookup(parent: folder, name: "v.bin"))?.size == UInt64(newSize) }
        }
        _ = try fs.pin("/Pinned")
        #expect(eventually(within: 30) { fs.pinStatus.first?.complete == true && fs.pinStatus.first?.bytesTotal == UInt64(newSize) },
                "\(fs.pinStatus)")
        #expect(changed.withLock { $0 })
        // The old rev stopped after the part in flight: two of its three parts (its third never
        // asked for, though Dropbox would refuse it here anyway), then the new rev whole.
        #expect(!dropbox.downloadRanges.contains(UInt64(2 * Pins.partSize)..<UInt64(oldSize)), "\(dropbox.downloadRanges)")
        #expect(dropbox.downloadedBytes == UInt64(2 * Pins.partSize + newSize), "\(dropbox.downloadRanges)")
        let handle = try fs.open(try fs.lookup(parent: folder, name: "v.bin").inode).handle
        let downloads = dropbox.counters.download
        #expect(try fs.read(handle, offset: UInt64(newSize - 4096), size: 4096) == Array(repeating: 2, count: 4096))
        #expect(dropbox.counters.download == downloads, "the new rev is read from the block cache")
        fs.release(handle)
    }

    @Test func whatCannotBePinnedIsRefused() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let dropbox = tree()
        let fs = makeFS(dropbox, directory: directory, capacity: 2 << 20)
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        #expect(throws: PinError.notAFolder("/Other/c.bin")) { try fs.pin("/Other/c.bin") }
        #expect(throws: PinError.notFound("/Nope")) { try fs.pin("/Nope") }
        #expect(throws: PinError.tooLarge(path: "/Pinned", needs: UInt64(3 * Self.MiB + 8), room: 2 << 20)) {
            try fs.pin("/Pinned")
        }
        #expect(fs.pinStatus.isEmpty)
        let plain = DropboxFilesystem(api: dropbox, options: FilesystemOptions(), folderModified: 0, now: clock.now)
        #expect(throws: PinError.noBlockCache) { try plain.pin("/Pinned") }
    }

    @Test func aPinThatCannotBeSavedIsNotMadeAndSaysWhy() throws {
        // The next mount pins what pins.json lists: a pin it cannot record would be dropped then
        // without a word. (A folder in the file's place: root writes anywhere, so modes cannot
        // make a write fail here.)
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fs = makeFS(tree(), directory: directory)
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        _ = try fs.pin("/Other")
        try FileManager.default.removeItem(atPath: directory + "/pins.json")
        try FileManager.default.createDirectory(atPath: directory + "/pins.json/in-the-way", withIntermediateDirectories: true)
        do {
            _ = try fs.pin("/Pinned")
            Issue.record("a pin that cannot be saved was made")
        } catch {
            guard case .cannotSave(let file, _) = error else { Issue.record("\(error)"); return }
            #expect(file == directory + "/pins.json")
        }
        #expect(throws: PinError.self) { try fs.unpin("/Other") }
        #expect(fs.pinStatus.map(\.path) == ["/Other"], "both lists left as they were")
    }

    @Test func pinsThatDoNotFitAreNeitherFetchedNorProtectedAndSaySo() throws {
        // Pinned at mount time (or by an earlier mount with a larger cache), nothing checked the
        // room: the cache grew past its size with blocks it could never evict.
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let dropbox = tree()
        let fs = makeFS(dropbox, directory: directory, capacity: 2 << 20)
        try fs.keepPinned("/Other")      // 1 MiB: fits
        try fs.keepPinned("/Pinned")     // 3 MiB: does not, beside /Other
        try fs.keepPinned("/Nope")
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually(within: 20) { fs.pinStatus.first?.complete == true }, "\(fs.pinStatus)")
        #expect(eventually { fs.pinStatus.count == 3 && fs.pinStatus[1].problem != nil && fs.pinStatus[2].problem != nil },
                "\(fs.pinStatus)")
        #expect(fs.pinStatus[1].problem?.contains("raise --block-cache-size") == true, "\(fs.pinStatus)")
        #expect(fs.pinStatus[2].problem == "no such folder in the mount")
        #expect(!fs.pinStatus[1].complete)
        Thread.sleep(forTimeInterval: 0.3)
        #expect(fs.reader.cache?.usage.bytes == UInt64(Self.MiB), "only what fits: \(Self.blocks(in: directory))")
        #expect(dropbox.downloadedBytes == UInt64(Self.MiB), "the pin that does not fit is not downloaded")
    }

    @Test func aBlockCacheThatCannotBeWrittenStopsThePinsPassAndItsRepeats() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let dropbox = FakeDropbox()
        dropbox.addFolder("/Many")
        for i in 0..<12 { dropbox.addFile("/Many/f\(i).bin", Array(repeating: UInt8(i), count: Self.MiB)) }
        let fs = makeFS(dropbox, directory: directory)
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        // The pin is saved (pins.json is in the same folder), and every download of its pass held
        // until the folder is broken, so no block is written (nor the folder made again) before.
        let broken = Atomic<Bool>(false)
        dropbox.setChunkGate { _, _ in
            let giveUp = Date().addingTimeInterval(10)
            while !broken.load(ordering: .relaxed) && Date() < giveUp { usleep(2_000) }
        }
        _ = try fs.pin("/Many")
        // Where blocks go is now a file: every write fails (ENOTDIR), as on a full disk.
        try? FileManager.default.removeItem(atPath: directory)
        #expect(FileManager.default.createFile(atPath: directory, contents: Data()))
        broken.store(true, ordering: .relaxed)
        #expect(eventually(within: 10) { fs.pinStatus.first?.problem?.contains("cannot be written") == true }, "\(fs.pinStatus)")
        let downloaded = dropbox.downloadedBytes
        #expect(downloaded < UInt64(12 * Self.MiB), "the pass stopped: \(downloaded) bytes")
        Thread.sleep(forTimeInterval: 0.5)
        #expect(dropbox.downloadedBytes == downloaded, "and is not repeated at once")
    }

    @Test func evictionPassesOverPinnedBlocks() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cache = BlockCache(directory: directory, capacity: 4 << 20, logger: .init(label: "test"))
        let pinned = ReadFile(id: "id:pinned", rev: "r1", size: UInt64(2 * Self.MiB))
        let other = ReadFile(id: "id:other", rev: "r1", size: UInt64(4 * Self.MiB))
        cache.setPinned([pinned])
        for (file, byte) in [(pinned, UInt8(1)), (other, UInt8(2))] {
            let part = Part(range: 0..<file.size)
            _ = part.claim()
            _ = Array(repeating: byte, count: Int(file.size)).withUnsafeBytes { part.append($0) }
            cache.store(part, file: file)
        }
        #expect(cache.cachedBytes(of: pinned) == pinned.size, "the pinned file's blocks stayed")
        #expect(cache.usage.bytes <= 4 << 20)
    }
}

extension PinTests {
    /// What else lives in the folder (pins.json, and the temporary copy Foundation writes it
    /// through) is never counted as a block: that once made a mount's cache usage 12 bytes high.
    @Test func onlyBlocksCountTowardsTheCacheUsage() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let block = BlockCache.key(ReadFile(id: "id:a", rev: "015f3", size: 7), block: 0)
        for (name, size) in [(block, 7), ("pins.json", 12), (".dat.nosync1EC5.zTe9AI", 12), ("notes.txt.1", 5), ("ab.cd.ef", 2)] {
            FileManager.default.createFile(atPath: directory + "/" + name, contents: Data(count: size))
        }
        let cache = BlockCache(directory: directory, capacity: 1 << 20, logger: .init(label: "test"))
        #expect(cache.usage.bytes == 7 && cache.usage.blocks == 1)
        #expect(BlockCache.isBlockName(block))
    }
}

@Suite("Pin pacing")
struct PinPacerTests {
    @Test func partsAreSpacedToStayUnderTheRate() {
        var pacer = PinPacer(bytesPerSecond: 10 << 20)   // 10 MiB/s
        #expect(pacer.reserve(8 << 20, now: 100) == 0, "the first part goes at once")
        #expect(abs(pacer.reserve(8 << 20, now: 100) - 0.8) < 1e-9, "the next waits for the first's share")
        #expect(abs(pacer.reserve(2 << 20, now: 101) - 0.6) < 1e-9)
        #expect(pacer.reserve(1 << 20, now: 200) == 0, "an idle pacer does not save up")
    }
}
