import DropboxClient
@testable import DropboxFS
import Foundation
import Synchronization
import TestSupport
import Testing

/// The read engine (issue 6): read-ahead, one memory budget, resuming parts, the block cache.
@Suite("Read engine against an in-memory Dropbox")
struct ReadEngineTests {
    let dropbox = FakeDropbox()
    let clock = ManualClock()

    static let MiB = 1 << 20

    /// Distinct bytes everywhere (each 8-byte word holds its own offset), so a misplaced range
    /// cannot compare equal.
    static func content(_ size: Int, salt: UInt64 = 0) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.count / 8
            let base = raw.baseAddress!
            for i in 0..<words { base.storeBytes(of: UInt64(i * 8) ^ salt, toByteOffset: i * 8, as: UInt64.self) }
            for i in (words * 8)..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i) }
        }
        return bytes
    }

    func makeFS(_ readAhead: ReadAheadOptions = ReadAheadOptions(), ttl: Int = 60, api: FakeDropbox? = nil) -> DropboxFilesystem {
        var options = FilesystemOptions(metadataTTL: .seconds(ttl))
        options.readAhead = readAhead
        return DropboxFilesystem(api: api ?? dropbox, options: options, folderModified: 0, now: clock.now)
    }

    func open(_ fs: DropboxFilesystem, _ name: String) throws -> FileHandleID {
        try fs.open(try fs.lookup(parent: .root, name: name).inode).handle
    }

    func readAll(_ fs: DropboxFilesystem, _ handle: FileHandleID, size: Int, chunk: Int = 128 << 10) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(size)
        var offset = 0
        while offset < size {
            let bytes = try fs.read(handle, offset: UInt64(offset), size: chunk)
            if bytes.isEmpty { break }
            out += bytes
            offset += bytes.count
        }
        return out
    }

    /// Reads `reads` (offset, length) in order through `handle`, each checked against `content`.
    func expectReads(_ fs: DropboxFilesystem, _ handle: FileHandleID, _ content: [UInt8], _ reads: [(Int, Int)]) throws {
        for (offset, length) in reads {
            #expect(try fs.read(handle, offset: UInt64(offset), size: length) == Array(content[offset..<(offset + length)]))
        }
    }

    @Test func sequentialReadsGrowTheWindowInDoublingParts() throws {
        let content = Self.content(48 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        // Parts stop at the short-round-trip size here: the in-memory Dropbox answers in
        // microseconds or, on a loaded machine, milliseconds, and what the link estimate makes of
        // that is LinkEstimateTests' subject, not this test's.
        var options = ReadAheadOptions()
        options.maxPartSize = options.basePartSize
        let fs = makeFS(options)
        let handle = try open(fs, "big.bin")
        #expect(try readAll(fs, handle, size: content.count) == content)
        let ranges = dropbox.downloadRanges
        #expect(ranges.first == 0..<UInt64(Self.MiB), "the first part is the initial 1 MiB window")
        // Parts are fetched by several workers, so they reach Dropbox in any order: by offset,
        // they double.
        let lengths = ranges.sorted { $0.lowerBound < $1.lowerBound }.map { Int($0.upperBound - $0.lowerBound) }
        #expect(Array(lengths.prefix(4)) == [1, 2, 4, 8].map { $0 * Self.MiB }, "parts double up to 8 MiB")
        #expect(lengths.allSatisfy { $0 <= 8 * Self.MiB })
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every byte downloaded exactly once")
        #expect(ranges.count <= 10)
        fs.release(handle)
        #expect(eventually { fs.readAheadUsage.reserved == 0 }, "a released handle gives its memory back")
    }

    @Test func readAheadHidesLatency() throws {
        let content = Self.content(32 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        dropbox.setDownloadLatency(0.02)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        #expect(try readAll(fs, handle, size: content.count) == content)
        // Counted, not timed (how long it took is the machine's business): a request per 128 KiB
        // read would be 256 round trips one after another; read-ahead asks for a handful of
        // large parts, several of them waiting out their round trip at once.
        #expect(dropbox.downloadRanges.count <= 10, "\(dropbox.downloadRanges.count) requests")
        #expect(dropbox.downloadPeak >= 2, "no two requests were ever in flight at once")
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every byte downloaded once")
        fs.release(handle)
    }

    @Test func aReaderThatReadsWholePartsOneAtATimeKeepsItsStream() throws {
        // 1 MiB reads, one after another: the first read's 1 MiB part is read whole before the
        // second read comes, which empties the stream. It used to start a new one at each read,
        // so every read paid a round trip (32 requests of 1 MiB here).
        let content = Self.content(32 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        #expect(try readAll(fs, handle, size: content.count, chunk: Self.MiB) == content)
        #expect(dropbox.downloadRanges.count <= 8, "\(dropbox.downloadRanges)")
        fs.release(handle)
    }

    @Test func aLongRoundTripGrowsPartsAndWindowWithinTheBudget() throws {
        let content = Self.content(160 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        dropbox.setDownloadLatency(0.1)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        #expect(try readAll(fs, handle, size: content.count, chunk: Self.MiB) == content)
        let link = fs.usage
        #expect((link.linkLatency ?? 0) >= 0.09, "the engine measured the round trip: \(String(describing: link.linkLatency))")
        let lengths = dropbox.downloadRanges.map { $0.upperBound - $0.lowerBound }
        // A twelfth of the 240 MiB read-ahead budget, rounded down to a power of two: 16 MiB.
        #expect(lengths.contains { $0 > 8 << 20 }, "parts grew past the short-round-trip 8 MiB: \(lengths)")
        #expect(lengths.allSatisfy { $0 <= 16 << 20 }, "no part beyond a twelfth of the budget: \(lengths)")
        #expect(fs.readAheadUsage.peak > 64 << 20, "the window opened past the short-round-trip 64 MiB")
        #expect(fs.readAheadUsage.peak <= 256 << 20, "within --readahead-memory")
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every byte downloaded once")
        fs.release(handle)
    }

    @Test func onASlowLinkAStreamKeepsSecondsOfWhatArrivesInFlightNotItsWholeWindow() throws {
        // 16 MB/s shared by every download: the 64 MiB window floor would be four seconds of the
        // link, all of it requested at once, the reader's next part getting a fraction of the link.
        let content = Self.content(64 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        dropbox.setDownloadBandwidth(16e6)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        var read: [UInt8] = []
        var heldOnceSettled: UInt64 = 0
        while read.count < content.count {
            read += try fs.read(handle, offset: UInt64(read.count), size: 1 << 20)
            // From 2 s on: the stream grew for a round, saw each part get less (the parts share
            // the link), and settled.
            if read.count >= 32 << 20 { heldOnceSettled = max(heldOnceSettled, fs.readAheadUsage.reserved) }
        }
        #expect(read == content)
        // Two seconds of at most 16 MB/s is 30.5 MiB; without the pace all 64 MiB were reserved.
        #expect(heldOnceSettled <= 40 << 20, "read-ahead once settled \(heldOnceSettled >> 20) MiB")
        #expect(fs.readAheadUsage.peak < 64 << 20, "peak read-ahead \(fs.readAheadUsage.peak >> 20) MiB")
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every byte downloaded once")
        let next = fs.reader.open(ReadFile(id: "big", rev: "r", size: 1), isCurrent: { true }).state.withLock { $0.pace }
        #expect(next.phase == .settled, "a new stream starts from the pace the last one settled at")
        let measured = try #require(next.rate)
        #expect(measured <= 17e6 && measured > 1e6, "measured \(measured) B/s through a 16 MB/s link")
        fs.release(handle)
    }

    @Test func onSlowConnectionsAStreamKeepsTheManyPartsThatBringMore() throws {
        // A far server: 4 MB/s for each download, 100 ms to its first byte, and a link with room
        // for many. An 8 MiB part then spends two seconds in flight, and only more parts at once
        // bring more, so the stream must not take its connections for a shared link. Reads come
        // one at a time here (as with direct_io), and the per-part rate that was the stream's rate
        // over the parts receiving at a sample's end made it do just that: five parts at most,
        // 12.5 s (`StreamPace.perPartRate`). A window sized from the stream's own rate (two round
        // trips of it and a part: 64 MiB, eight parts) fails too. (The same case through a real
        // mount: Tests/Mount/test_reads.py, slow connections.)
        let content = Self.content(96 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        dropbox.setConnectionBandwidth(4e6)
        dropbox.setDownloadLatency(0.1)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        #expect(try readAll(fs, handle, size: content.count, chunk: Self.MiB) == content)
        // The floor at this round trip is 128 MiB: sixteen 8 MiB parts, more than the file holds.
        #expect(dropbox.downloadPeak >= 10, "at most \(dropbox.downloadPeak) downloads at once")
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every byte downloaded once")
        fs.release(handle)
    }

    @Test func whileItsReaderWaitsOnTheFrontPartAStreamKeepsAskingForMoreAsBytesArrive() throws {
        // The part holding byte 30 MiB stops there, as a part sharing a link with
        // the ones behind it falls behind them. Its reader cannot read past it, so no read
        // schedules anything; parts behind it still arrive, and their fetchers ask for the next
        // ones (a refill), up to twice the window. Scheduling only at reads, the stream held at
        // most its window while the link went idle.
        let content = Self.content(160 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        // A link the window can be sized from: 200 MB/s, 50 ms to a first byte (unbounded, the
        // fake's own speed makes the window as wide as the budget). A refill keeps two round
        // trips of it in flight, about 20 MB: more than the 1 MiB the held part still owes.
        dropbox.setDownloadBandwidth(200e6)
        dropbox.setDownloadLatency(0.05)
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        defer { release.signal() }   // never leave the fetcher and the reader blocked
        let stall = UInt64(30 * Self.MiB)
        let progress = Atomic<Int>(0)
        dropbox.setChunkGate { range, sent in
            if range.contains(stall), UInt64(sent) == stall - range.lowerBound {
                held.signal()
                release.wait()
            }
            // The parts behind the held one send their bytes once the reader has reached it, so
            // that they arrive while it waits. A reader slower than the link (a loaded machine)
            // found them all arrived when it got there, and with nothing left to arrive nothing
            // could ask for more (seen once in the whole suite): a reader with whole parts ahead
            // of it is served by its reads, as it should be, but that is not what this tests.
            if range.lowerBound > stall, sent == 0 {
                let giveUp = Date().addingTimeInterval(60)
                while progress.load(ordering: .relaxed) < Int(stall), Date() < giveUp { usleep(1_000) }
            }
        }
        // A narrower floor than the default, so that twice the window fits the file ahead of the
        // held part even when a loaded machine stretches the measured round trip.
        var options = ReadAheadOptions()
        options.maxWindow = 32 << 20
        // Parts of 8 MiB whatever the link measures: the held one is 23-31 MiB.
        options.maxPartSize = options.basePartSize
        let fs = makeFS(options)
        let window: @Sendable () -> UInt64 = { [options] in fs.reader.linkEstimate.window(options, budget: fs.reader.budget.capacity) }
        let handle = try open(fs, "big.bin")
        let result = Mutex<[UInt8]?>(nil)
        let reader = Thread { [self] in
            var read: [UInt8] = []
            while read.count < content.count {
                guard let bytes = try? fs.read(handle, offset: UInt64(read.count), size: Self.MiB), !bytes.isEmpty else { break }
                read += bytes
                progress.store(read.count, ordering: .relaxed)
            }
            result.withLock { $0 = read }
        }
        // The window follows the round trip the engine measures, which a loaded machine stretches
        // and shrinks while the file is read: the bound below is twice the widest it was.
        let widest = Mutex<UInt64>(0)
        let sampler = Thread {
            let giveUp = Date().addingTimeInterval(240)   // a reader that never ends fails below
            while result.withLock({ $0 }) == nil, Date() < giveUp {
                let now = window()
                widest.withLock { $0 = max($0, now) }
                usleep(2_000)
            }
        }
        reader.start()
        sampler.start()
        // Generous waits: the whole suite runs at once, and these pass as soon as they hold.
        #expect(held.wait(timeout: .now() + 60) == .success, "the part holding 30 MiB was asked for")
        #expect(eventually(within: 60) { progress.load(ordering: .relaxed) >= Int(stall) - Self.MiB }, "the reader reached it")
        // Reads alone hold at most the window (and the part a read waits for).
        let stream = try #require(fs.state.withLock { $0.fileHandles[handle]?.stream })
        let streamWindow = { stream.state.withLock { ($0.window >> 20, $0.pace.phase, $0.pace.rate.map { Int($0 / 1e6) }) } }
        #expect(eventually(within: 60) { fs.readAheadUsage.reserved > window() + UInt64(16 * Self.MiB) },
                "read-ahead held while the reader waits: \(fs.readAheadUsage.reserved >> 20) MiB, window \(window() >> 20) MiB, stream \(streamWindow())")
        #expect(progress.load(ordering: .relaxed) < Int(stall) + Self.MiB, "the reader still waits at the held part")
        release.signal()
        #expect(eventually(within: 60) { result.withLock { $0 } != nil })
        #expect(result.withLock { $0 } == content)
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every byte downloaded once")
        let bound = 2 * max(widest.withLock { $0 }, window()) + UInt64(16 * Self.MiB)
        #expect(fs.readAheadUsage.peak <= bound, "at most twice the window, and the parts a read waits for")
        fs.release(handle)
    }

    @Test func aClosedFilesStalledReadAheadDownloadsEndAtOnce() throws {
        // Read-ahead stalls mid-body (no byte arrives, so no chunk could be refused). Closing the
        // file cancels its parts, and their downloads with them: the fetch threads and their
        // connections are free at once, not at the call's deadline.
        let content = Self.content(64 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        let stalled = Atomic<Int>(0)
        let cancelled = Atomic<Int>(0)
        dropbox.setChunkGate { range, sent in
            // Parts that what is read below needs arrive; read-ahead beyond it stalls.
            guard range.lowerBound >= 8 << 20, sent == 0 else { return }
            stalled.add(1, ordering: .relaxed)
            let giveUp = Date().addingTimeInterval(30)
            while !CallCancellation.isCurrentCallCancelled && Date() < giveUp { usleep(5_000) }
            if CallCancellation.isCurrentCallCancelled { cancelled.add(1, ordering: .relaxed) }
        }
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        // Reads in a row make a stream, whose read-ahead goes past them.
        #expect(try readAll(fs, handle, size: 8 * Self.MiB, chunk: Self.MiB) == Array(content[0..<(8 * Self.MiB)]))
        #expect(eventually(within: 60) { stalled.load(ordering: .relaxed) > 0 }, "read-ahead was asked for")
        fs.release(handle)
        #expect(eventually(within: 10) { cancelled.load(ordering: .relaxed) == stalled.load(ordering: .relaxed) },
                "\(cancelled.load(ordering: .relaxed)) of \(stalled.load(ordering: .relaxed)) stalled downloads cancelled")
    }

    @Test func readsFetchedOnTheirOwnDownloadAtMostSixteenAtOnce() throws {
        // Their memory is outside read-ahead and was bounded by libfuse's 16 worker threads; the
        // mount now runs many more (a stalled download must not hold up the mount), so the engine
        // bounds them itself.
        let content = Self.content(64 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        let inFlight = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        let released = Atomic<Bool>(false)
        dropbox.setChunkGate { _, sent in
            guard sent == 0 else { return }
            let now = inFlight.add(1, ordering: .relaxed).newValue
            _ = most.max(now, ordering: .relaxed)
            let giveUp = Date().addingTimeInterval(30)
            while !released.load(ordering: .relaxed) && Date() < giveUp { usleep(5_000) }
            inFlight.subtract(1, ordering: .relaxed)
        }
        let fs = makeFS(ReadAheadOptions(memoryBudget: 0))   // every read is fetched on its own
        let handle = try open(fs, "big.bin")
        let readers = 24
        let done = DispatchGroup()
        let wrong = Atomic<Int>(0)
        for i in 0..<readers {
            done.enter()
            Thread.detachNewThread {
                let offset = i * 2 * Self.MiB + 4096
                let bytes = try? fs.read(handle, offset: UInt64(offset), size: 4096)
                if bytes != Array(content[offset..<(offset + 4096)]) { wrong.add(1, ordering: .relaxed) }
                done.leave()
            }
        }
        #expect(eventually(within: 20) { inFlight.load(ordering: .relaxed) == ReadEngine.directReadsAtOnce })
        Thread.sleep(forTimeInterval: 0.3)
        #expect(inFlight.load(ordering: .relaxed) == ReadEngine.directReadsAtOnce, "the others wait for a slot")
        released.store(true, ordering: .relaxed)
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(wrong.load(ordering: .relaxed) == 0)
        #expect(most.load(ordering: .relaxed) == ReadEngine.directReadsAtOnce)
        fs.release(handle)
    }

    @Test func concurrentOutOfOrderReadsOfOneHandleStayInTheStream() throws {
        let content = Self.content(24 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        // The kernel's read-ahead sends one reader's reads from several threads at once.
        let chunk = 128 << 10
        let results = Mutex<[Int: [UInt8]]>([:])
        let next = Atomic<Int>(0)
        let threads = (0..<4).map { _ in
            Thread {
                while true {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    guard index * chunk < content.count else { return }
                    let bytes = (try? fs.read(handle, offset: UInt64(index * chunk), size: chunk)) ?? []
                    results.withLock { $0[index] = bytes }
                }
            }
        }
        threads.forEach { $0.start() }
        #expect(eventually(within: 20) { results.withLock { $0.count } * chunk >= content.count })
        let joined = results.withLock { r in (0..<r.count).flatMap { r[$0] ?? [] } }
        #expect(joined == content)
        #expect(dropbox.downloadedBytes <= UInt64(content.count) + UInt64(2 * Self.MiB))
    }

    @Test func manyReadersShareOneBudget() throws {
        let files = (0..<8).map { Self.content(12 * Self.MiB, salt: UInt64($0) << 40) }
        for (i, content) in files.enumerated() { dropbox.addFile("/f\(i).bin", content) }
        let budget: UInt64 = 16 << 20
        let fs = makeFS(ReadAheadOptions(memoryBudget: budget))
        let handles = try (0..<8).map { try open(fs, "f\($0).bin") }
        var read = Array(repeating: [UInt8](), count: 8)
        let chunk = 256 << 10
        var offset = 0
        while offset < 12 * Self.MiB {
            for i in 0..<8 { read[i] += try fs.read(handles[i], offset: UInt64(offset), size: chunk) }
            let usage = fs.readAheadUsage
            #expect(usage.reserved <= budget)
            offset += chunk
        }
        #expect(read == files)
        #expect(fs.readAheadUsage.peak <= budget, "read-ahead never held more than the budget")
        #expect(fs.readAheadUsage.streams <= 8)
        // With 8 streams each may hold 2 MiB: no part is larger than that once all are going.
        let late = dropbox.downloadRanges.suffix(20).map { $0.upperBound - $0.lowerBound }
        #expect(late.allSatisfy { $0 <= 2 << 20 }, "windows shrink with many readers: \(late)")
        handles.forEach(fs.release)
        #expect(eventually { fs.readAheadUsage.reserved == 0 && fs.readAheadUsage.streams == 0 })
    }

    @Test func aFullBudgetReusesTheBufferJustGivenBack() throws {
        // Streaming at a full budget frees one part as it reserves the next. The next must get
        // the freed buffer (already faulted in), not a fresh allocation whose every page faults.
        let budget = ReadBudget(capacity: 2 << 20)
        let first = try #require(budget.reserveBuffer(1 << 20))
        let second = try #require(budget.reserveBuffer(1 << 20))
        #expect(budget.reserveBuffer(1 << 20) == nil, "nothing past the capacity")
        budget.returnBuffer(first)
        let third = try #require(budget.reserveBuffer(1 << 20))
        #expect(third.baseAddress == first.baseAddress)
        #expect(budget.usage.reserved == 2 << 20)
        budget.returnBuffer(second)
        budget.returnBuffer(third)
        #expect(budget.usage.reserved == 0)
    }

    @Test func aBufferOfAnySizeOfBlocksIsMadeOfTheParkedBlocksPagesMovedNotFresh() throws {
        // A stream whose parts grew from 4 MiB to 8 MiB, or shrank to 2 MiB (its link shared):
        // the new buffers must be made of the pages the parked 4 MiB ones already hold, not of
        // fresh memory, so the process touches no more memory than it holds at most.
        let block = 2 << 20
        let budget = ReadBudget(capacity: 64 << 20)
        let large = try (0..<3).map { _ in try #require(budget.reserveBuffer(4 << 20)) }
        for (index, buffer) in large.enumerated() {
            buffer.storeBytes(of: UInt8(2 * index + 1), toByteOffset: 0, as: UInt8.self)
            buffer.storeBytes(of: UInt8(2 * index + 2), toByteOffset: block, as: UInt8.self)
        }
        large.forEach(budget.returnBuffer)
        #expect(budget.parkedBytes == 12 << 20)
        let grown = try #require(budget.reserveBuffer(8 << 20))
        #expect(budget.parkedBytes == 4 << 20, "four parked blocks went into it")
        let marks = stride(from: 0, to: 8 << 20, by: block).map { grown.load(fromByteOffset: $0, as: UInt8.self) }
        #expect(marks == [3, 4, 5, 6], "its pages are the parked ones, moved in order; fresh pages read 0")
        let shrunk = try #require(budget.reserveBuffer(2 << 20))
        #expect(shrunk.baseAddress == large[0].baseAddress! + block, "a parked block taken where it lies")
        #expect(shrunk.load(as: UInt8.self) == 2)
        #expect(budget.parkedBytes == 2 << 20)
        budget.returnBuffer(grown)
        let again = try #require(budget.reserveBuffer(8 << 20))
        #expect(again.baseAddress == grown.baseAddress, "a buffer given back and taken whole needs no move")
        budget.returnBuffer(again)
        budget.returnBuffer(shrunk)
        #expect(budget.usage.reserved == 0)
        #expect(budget.parkedBytes == 12 << 20)
        budget.freeParked()
        #expect(budget.parkedBytes == 0)
    }

    @Test func aSmallBufferNoneIsParkedForGivesBackParkedMemoryAsFarAsItsOwnSize() throws {
        // Under 2 MiB buffers are parked by size. One of a recycled size with none parked frees
        // parked memory it cannot use, so the kernel hands it those pages rather than fresh ones.
        let budget = ReadBudget(capacity: 64 << 20)
        let large = try (0..<2).map { _ in try #require(budget.reserveBuffer(4 << 20)) }
        let small = try #require(budget.reserveBuffer(1 << 20))
        large.forEach(budget.returnBuffer)
        budget.returnBuffer(small)
        #expect(budget.parkedBytes == 9 << 20)
        let half = try #require(budget.reserveBuffer(512 << 10))
        #expect(budget.parkedBytes == 7 << 20, "one 2 MiB block given back for it, the 1 MiB buffer kept")
        let tiny = try #require(budget.reserveBuffer(4096))
        #expect(budget.parkedBytes == 7 << 20, "a buffer too small to be recycled gives back none")
        budget.returnBuffer(tiny)
        let again = try #require(budget.reserveBuffer(1 << 20))
        #expect(again.baseAddress == small.baseAddress, "a parked buffer of the size is still reused")
        #expect(budget.parkedBytes == 6 << 20, "and costs no other parked memory")
        let blocks = try #require(budget.reserveBuffer(8 << 20))
        #expect(budget.parkedBytes == 0, "its first three blocks reused, its last fresh: nothing parked is left to give back")
        budget.returnBuffer(half)
        #expect(budget.parkedBytes == 512 << 10)
        let more = try #require(budget.reserveBuffer(4 << 20))
        #expect(budget.parkedBytes == 0, "fresh blocks give back the parked small buffer")
        [blocks, more, again].forEach(budget.returnBuffer)
        #expect(budget.usage.reserved == 0)
        budget.freeParked()
    }

    @Test func parkedAndReservedMemoryNeverExceedTheCapacity() throws {
        let budget = ReadBudget(capacity: 8 << 20)
        let whole = try #require(budget.reserveBuffer(8 << 20))
        #expect(budget.reserveBuffer(2 << 20) == nil, "nothing past the capacity")
        budget.returnBuffer(whole)
        #expect(budget.parkedBytes == 8 << 20)
        var held: [UnsafeMutableRawBufferPointer] = []
        for size in [2 << 20, 1 << 20, 4 << 20] {
            held.append(try #require(budget.reserveBuffer(size)))
            #expect(budget.usage.reserved + budget.parkedBytes <= 8 << 20)
        }
        #expect(budget.reserveBuffer(2 << 20) == nil)
        held.forEach(budget.returnBuffer)
        #expect(budget.usage.reserved == 0)
        #expect(budget.parkedBytes <= 8 << 20)
        budget.freeParked()
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func buffersHeldAtOnceNeverShareMemoryAndKeepTheirBytesWhatever(seed: UInt64) throws {
        // Random reserves and returns of every size class at a tight capacity: parked blocks are
        // moved between buffers, so a bug there would hand two parts the same pages. Each held
        // buffer is stamped at every 4 KiB with its own number and checked before it goes back.
        var random = SeededGenerator(seed: seed)
        let capacity: UInt64 = 24 << 20
        let budget = ReadBudget(capacity: capacity)
        let sizes = [4096, 100_000, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
        var held: [(buffer: UnsafeMutableRawBufferPointer, stamp: UInt32)] = []
        var nextStamp: UInt32 = 1
        func intact(_ entry: (buffer: UnsafeMutableRawBufferPointer, stamp: UInt32)) -> Bool {
            stride(from: 0, to: entry.buffer.count, by: 4096).allSatisfy {
                entry.buffer.load(fromByteOffset: $0, as: UInt32.self) == entry.stamp
            }
        }
        for _ in 0..<400 {
            if !held.isEmpty, Int.random(in: 0..<3, using: &random) == 0 {
                let entry = held.remove(at: Int.random(in: 0..<held.count, using: &random))
                #expect(intact(entry), "a held buffer's bytes changed under it")
                budget.returnBuffer(entry.buffer)
            } else if let buffer = budget.reserveBuffer(sizes.randomElement(using: &random)!) {
                let stamp = nextStamp
                nextStamp += 1
                for offset in stride(from: 0, to: buffer.count, by: 4096) {
                    buffer.storeBytes(of: stamp, toByteOffset: offset, as: UInt32.self)
                }
                held.append((buffer, stamp))
            }
            #expect(budget.usage.reserved + budget.parkedBytes <= capacity)
            #expect(budget.usage.reserved == held.reduce(0) { $0 + UInt64($1.buffer.count) })
        }
        let ranges = held.map { UInt(bitPattern: $0.buffer.baseAddress!)..<(UInt(bitPattern: $0.buffer.baseAddress!) + UInt($0.buffer.count)) }
            .sorted { $0.lowerBound < $1.lowerBound }
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound <= $1.lowerBound }, "buffers held at once overlap")
        #expect(held.allSatisfy(intact))
        held.forEach { budget.returnBuffer($0.buffer) }
        #expect(budget.usage.reserved == 0)
        budget.freeParked()
        #expect(budget.parkedBytes == 0)
    }

    @Test func aPartHoldsExactlyTheBytesAppendedWhateverTheirSizesAndAlignment() throws {
        // The copy into a part streams 64 bytes at a time from a 16-byte boundary of the part;
        // chunks that start and end anywhere must still land byte for byte.
        let source = Self.content(200_003, salt: 0x5A5A)
        let part = Part(range: 0..<UInt64(source.count))
        #expect(part.claim())
        let sizes = [1, 15, 16, 17, 63, 64, 65, 127, 4095, 16_384, 16_389, 0, 3]
        var at = 0, turn = 0
        source.withUnsafeBytes { raw in
            while at < raw.count {
                let size = min(sizes[turn % sizes.count], raw.count - at)
                turn += 1
                #expect(part.append(UnsafeRawBufferPointer(rebasing: raw[at..<(at + size)])))
                at += size
            }
        }
        part.finish()
        #expect(try part.wait(forPrefix: source.count) == .ready)
        let held = part.bytes(0..<source.count)
        let firstWrongByte = source.indices.first { held[$0] != source[$0] }
        #expect(firstWrongByte == nil)
    }

    @Test func bytesWrittenInPlaceCountOnlyWhenTheyFitTheWriteSucceedsAndThePartRuns() throws {
        let part = Part(range: 0..<10)
        #expect(part.claim())
        #expect(part.append(count: 4) { buffer in
            buffer.copyBytes(from: [1, 2, 3, 4] as [UInt8])
            return true
        })
        #expect(!part.append(count: 3) { _ in false }, "a failed write counts nothing")
        #expect(part.filledCount == 4)
        var calledForTooMany = false
        #expect(!part.append(count: 7) { _ in calledForTooMany = true; return true })
        #expect(!calledForTooMany, "bytes past the part's end are refused before anything is written")
        #expect(part.append(count: 6) { buffer in
            buffer.copyBytes(from: [5, 6, 7, 8, 9, 10] as [UInt8])
            return buffer.count == 6
        })
        #expect(Array(part.bytes(0..<10)) == Array(1...10))

        let cancelled = Part(range: 0..<4)
        #expect(cancelled.claim())
        cancelled.cancel()
        #expect(!cancelled.append(count: 4) { _ in true })
        #expect(cancelled.filledCount == 0)
    }

    @Test func theBlockCacheFillsAPartFromTheMiddleOfABlockAndForgetsBlocksWhoseFilesAreDamaged() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-blocks-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cache = BlockCache(directory: directory, capacity: 64 << 20, logger: .init(label: "test"))
        let content = Self.content(3 * Self.MiB + 777, salt: 3)
        let file = ReadFile(id: "id:f", rev: "0123", size: UInt64(content.count))
        let whole = Part(range: 0..<UInt64(content.count))
        #expect(whole.claim())
        #expect(content.withUnsafeBytes { whole.append($0) })
        whole.finish()
        cache.store(whole, file: file)
        #expect(cache.usage.blocks == 4)
        for block in 0..<4 {
            let size = try FileManager.default.attributesOfItem(atPath: directory + "/" + BlockCache.key(file, block: UInt64(block)))[.size]
            #expect((size as? NSNumber)?.intValue == (block < 3 ? Self.MiB : 777), "block \(block)")
        }

        // From the middle of block 0 into block 2: one block at a time, byte for byte.
        let range = 500_000..<(2 * Self.MiB + 100)
        let part = Part(range: UInt64(range.lowerBound)..<UInt64(range.upperBound))
        #expect(part.claim())
        for _ in 0..<3 { #expect(cache.fill(part, file: file)) }
        #expect(part.filledCount == range.count)
        #expect(Array(part.bytes(0..<range.count)) == Array(content[range]))

        // A block file cut short, grown, or gone since the index was read is a miss, and is forgotten.
        #expect(truncate(directory + "/" + BlockCache.key(file, block: 0), 1000) == 0)
        let grown = try #require(FileHandle(forWritingAtPath: directory + "/" + BlockCache.key(file, block: 1)))
        grown.seekToEndOfFile()
        grown.write(Data([1, 2, 3]))
        try grown.close()
        try FileManager.default.removeItem(atPath: directory + "/" + BlockCache.key(file, block: 2))
        for block in 0...2 {
            let missing = Part(range: UInt64(block * Self.MiB)..<UInt64(content.count))
            #expect(missing.claim())
            #expect(!cache.fill(missing, file: file), "block \(block)")
            #expect(missing.filledCount == 0)
        }
        #expect(cache.usage.blocks == 1)
        for block in 0...1 {
            #expect(!FileManager.default.fileExists(atPath: directory + "/" + BlockCache.key(file, block: UInt64(block))))
        }
    }

    @Test func randomSmallReadsDownloadLittleMoreThanTheyRead() throws {
        let content = Self.content(64 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        var generator = SeededGenerator(seed: 42)
        var returned = 0
        for _ in 0..<300 {
            let offset = Int(generator.next() % UInt64(content.count / 4096)) * 4096
            let bytes = try fs.read(handle, offset: UInt64(offset), size: 4096)
            #expect(bytes == Array(content[offset..<(offset + 4096)]))
            returned += bytes.count
        }
        let amplification = Double(dropbox.downloadedBytes) / Double(returned)
        #expect(amplification <= 4, "downloaded \(amplification)x what was read")
        // Random reads are fetched on their own, and the stats line counts them.
        #expect(fs.usage.directReads >= 250)
        #expect(fs.usage.directReadBytes >= 250 * 4096)
    }

    @Test func readAheadLeavesPartOfTheBudgetToReadsFetchedOnTheirOwn() throws {
        // Up to 16 FUSE threads may each fetch a 1 MiB read outside read-ahead; read-ahead gets
        // the rest, so the two together stay within the one budget.
        #expect(ReadEngine.directReadReserve(of: 256 << 20) == 16 << 20)
        #expect(ReadEngine.directReadReserve(of: 16 << 20) == 2 << 20)
        #expect(ReadEngine.directReadReserve(of: 0) == 0)
        let fs = makeFS(ReadAheadOptions(memoryBudget: 256 << 20))
        #expect(fs.reader.budget.capacity == 240 << 20)
    }

    @Test func aProgramThatReadsAFilesHeaderAndSeeksOnHasAFewMiBFetchedNotTheFile() throws {
        // What ffmpegthumbnailer's reads of a 112 MB video (370 KB: the header, the index at the
        // end, a frame at 28%) reach the mount as, through the kernel's read-ahead: 128 KiB at 0,
        // a page at the end, then 512 KiB and 1 MiB on from the start, and 200 KiB far on. The
        // window opened at the second read used to fetch tens of MiB (31 MiB here, and the seek
        // stayed in the stream and fetched 48 MiB more).
        let size = 112 * Self.MiB
        let content = Self.content(size)
        dropbox.addFile("/clip.mp4", content)
        dropbox.setDownloadLatency(0.05)
        let fs = makeFS()
        let handle = try open(fs, "clip.mp4")
        try expectReads(fs, handle, content, [(0, 128 << 10), (size - 8192, 8192), (128 << 10, 512 << 10),
                                              (640 << 10, Self.MiB), (31 * Self.MiB, 200 << 10)])
        fs.release(handle)
        #expect(dropbox.downloadedBytes <= UInt64(4 * Self.MiB), "downloaded \(dropbox.downloadedBytes) bytes")
    }

    @Test func aJumpAheadWithinTheStreamsReachDoesNotFetchTheBytesSkipped() throws {
        // ffmpegthumbnailer on a 27 MB video: the header, then a frame at 70%, 16 MiB past what
        // the stream had asked for: within its reach (a straggler's), so the stream stays, but it
        // used to ask for everything in between (24.6 MB for a 117 KB read).
        let size = 27 * Self.MiB
        let content = Self.content(size)
        dropbox.addFile("/clip.mp4", content)
        let fs = makeFS()
        let handle = try open(fs, "clip.mp4")
        defer { fs.release(handle) }
        try expectReads(fs, handle, content, [(0, 128 << 10), (128 << 10, 512 << 10), (19 * Self.MiB, 128 << 10)])
        #expect(dropbox.downloadedBytes <= UInt64(4 * Self.MiB), "downloaded \(dropbox.downloadedBytes) bytes")
        #expect(!dropbox.downloadRanges.contains { $0.overlaps(UInt64(8 * Self.MiB)..<UInt64(18 * Self.MiB)) },
                "the bytes skipped were asked for: \(dropbox.downloadRanges)")
    }

    @Test func aSequentialReaderPastTheHeaderStillOpensItsWindowToTheRoundTrip() throws {
        // The kernel's read-ahead sends a sequential reader's reads in growing sizes (128 KiB,
        // 512 KiB, 1 MiB, 2 MiB): by the fourth the run has read enough to stream, and the window
        // opens at once to two round trips' worth of bytes. Doubling alone would have asked for
        // nothing past 7 MiB (parts of 1, 2 and 4 MiB); the third read, still a header's, not
        // even that.
        let content = Self.content(128 * Self.MiB)
        dropbox.addFile("/big.bin", content)
        dropbox.setDownloadLatency(0.05)
        let fs = makeFS()
        let warmup = try open(fs, "big.bin")   // the link estimate: a rate and a round trip
        _ = try readAll(fs, warmup, size: 4 * Self.MiB, chunk: Self.MiB)
        fs.release(warmup)
        #expect(eventually { fs.readAheadUsage.reserved == 0 }, "the first handle's read-ahead is over")
        let handle = try open(fs, "big.bin")
        defer { fs.release(handle) }
        let asked = dropbox.downloadRanges.count
        func furthestAsked() -> UInt64 { dropbox.downloadRanges.dropFirst(asked).map(\.upperBound).max() ?? 0 }
        try expectReads(fs, handle, content, [(0, 128 << 10), (128 << 10, 512 << 10), (640 << 10, Self.MiB)])
        #expect(furthestAsked() <= UInt64(3 * Self.MiB), "a header's reads opened the window: \(furthestAsked())")
        try expectReads(fs, handle, content, [(1664 << 10, 2 * Self.MiB)])
        #expect(eventually { furthestAsked() > UInt64(8 * Self.MiB) }, "the window did not open: \(furthestAsked())")
    }

    @Test func aTailReadDownloadsAtMostFourMiB() throws {
        let size = 64 * Self.MiB
        let content = Self.content(size)
        dropbox.addFile("/big.bin", content)
        let fs = makeFS()
        let handle = try open(fs, "big.bin")
        // What tail -c 1M looks like through the page cache: a small read, then larger ones.
        var offset = size - Self.MiB
        var out = try fs.read(handle, offset: UInt64(offset), size: 8192)
        offset += out.count
        while offset < size {
            let bytes = try fs.read(handle, offset: UInt64(offset), size: 128 << 10)
            out += bytes
            offset += bytes.count
        }
        #expect(out == Array(content[(size - Self.MiB)...]))
        #expect(dropbox.downloadedBytes <= UInt64(4 * Self.MiB), "downloaded \(dropbox.downloadedBytes) bytes")
    }

    @Test func readAheadOfARevDropboxNoLongerHasIsDroppedNotServed() throws {
        let content = Self.content(32 * Self.MiB)
        dropbox.addFile("/f.bin", content)
        let fs = makeFS(ttl: 1)
        let inode = try fs.lookup(parent: .root, name: "f.bin").inode
        let handle = try fs.open(inode).handle
        #expect(try fs.read(handle, offset: 0, size: 128 << 10) == Array(content[0..<(128 << 10)]))
        #expect(fs.readAheadUsage.reserved > 0, "the stream holds read-ahead")
        let newer = Self.content(32 * Self.MiB, salt: 1)
        dropbox.addFile("/f.bin", newer)
        clock.advance(by: 2)
        let replaced = try fs.lookup(parent: .root, name: "f.bin")   // the tree learns the new rev
        #expect(replaced.inode != inode)
        // Read-ahead fetched for the handle's rev is its rev's bytes: still served.
        #expect(try fs.read(handle, offset: 128 << 10, size: 128 << 10) == Array(content[(128 << 10)..<(256 << 10)]))
        // Once Dropbox no longer has the rev, reads beyond what was fetched fail, and the stream's
        // buffers go at once.
        dropbox.forgetFormerRevisions()
        #expect(throws: FSError.changedSinceOpen) { try fs.read(handle, offset: 30 * UInt64(Self.MiB), size: 128 << 10) }
        #expect(eventually { fs.readAheadUsage.reserved == 0 }, "the old rev's buffers are dropped at once")
        let fresh = try fs.open(replaced.inode).handle
        #expect(try fs.read(fresh, offset: 0, size: 16) == Array(newer[0..<16]))
    }

    @Test func aPartCutShortResumesFromTheByteWhereItStopped() throws {
        let content = Self.content(Self.MiB)
        dropbox.addFile("/f.bin", content)
        dropbox.cutShort(after: [300_000, 0, 5])
        let fs = makeFS()
        let handle = try open(fs, "f.bin")
        #expect(try readAll(fs, handle, size: content.count) == content)
        let starts = dropbox.downloadRanges.map(\.lowerBound)
        #expect(starts == [0, 300_000, 300_000, 300_005], "each retry asks only for the missing bytes")
    }

    @Test func aPartThatCannotBeFetchedFailsItsReads() throws {
        dropbox.addFile("/f.bin", Self.content(Self.MiB))
        let fs = makeFS()
        let handle = try open(fs, "f.bin")
        dropbox.fail(with: .server(status: 503, body: ""))
        #expect(throws: FSError.upstream(.server(status: 503, body: ""))) { try fs.read(handle, offset: 0, size: 4096) }
        dropbox.fail(with: nil)
        #expect(try fs.read(handle, offset: 4096, size: 4096) == Array(Self.content(Self.MiB)[4096..<8192]),
                "a later read tries again")
    }

    @Test func aDownloadThatTimedOutIsNotWaitedOutAgainAtOnce() throws {
        // A server that takes connections and never answers: each call waits its whole deadline.
        // Not a second call for the same part, nor for the kernel's read of the page right after.
        let timeout = DropboxError.transport(code: 28, message: "Operation timed out after 10001 milliseconds")
        dropbox.addFile("/f.bin", Self.content(Self.MiB))
        let fs = makeFS()
        let handle = try open(fs, "f.bin")
        dropbox.fail(with: timeout)
        #expect(throws: FSError.upstream(timeout)) { try fs.read(handle, offset: 0, size: 4096) }
        #expect(dropbox.counters.download == 0 && dropbox.downloadAttempts == 1, "one call, not one more")
        #expect(throws: FSError.upstream(timeout)) { try fs.read(handle, offset: 0, size: 4096) }
        #expect(dropbox.downloadAttempts == 1, "the kernel's read again fails at once")
        dropbox.fail(with: nil)
        Thread.sleep(forTimeInterval: ReadEngine.timeoutEcho.seconds + 0.1)
        #expect(try fs.read(handle, offset: 0, size: 4096) == Array(Self.content(Self.MiB)[0..<4096]))
    }

    @Test func anOpenFileMovedOnDropboxReadsOnAndOneDeletedFailsOnlyOnceItsRevIsGone() throws {
        // As on a local disk after `mv`: the handle's inode can no longer be reached by a new
        // open, and its rev still names the same bytes. `tail -F` and mmap readers live on.
        let content = Self.content(40 * Self.MiB)   // far reads start streams of their own
        dropbox.addFile("/f.bin", content)
        dropbox.addFile("/g.bin", content)
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.isFeedLive })
        let moved = try open(fs, "f.bin")
        let deleted = try open(fs, "g.bin")
        #expect(try fs.read(moved, offset: 0, size: 4096) == Array(content[0..<4096]))
        #expect(try fs.read(deleted, offset: 0, size: 4096) == Array(content[0..<4096]))
        dropbox.move("/f.bin", to: "/elsewhere.bin")
        dropbox.remove("/g.bin")
        #expect(eventually { (try? fs.lookup(parent: .root, name: "f.bin")) == nil && (try? fs.lookup(parent: .root, name: "g.bin")) == nil })
        let far = 36 * Self.MiB + 5
        #expect(try fs.read(moved, offset: UInt64(far), size: 4096) == Array(content[far..<(far + 4096)]))
        // The fake keeps no rev of a deleted file (Dropbox keeps them for a while): stale then.
        #expect(throws: FSError.changedSinceOpen) { try fs.read(deleted, offset: UInt64(far), size: 4096) }
    }

    @Test func theBlockCacheServesASecondReadWithoutDownloading() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-blocks-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let content = Self.content(5 * Self.MiB + 12345)
        dropbox.addFile("/f.bin", content)
        let options = ReadAheadOptions(blockCacheDirectory: directory, blockCacheBytes: 64 << 20)
        let first = makeFS(options)
        let handle = try open(first, "f.bin")
        #expect(try readAll(first, handle, size: content.count) == content)
        first.release(handle)
        #expect(eventually { first.reader.cache?.usage.bytes == UInt64(content.count) }, "every block is kept")

        let downloads = dropbox.counters.download
        let second = makeFS(options)   // a remount: a new core over the same directory
        let again = try open(second, "f.bin")
        #expect(try readAll(second, again, size: content.count) == content)
        #expect(try second.read(again, offset: 3_000_000, size: 4096) == Array(content[3_000_000..<3_004_096]))
        #expect(dropbox.counters.download == downloads, "no download call for a cached file")

        let attributes = try FileManager.default.attributesOfItem(atPath: directory)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700)
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let mode = try FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.posixPermissions]
            #expect((mode as? NSNumber)?.intValue == 0o600, "\(name)")
        }
    }

    @Test func rereadingCachedBlocksDoesNotGrowTheEvictionOrder() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-blocks-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let content = Self.content(4 * Self.MiB)
        dropbox.addFile("/f.bin", content)
        // Far below capacity, so nothing is ever evicted: the order must not rely on eviction.
        let fs = makeFS(ReadAheadOptions(blockCacheDirectory: directory, blockCacheBytes: 64 << 20))
        let first = try open(fs, "f.bin")
        #expect(try readAll(fs, first, size: content.count) == content)
        fs.release(first)
        #expect(eventually { fs.reader.cache?.usage.blocks == 4 })
        let cache = try #require(fs.reader.cache)
        // One 4 KiB read per block, from a fresh handle each time: a part filled from each block.
        for round in 0..<5000 {
            let handle = try open(fs, "f.bin")
            let offset = (round % 4) * Self.MiB
            #expect(try fs.read(handle, offset: UInt64(offset), size: 4096) == Array(content[offset..<(offset + 4096)]))
            fs.release(handle)
        }
        #expect(dropbox.downloadedBytes == UInt64(content.count), "every read after the first came from the cache")
        // Before: one place per block read (5,004 here, and on for good); the sweep keeps it
        // within twice the blocks plus 4,096.
        #expect(cache.evictionOrderLength <= 2 * 4 + 4096, "\(cache.evictionOrderLength) places for 4 blocks")
    }

    @Test func theBlockCacheEvictsLeastRecentlyUsedBlocks() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-blocks-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = Self.content(4 * Self.MiB), b = Self.content(4 * Self.MiB, salt: 7)
        dropbox.addFile("/a.bin", a)
        dropbox.addFile("/b.bin", b)
        let fs = makeFS(ReadAheadOptions(blockCacheDirectory: directory, blockCacheBytes: 6 << 20))
        let ha = try open(fs, "a.bin")
        #expect(try readAll(fs, ha, size: a.count) == a)
        #expect(eventually { fs.reader.cache?.usage.blocks == 4 })
        let hb = try open(fs, "b.bin")
        #expect(try readAll(fs, hb, size: b.count) == b)
        #expect(eventually { fs.reader.cache?.usage.blocks == 6 })
        #expect(fs.reader.cache!.usage.bytes <= 6 << 20)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).count == 6)
        // The newest blocks (b's) stayed: reading b again downloads nothing.
        let downloads = dropbox.counters.download
        let again = try open(fs, "b.bin")
        #expect(try readAll(fs, again, size: b.count) == b)
        #expect(dropbox.counters.download == downloads)
    }
}
