// The read engine: turns the kernel's reads of one open file into few, large, parallel Range
// requests when the reads are sequential, and into small exact ones when they are not.
//
// Streams. Each open handle has at most one stream: a run of contiguous parts (Range requests)
// ahead of the reader. A read that starts where the previous one ended (or at offset 0, or within
// or just past the stream: small forward seeks stay in it) is sequential; once the run has read
// `streamingRun` (more than the kernel reads ahead for a program that reads a file's header and
// seeks on) each such read doubles the stream's window (and opens it at once to two round trips'
// worth of bytes), from `initialWindow` up to the smaller of the link's window and the stream's
// share of the global budget, and schedules parts until the window ahead of the read is covered.
// Every scheduled part is in flight. Parts grow 1, 2, 4, 8 MiB and on to the link's part size, so
// the first byte costs one small request and a long read keeps several large ones in flight over
// the transport's reused connections.
// The link's window and part size come from what the downloads measured, round trip and rate
// (`LinkEstimate`): a longer round trip needs more bytes in flight for the same throughput. On a
// slow link a stream keeps no more than a couple of seconds of what reaches it in flight
// (`StreamPace`): more would only share the link with the part its reader waits for. It keeps
// more only where more brought more (slow connections to a far server, not a slow link).
// Between reads the fetchers top a stream up as its bytes arrive (`refill`): a reader waiting on
// the front part cannot read, and parts asked for only at reads arrived in batches with the link
// idle between them.
// A read far from the stream drops it (cancelling what is in flight) and is fetched on its own,
// rounded only to whole pages: the kernel already rounds buffered reads up and reads ahead by itself when it sees order,
// so rounding further would only multiply bytes for random readers (4 KiB reads rounded to
// 128 KiB download 32 times what they return).
//
// Threads. Parts are fetched by a fixed pool (`WorkerPool`) of `connections` threads, each
// running one blocking request over its own kept-alive connection; the part a waiting reader
// needs goes before read-ahead. A reader waiting for bytes is woken once they are there, not at
// every chunk (`Part`). A FUSE read blocks only until the bytes it asked for have arrived,
// then hands the buffers themselves to the adapter (`FileBytes`), which replies without a copy.
// Reads that fit nowhere in the budget (or are random) download on the FUSE thread itself, at
// most `directReadsAtOnce` (16) at once of at most 1 MiB each. They are kept inside the one
// budget too: read-ahead gets the budget less `directReadReserve`, so that four streams at
// full tilt plus the reads fetched beside them stay within `--readahead-memory`.
//
// Versions. A stream belongs to one handle and so to one rev, downloaded by `rev:` whatever
// Dropbox has at the path meanwhile. Before each download attempt the fetcher asks `isCurrent`
// (whether the handle's node still shows that rev, or is gone); a part of a rev the node no longer
// shows fails with `changedSinceOpen` instead of fetching, and the core drops the whole stream
// when a read finds so. The core gives a new rev of an open file a new node, so this guards an
// invariant; a rev Dropbox no longer has fails the same way.
//
// Failures. A part cut short is resumed from its first missing byte (the client itself resumes a
// body cut mid-transfer; the engine resumes when the client gave up after some progress), so a
// flaky link costs the missing bytes, not the part. A part that cannot be completed fails the
// reads that need it with the upstream error.
//
// With `blockCache` set, completed whole blocks are kept on disk by file id and rev, and a part's
// cached blocks are read from there instead of downloaded (`BlockCache`).
//
// Behind the reader. Each stream remembers where its sequential run began and how far its reads
// have gone, so that the core can tell the kernel to drop the pages a long run has passed
// (`pagesToDrop`, by the policy in `DropBehind`).

import DropboxClient
import Foundation
import Logging
import Synchronization

/// How the engine reads ahead. Part size and window adapt to the measured link (`LinkEstimate`);
/// these are their bounds, and the sizes a fresh mount starts from.
public struct ReadAheadOptions: Sendable, Equatable {
    /// Bytes all open files together may hold in read-ahead buffers.
    public var memoryBudget: UInt64 = 256 << 20
    /// The first window of a new stream.
    public var initialWindow: UInt64 = 1 << 20
    /// The window at a short round trip; a longer one widens it (`LinkEstimate.window`).
    public var maxWindow: UInt64 = 64 << 20
    /// The part size parts grow to at a short round trip.
    public var basePartSize: UInt64 = 8 << 20
    /// The largest single Range request, at a long round trip.
    public var maxPartSize: UInt64 = 32 << 20
    /// Which pages a long sequential read has passed the kernel is told to drop; nil keeps them
    /// all (`--keep-page-cache`, `--direct-io`).
    public var dropBehind: DropBehind? = DropBehind()
    /// Parts one stream keeps transferring at once; more are in flight while they wait for their
    /// first byte.
    public var partsTransferring = 4
    /// Threads fetching parts: the most read-ahead requests in flight over all streams. The
    /// budget bounds them first (240 MiB of read-ahead in 8 MiB parts is 30).
    public var connections: Int = 32
    /// Where whole blocks are kept on disk between reads and mounts; nil keeps none.
    public var blockCacheDirectory: String?
    /// The most bytes the block cache keeps; least recently used blocks go first.
    public var blockCacheBytes: UInt64 = 1 << 30

    public init(memoryBudget: UInt64 = 256 << 20, blockCacheDirectory: String? = nil, blockCacheBytes: UInt64 = 1 << 30) {
        self.memoryBudget = memoryBudget
        self.blockCacheDirectory = blockCacheDirectory
        self.blockCacheBytes = blockCacheBytes
    }
}

/// The one rev of one file a handle reads.
struct ReadFile: Sendable {
    var id: String
    var rev: String
    var size: UInt64
    var path: String { "rev:\(rev)" }
}

/// Read-ahead state of one open handle.
final class ReadStream: Sendable {
    let file: ReadFile
    /// Whether `file.rev` is still the file's current rev (asked before each download).
    let isCurrent: @Sendable () -> Bool
    let state: Mutex<StreamState>
    /// Bytes that arrived in the stream's parts, downloaded or from the block cache (`StreamPace`).
    let arrived = Atomic<UInt64>(0)
    /// The count of `arrived` at which the stream's fetchers should top its bytes in flight up
    /// again (`ReadEngine.refill`); never while it is `.max`.
    let refillAt = Atomic<UInt64>(.max)

    init(file: ReadFile, pace: StreamPace = StreamPace(), isCurrent: @escaping @Sendable () -> Bool) {
        self.file = file
        self.isCurrent = isCurrent
        state = Mutex(StreamState(pace: pace))
    }

    /// Counts bytes that arrived; true when the stream is due a refill.
    func countArrived(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return false }
        let total = arrived.add(UInt64(bytes), ordering: .relaxed).newValue
        return total >= refillAt.load(ordering: .relaxed)
    }
}

struct StreamState {
    /// Contiguous, in file order.
    var parts: [Part] = []
    var window: UInt64 = 0
    var nextPartSize: UInt64 = 0
    var lastReadEnd: UInt64?
    var furthest: UInt64 = 0
    /// Where the current sequential run began, and up to where the pages it passed were dropped
    /// from the kernel's page cache (`DropBehind`).
    var runStart: UInt64 = 0
    var dropped: UInt64 = 0
    /// The bytes the run's reads asked for, added up: a sequential reader's come to about
    /// `furthest - runStart`, a random one's to far less.
    var readInRun: UInt64 = 0
    /// The bytes read since the run began or last jumped ahead (more than `readAheadReach` past
    /// everything it had asked for), which decide when its window opens (`streamingRun`).
    var readSinceJump: UInt64 = 0
    /// Where the stream ended when the reader had read all of it: a read starting there continues
    /// the stream rather than starting a new one (nil once dropped).
    var drainedAt: UInt64?
    /// Reads in a row that fell outside the stream.
    var misses = 0
    /// Counted among the budget's streams (while it holds parts).
    var counted = false
    var closed = false
    /// How fast its bytes have been arriving; bounds the window on a slow link. Kept when the
    /// stream restarts after a seek: the link is the same.
    var pace: StreamPace

    /// Bytes its parts still wait for (a refill keeps these above two round trips of its rate).
    var bytesToArrive: UInt64 { parts.reduce(0) { $0 + $1.bytesToArrive } }
}

final class ReadEngine: Sendable {
    let api: any DropboxAPI
    let options: ReadAheadOptions
    let budget: ReadBudget
    let workers: WorkerPool
    let cache: BlockCache?
    let logger: Logger
    /// How far behind a stream a late read may land and still leave the stream alone, and how far
    /// past it a read may land and still extend it (a small forward seek; mountpoint-s3 waits
    /// 16 MiB too). The kernel sends one sequential reader's reads from several threads, up to its
    /// own read-ahead (`read_ahead_kb`) apart and not in order; a tighter bound would take those
    /// for seeks and restart the stream, downloading the same bytes again.
    static let straggle: UInt64 = 16 << 20
    /// What a run of reads must have asked for before its window grows, and opens to the round
    /// trip's worth (`plan`): more than the kernel's read-ahead sends for a program that reads a
    /// file's first few hundred KiB and seeks on (a video thumbnailer, a media scanner, `file`):
    /// 128 KiB, then 512 KiB and 1 MiB ahead of it. Opened at its second read, such a run had
    /// tens of MiB fetched for each file looked at (measured: 112 MB downloaded for the 370 KB
    /// that ffmpegthumbnailer reads of a 112 MB video, at 50 ms per request). A sequential reader
    /// crosses it by its second read of 1 MiB, or the kernel's fourth, sent as soon as the first
    /// part's bytes are in: no round trip later than before.
    static let streamingRun: UInt64 = 2 << 20
    /// How far the kernel reads ahead of a reader (`read_ahead_kb`, which the mount raises to
    /// 4 MiB): a read further past everything its stream had asked for jumped.
    static let readAheadReach: UInt64 = 4 << 20
    /// Reads are fetched in whole pages.
    static let page: UInt64 = 4096
    /// The part of the memory budget left to reads fetched on their own: an eighth, at most
    /// 16 MiB (`directReadsAtOnce` with a 1 MiB read each).
    static func directReadReserve(of budget: UInt64) -> UInt64 {
        min(budget / 8, 16 << 20)
    }

    /// The link as the engine's downloads measured it, shared by all streams (one link).
    private let link = Mutex(LinkEstimate())

    var linkEstimate: LinkEstimate { link.withLock { $0 } }

    /// The pace the last stream measured: where a new stream's starts, so that a second file on a
    /// slow link is not first requested as if the link were fast.
    private let recentPace = Mutex<StreamPace?>(nil)

    /// Reads fetched on their own (outside read-ahead) and their bytes, for the stats line.
    private let directReads = Mutex((reads: 0, bytes: UInt64(0)))

    var directReadCounts: (reads: Int, bytes: UInt64) { directReads.withLock { $0 } }

    /// Reads fetched on their own that may download at once, each into up to 1 MiB of its own:
    /// with `directReadReserve`, this keeps them inside the one budget however many FUSE requests
    /// run (their threads are not a bound: a stalled download must not hold up the mount).
    static let directReadsAtOnce = 16
    private let directReadSlots = DispatchSemaphore(value: ReadEngine.directReadsAtOnce)

    /// True while Dropbox cannot be reached: what the block cache cannot serve fails at once.
    let linkDown: @Sendable () -> Bool

    /// The last download that timed out, and when: a server that takes connections but does not
    /// answer (hung, or behind a proxy that is) costs a whole `--deadline` per call, and the
    /// kernel reads a page again at once after its read-ahead failed. Within `timeoutEcho` of a
    /// timeout, the same rev's next download fails at once instead of waiting out another.
    private let lastTimeout = Mutex<(rev: String, at: ContinuousClock.Instant, error: DropboxError)?>(nil)
    static let timeoutEcho: Duration = .seconds(2)

    init(api: any DropboxAPI, options: ReadAheadOptions, logger: Logger, linkDown: @escaping @Sendable () -> Bool = { false }) {
        self.api = api
        self.linkDown = linkDown
        self.options = options
        self.logger = logger
        budget = ReadBudget(capacity: options.memoryBudget - Self.directReadReserve(of: options.memoryBudget))
        workers = WorkerPool(name: "dbx-read", limit: options.connections)
        cache = options.blockCacheDirectory.map { BlockCache(directory: $0, capacity: options.blockCacheBytes, logger: logger) }
    }

    func open(_ file: ReadFile, isCurrent: @escaping @Sendable () -> Bool) -> ReadStream {
        ReadStream(file: file, pace: recentPace.withLock { $0?.continuing() } ?? StreamPace(), isCurrent: isCurrent)
    }

    /// The handle is gone: its read-ahead is cancelled and its memory returns to the budget.
    func close(_ stream: ReadStream) {
        stream.state.withLock { s in
            s.closed = true
            drop(&s)
        }
    }

    /// Forgets the stream's read-ahead (its rev was superseded, say) but keeps the handle.
    func drop(_ stream: ReadStream) {
        stream.state.withLock { drop(&$0) }
    }

    private func drop(_ s: inout StreamState) {
        for part in s.parts { part.cancel() }
        s.parts.removeAll()
        s.drainedAt = nil
        count(&s)
    }

    private func count(_ s: inout StreamState) {
        if s.parts.isEmpty, s.counted { budget.streamEnded(); s.counted = false }
        if !s.parts.isEmpty, !s.counted { budget.streamStarted(); s.counted = true }
    }

    /// At unmount: queued read-ahead is forgotten, parts being fetched finish (and reach the block
    /// cache), for at most a few seconds, and schedule no more.
    func shutdown() {
        stopping.store(true, ordering: .relaxed)
        workers.drain(timeout: 5)
    }

    /// Set at unmount: fetchers no longer refill their streams.
    private let stopping = Atomic<Bool>(false)

    // MARK: - Reading

    private struct Plan {
        var needed: [Part] = []
        var scheduled: [(part: Part, urgent: Bool)] = []
    }

    /// Up to `size` bytes at `offset`; fewer only at end of file.
    func read(_ stream: ReadStream, offset: UInt64, size: Int) throws(FSError) -> FileBytes {
        let file = stream.file
        guard offset < file.size, size > 0 else { return .empty }
        let end = min(file.size, offset + UInt64(size))
        // Read under the stream's lock, so that the counts its pace sees never go back.
        let plan = stream.state.withLock {
            self.plan(&$0, stream: stream, offset: offset, end: end, arrived: stream.arrived.load(ordering: .relaxed))
        }
        for (part, urgent) in plan.scheduled { submit(part, of: stream, urgent: urgent) }
        var pieces: [(part: Part, offsets: Range<Int>)] = []
        var cursor = offset
        for part in plan.needed where cursor < end {
            guard part.range.lowerBound <= cursor else { break }
            let want = Int(min(end, part.range.upperBound) - part.range.lowerBound)
            let outcome: Part.Wait
            do {
                outcome = try part.wait(forPrefix: want)
            } catch {
                // A failed part leaves the stream with the rest of it, so the next read tries afresh.
                drop(stream)
                throw error
            }
            guard outcome == .ready else { break }
            pieces.append((part, Int(cursor - part.range.lowerBound)..<want))
            cursor = part.range.lowerBound + UInt64(want)
        }
        if cursor < end {
            // Not in the stream (random, behind it, beyond the budget, or dropped meanwhile).
            let first = cursor / Self.page * Self.page
            let last = min(file.size, (end + Self.page - 1) / Self.page * Self.page)
            let part = Part(range: first..<last)
            directReads.withLock { $0.reads += 1; $0.bytes += last - first }
            // Waited for in slices, so that a reader killed meanwhile is not held here.
            while directReadSlots.wait(timeout: .now() + .milliseconds(250)) == .timedOut {
                if CallCancellation.isCurrentCallCancelled { throw .upstream(.stopped) }
            }
            _ = part.claim()
            fetch(part, of: stream)
            directReadSlots.signal()
            guard try part.wait(forPrefix: Int(end - first)) == .ready else {
                throw .upstream(.malformedResponse("rev \(file.rev): bytes \(first)-\(end) did not arrive"))
            }
            pieces.append((part, Int(cursor - first)..<Int(end - first)))
        }
        settle(stream, served: pieces)
        return FileBytes(pieces: pieces)
    }

    /// Bytes of the stream's file that its reader has passed, for the kernel to drop from its page
    /// cache now (`DropBehind`); nil while none are due. Called after every read: a file too small
    /// to drop anything is answered without taking the stream's lock.
    func pagesToDrop(_ stream: ReadStream) -> Range<UInt64>? {
        guard let policy = options.dropBehind, policy.applies(toFileOf: stream.file.size) else { return nil }
        return stream.state.withLock { s in
            guard !s.closed,
                  let due = policy.due(fileSize: stream.file.size, runStart: s.runStart, dropped: s.dropped,
                                       furthest: s.furthest, read: s.readInRun) else { return nil }
            s.dropped = due.upperBound
            return due
        }
    }

    /// Decides, under the stream's lock, what this read uses and what to fetch.
    private func plan(_ s: inout StreamState, stream: ReadStream, offset: UInt64, end: UInt64, arrived: UInt64) -> Plan {
        let file = stream.file
        guard !s.closed else { return Plan() }
        let link = self.link.withLock { $0 }
        observePace(&s, arrived: arrived, link: link)
        // A reader whose reads are as large as the window and come one at a time reads each part
        // whole before asking for the next: that empties the stream, and must not restart it.
        var inStream = s.parts.isEmpty && s.drainedAt == offset
        if let start = s.parts.first?.range.lowerBound, let scheduledEnd = s.parts.last?.range.upperBound {
            let gap = max(s.window, Self.straggle)
            if offset >= start && offset <= scheduledEnd + gap {
                inStream = true
            } else if offset < start && offset + Self.straggle >= start {
                return Plan()   // a late read just behind the stream: fetch it alone, keep the stream
            }
        }
        let partCeiling = link.partSize(options, budget: budget.capacity)
        let windowCeiling = self.windowCeiling(s, link: link, arrived: arrived)
        let follows = s.lastReadEnd == offset || (s.lastReadEnd == nil && offset == 0)
        if !inStream {
            s.lastReadEnd = end
            if !follows {
                // Fetched alone. One such read may be the kernel's read-ahead overtaking ours (it
                // sends reads from several threads); a second in a row means the reader left.
                s.misses += 1
                if s.misses >= 2, !s.parts.isEmpty {
                    logger.debug("reads left the stream; dropping it", metadata: [
                        "offset": "\(offset)", "stream": "\(s.parts.first!.range.lowerBound)-\(s.parts.last!.range.upperBound)"])
                    drop(&s)
                }
                return Plan()
            }
            drop(&s)
            s.window = options.initialWindow
            s.nextPartSize = min(options.initialWindow, partCeiling)
            s.furthest = end
            s.runStart = offset
            s.dropped = offset
            s.readInRun = 0
            s.readSinceJump = 0
        } else if end > s.furthest {
            // A read past everything the stream had asked for, by more than the kernel reads
            // ahead, jumped (a thumbnailer going from a video's header to a frame 18 MB on): it
            // keeps the stream and its window, but is no sign of streaming, and the bytes it
            // skipped (up to `straggle` of them) are not asked for: the stream's parts start again
            // at the read, no larger than its window. A sequential reader's reads, however the
            // kernel orders them, land within the window the stream had asked for.
            if offset > (s.parts.last?.range.upperBound ?? s.furthest) + Self.readAheadReach {
                drop(&s)
                s.nextPartSize = min(s.window, partCeiling)
                s.readSinceJump = 0
            }
            // Once the run has read `streamingRun` the reader streams: from then on the window
            // doubles at each read, and opens at once to two round trips' worth of bytes, so a
            // long round trip costs the ramp-up one round trip, not one per doubling.
            if s.readSinceJump + (end - offset) >= Self.streamingRun {
                s.window = min(max(s.window * 2, 2 * link.bytesPerRoundTrip), windowCeiling)
            }
            s.furthest = end
        }
        s.misses = 0
        s.lastReadEnd = max(s.lastReadEnd ?? 0, end)
        s.readInRun += end - offset
        s.readSinceJump += end - offset

        // Parts wholly behind the reader (skipped by a forward seek) go once stragglers are unlikely.
        while let first = s.parts.first, first.range.upperBound + Self.straggle <= offset {
            first.cancel()
            s.parts.removeFirst()
        }

        // The stream's share shrinks as more streams hold read-ahead.
        let limit = min(windowCeiling, max(options.initialWindow, budget.share))
        s.window = min(s.window, limit)
        var plan = Plan()
        // The window counts from the read's start: a first small read (a TTFB probe, `file`,
        // a thumbnailer) costs one 1 MiB request, not two.
        let target = min(file.size, max(end, offset + s.window))
        plan.scheduled = extend(&s, file: file, until: target, neededBefore: end, start: offset,
                                heldLimit: limit, partCeiling: partCeiling)
        armRefill(s, stream: stream, arrived: arrived, target: refillTarget(s, link: link, window: s.window))
        count(&s)
        plan.needed = s.parts.filter { $0.range.upperBound > offset && $0.range.lowerBound < end }
        return plan
    }

    /// Appends parts to the stream from where it ends (or `start`) up to `target`, each holding
    /// its buffer from the budget, while the stream holds at most `heldLimit` (parts before
    /// `neededBefore`, which a read waits for, go regardless) and, given `inFlightLimit`, while
    /// fewer bytes than that are still to arrive. Returns the new parts, to be submitted.
    private func extend(_ s: inout StreamState, file: ReadFile, until target: UInt64, neededBefore end: UInt64,
                        start: UInt64, heldLimit: UInt64, inFlightLimit: UInt64? = nil,
                        partCeiling: UInt64) -> [(part: Part, urgent: Bool)] {
        var scheduled: [(part: Part, urgent: Bool)] = []
        var held = s.parts.reduce(UInt64(0)) { $0 + UInt64(ReadBudget.bufferSize(for: $1.length)) }
        var inFlight = inFlightLimit == nil ? 0 : s.bytesToArrive
        var next = s.parts.last?.range.upperBound ?? start
        while next < target {
            let size = min(s.nextPartSize, heldLimit, file.size - next)
            let neededNow = next < end
            let cost = UInt64(ReadBudget.bufferSize(for: Int(size)))
            if !neededNow && held + cost > heldLimit { break }
            if let inFlightLimit, inFlight >= inFlightLimit { break }
            guard let buffer = budget.reserveBuffer(Int(cost)) else { break }
            let part = Part(range: next..<(next + size), buffer: buffer, budget: budget)
            s.parts.append(part)
            scheduled.append((part, neededNow))
            held += cost
            inFlight += size
            next += size
            s.nextPartSize = min(s.nextPartSize * 2, partCeiling)
        }
        return scheduled
    }

    /// Samples the stream's pace (`StreamPace`), and keeps what it measured for the next stream.
    private func observePace(_ s: inout StreamState, arrived: UInt64, link: LinkEstimate) {
        if s.pace.observe(arrived: arrived, downloading: s.parts.contains { !$0.isFinished },
                          parts: Self.partsFilled(s.parts), roundTrip: link.latency, at: .now) {
            let pace = s.pace
            recentPace.withLock { $0 = pace }
        }
    }

    /// The stream's parts not done, and their bytes so far, for its pace.
    private static func partsFilled(_ parts: [Part]) -> StreamPace.PartsFilled {
        var filled: StreamPace.PartsFilled = [:]
        for part in parts where !part.isFinished { filled[part.range.lowerBound] = part.filledCount }
        return filled
    }

    /// The most the stream may read ahead now: the link's window, capped by the stream's pace.
    private func windowCeiling(_ s: StreamState, link: LinkEstimate, arrived: UInt64) -> UInt64 {
        // Before the stream's first sample nothing says how fast the link is, and the kernel's own
        // read-ahead may send a dozen reads at once, each doubling the window: they would put the
        // whole floor on the link before the reader's first part arrived (measured through 30 MB/s
        // at 100 ms: 18 parts at once, the reader's first 10 MiB took 1.2 s). Until then the window
        // grows with what arrives, as TCP's startup does: the first parts' ramp (1 + 2 + 4 + 8 MiB)
        // and twice the bytes arrived, so a fast link reaches its floor within milliseconds.
        let paceMinimum = max(options.basePartSize, options.initialWindow)
        let paceCap = s.pace.windowCap(roundTrip: link.latency, minimum: paceMinimum)
            ?? 2 * paceMinimum + 2 * min(arrived, UInt64.max >> 4)
        return min(link.window(options, budget: budget.capacity), paceCap)
    }

    private func submit(_ part: Part, of stream: ReadStream, urgent: Bool) {
        workers.submit(urgent: urgent) { [self] in
            if part.claim() { fetch(part, of: stream) }
        }
    }

    /// Keeps a stream that waits on the link fed between its reader's reads. The window counts
    /// from the reader, and a reader waiting for the front part cannot read, so scheduling only
    /// at reads put parts on the link in batches: all of a batch got the same share of a shared
    /// link and finished together, and the next batch was asked for only when the reader got its
    /// bytes, a round trip before any of it arrived (traced through a 300 MB/s cap at 50 ms: the
    /// link idle 60-80 ms of every 300). So the fetchers themselves ask for the next part each
    /// time a part's worth has arrived (`refillAt`), keeping two round trips of what arrives in
    /// flight: parts start one by one and finish one by one. Only while the reader waits for a
    /// part still arriving (a reader slower than the link has complete parts ahead of it, and is
    /// served by its reads), and holding at most twice the window.
    private func refill(_ stream: ReadStream) {
        let file = stream.file
        let scheduled = stream.state.withLock { s -> [(part: Part, urgent: Bool)] in
            let arrived = stream.arrived.load(ordering: .relaxed)
            // The reader waits on the link (now, or at its next read) when the first part still
            // arriving starts within what it has asked for.
            guard !s.closed, !stopping.load(ordering: .relaxed), let reader = s.lastReadEnd,
                  let arriving = s.parts.first(where: { !$0.isFinished }), arriving.range.lowerBound <= reader else {
                stream.refillAt.store(.max, ordering: .relaxed)   // the next read arms it again
                return []
            }
            let link = self.link.withLock { $0 }
            observePace(&s, arrived: arrived, link: link)
            let window = min(s.window, windowCeiling(s, link: link, arrived: arrived))
            let heldLimit = min(2 * window, max(options.initialWindow, budget.share))
            let target = refillTarget(s, link: link, window: window)
            let parts = extend(&s, file: file, until: file.size, neededBefore: 0, start: reader,
                               heldLimit: heldLimit, inFlightLimit: target,
                               partCeiling: link.partSize(options, budget: budget.capacity))
            armRefill(s, stream: stream, arrived: arrived, target: target)
            count(&s)
            return parts
        }
        for (part, urgent) in scheduled { submit(part, of: stream, urgent: urgent) }
    }

    /// The bytes a refill keeps in flight: what arrives in two round trips plus a part, enough
    /// to keep the link busy while the next part waits for its first byte, and no more: every
    /// part in flight shares the link with the one the reader waits for. Within the window.
    private func refillTarget(_ s: StreamState, link: LinkEstimate, window: UInt64) -> UInt64 {
        guard let rate = s.pace.rate, let latency = link.latency else { return window }
        let roundTrips = rate * 2 * latency
        guard roundTrips.isFinite, roundTrips < Double(window) else { return window }
        return min(window, UInt64(roundTrips) + s.nextPartSize)
    }

    /// Sets when the stream's fetchers top it up next: once its bytes in flight have fallen a
    /// part below `target` (at least 1 MiB on, so that a stream that cannot grow, its budget
    /// full, asks rarely).
    private func armRefill(_ s: StreamState, stream: ReadStream, arrived: UInt64, target: UInt64) {
        let wait = max(s.bytesToArrive + s.nextPartSize, target + Self.refillStep) - target
        stream.refillAt.store(arrived + wait, ordering: .relaxed)
    }

    /// The fewest bytes between two refills of a stream.
    static let refillStep: UInt64 = 1 << 20

    /// Counts what was served; parts at the front that have been read whole leave the stream.
    private func settle(_ stream: ReadStream, served pieces: [(part: Part, offsets: Range<Int>)]) {
        var anyDone = false
        for (part, offsets) in pieces where part.markServed(offsets.count) { anyDone = true }
        guard anyDone else { return }
        stream.state.withLock { s in
            while let first = s.parts.first, first.isFullyServed {
                s.parts.removeFirst()
                if s.parts.isEmpty { s.drainedAt = first.range.upperBound }
            }
            count(&s)
        }
    }

    // MARK: - Fetching

    /// Fills `part` (claimed by the caller) from the block cache and Dropbox, resuming after
    /// failures that made progress.
    func fetch(_ part: Part, of stream: ReadStream) {
        let file = stream.file
        var stalls = 0
        while true {
            let done = part.filledCount
            let start = part.range.lowerBound + UInt64(done)
            if start >= part.range.upperBound { break }
            if part.isCancelled { return }
            guard stream.isCurrent() else { return part.fail(.changedSinceOpen) }
            if let cache, cache.fill(part, file: file) {
                if stream.countArrived(part.filledCount - done) { refill(stream) }
                continue
            }
            if linkDown() { return part.fail(.upstream(Reachability.offline)) }
            if let timedOut = lastTimeout.withLock({ $0 }), timedOut.rev == file.rev,
               ContinuousClock.now - timedOut.at < Self.timeoutEcho {
                return part.fail(FSError(timedOut.error))
            }
            let end = cache?.nextCachedOffset(after: start, before: part.range.upperBound, file: file) ?? part.range.upperBound
            do throws(DropboxError) {
                let sent = ContinuousClock.now
                var firstByte: ContinuousClock.Instant?
                let got = try CallCancellation.obeying(part.downloads) { () throws(DropboxError) -> UInt64 in
                    try api.download(path: file.path, range: start..<end) { chunk in
                        if firstByte == nil { firstByte = .now }
                        guard part.append(chunk) else { return false }
                        if stream.countArrived(chunk.count) { refill(stream) }
                        return true
                    }
                }
                if let firstByte, start + got == end {
                    let finished = ContinuousClock.now
                    link.withLock { $0.record(firstByte: (firstByte - sent).seconds, bytes: Int(got),
                                              transfer: (finished - firstByte).seconds) }
                }
                // A part cancelled after its last byte arrived (its file was closed at once) is
                // still complete, and still worth keeping in the block cache.
                if part.isCancelled && part.filledCount < part.length { return }
                if start + got < end {
                    // Not logged here: the reader that waits for these bytes gets this error, and
                    // its operation's boundary logs it (FailureReport.swift).
                    return part.fail(.upstream(.malformedResponse("rev \(file.rev) ended at byte \(start + got) of \(file.size)")))
                }
                stalls = 0
            } catch {
                if part.isCancelled { return }
                stalls = part.filledCount > done ? 0 : stalls + 1
                if error.isTimeout { lastTimeout.withLock { $0 = (file.rev, .now, error) } }
                // A call that made no progress is made once more (its own retries may all have
                // met a flaky moment), but not after a timeout: that call waited its whole deadline.
                guard error.isTransient, stalls < 2, !error.isTimeout || part.filledCount > done else {
                    // Dropbox no longer has the rev (its version history ended, or a deleted
                    // file's last rev went; until then a handle reads on by rev): ESTALE, not ENOENT.
                    if error.isRoute("path", "not_found") { return part.fail(.changedSinceOpen) }
                    return part.fail(error.isRoute("path") ? .upstream(error) : FSError(error))
                }
                logger.debug("resuming a part", metadata: ["rev": "\(file.rev)", "at": "\(part.range.lowerBound + UInt64(part.filledCount))"])
            }
        }
        // Stored before the part counts as finished: readers never wait for this (they wait for
        // bytes), but an unmount that drains the workers then keeps every block that arrived.
        cache?.store(part, file: file)
        part.finish()
    }
}

extension Duration {
    var seconds: Double {
        let (whole, fraction) = components
        return Double(whole) + Double(fraction) * 1e-18
    }
}

extension DropboxError {
    /// Failures that may pass: the link, the server, a rate limit.
    var isTransient: Bool {
        switch self {
        case .transport, .server, .rateLimited: true
        default: false
        }
    }

    /// The call waited out its time (curl's OPERATION_TIMEDOUT) on a connection that was made.
    var isTimeout: Bool {
        if case .transport(28, _) = self { return true }
        return false
    }
}
