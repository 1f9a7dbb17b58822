// Dropbox's thumbnails of the images in a folder, put where file managers look before they read a
// file. Nautilus asks GIO for each file's thumbnail right after reading the folder, and reads the
// whole image to make one if there is none, so the thumbnails must be in place by the time the
// listing is answered: opening a folder waits (a bounded time) while the missing ones are fetched,
// 25 images per `get_thumbnail_batch` call and flavor, a few calls at once on a small pool of
// threads that shares the client's pacer and retries. Opening it again costs nothing.
//
// Never stale, never wasteful:
// - what is current is remembered by path and rev, so a renamed or rewritten file is fetched again;
//   the change feed refreshes a file whose thumbnails were written once it has a new rev;
// - what Dropbox cannot thumbnail (not an image, over 20 MB, `unsupported_image`) is remembered by
//   id and rev and never asked again for that rev; files that are not images by name are never
//   asked at all;
// - a cache directory that cannot be written turns thumbnails off for the mount, with one line; a
//   full disk pauses them for a few minutes, also with one line.

import DropboxClient
import Foundation
import Logging
import Synchronization

/// How thumbnails are fetched.
public struct ThumbnailOptions: Sendable, Equatable {
    /// The cache sizes written for every image (all of them: GIO reports the largest it finds, so
    /// a stale larger one would hide a fresh smaller one).
    public var flavors: [ThumbnailFlavor] = ThumbnailFlavor.allCases
    /// `get_thumbnail_batch` calls in flight at once.
    public var concurrentCalls = 6
    /// How long opening a folder waits for its thumbnails before answering anyway.
    public var folderWait: Duration = .seconds(10)

    public init() {}
}

final class Thumbnailer: Sendable {
    private let api: any DropboxAPI
    private let store: any ThumbnailStore
    private let options: ThumbnailOptions
    private let logger: Logger
    private let workers: WorkerPool
    private let now: MonotonicSeconds

    /// Seconds nothing is fetched after the disk was found full: long enough not to spend a call
    /// per folder on thumbnails that cannot be kept, short enough that a disk cleared again gets
    /// them back before a file manager has read many photos.
    static let fullDiskPause: Double = 300

    private struct Key: Hashable {
        var path: String
        var rev: String
        init(_ target: ThumbnailTarget) { path = target.relativePath; rev = target.rev }
    }

    private struct State {
        /// By path, the rev whose every flavor is in the store, as written or checked. One entry
        /// per path, whatever its revs: the change feed refreshes these paths when their rev changes.
        var thumbnailedRev: [String: String] = [:]
        /// By file id, the rev Dropbox cannot thumbnail (one per file, not one per rev ever seen).
        var unthumbnailableRev: [String: String] = [:]
        /// Targets being fetched, and the round fetching them.
        var inFlight: [Key: Round] = [:]
        /// The store cannot be written: nothing more is fetched.
        var disabled = false
        /// The store's disk was full: nothing is fetched before this time (`now()` seconds, which
        /// may start a hair below zero).
        var pausedUntil = -Double.infinity

        func isIdle(at time: Double) -> Bool { disabled || time < pausedUntil }

        func isCurrent(_ target: ThumbnailTarget) -> Bool { thumbnailedRev[target.relativePath] == target.rev }

        func cannotBeThumbnailed(_ target: ThumbnailTarget) -> Bool { unthumbnailableRev[target.id] == target.rev }
    }

    private let state = Mutex(State())

    init(api: any DropboxAPI, store: any ThumbnailStore, options: ThumbnailOptions, logger: Logger,
         now: @escaping MonotonicSeconds = SystemClock.monotonic) {
        self.api = api
        self.store = store
        self.options = options
        self.logger = logger
        self.now = now
        workers = WorkerPool(name: "dbx-thumbnails", limit: options.concurrentCalls)
    }

    /// How many paths and files the thumbnailer remembers (tests: one each, however many revs).
    var remembered: (thumbnailed: Int, unthumbnailable: Int) {
        state.withLock { ($0.thumbnailedRev.count, $0.unthumbnailableRev.count) }
    }

    /// Makes sure `targets` have current thumbnails, waiting up to `folderWait` for the ones that
    /// must be fetched (or for other callers' fetches of the same ones).
    func prepare(_ targets: [ThumbnailTarget]) {
        guard let round = start(targets, urgent: true) else { return }
        round.wait(for: options.folderWait)
    }

    /// New revs of files that had thumbnails: fetched in the background, nobody waits.
    func refresh(_ targets: [ThumbnailTarget]) {
        let known = state.withLock { s in targets.filter { s.thumbnailedRev[$0.relativePath] != nil } }
        _ = start(known, urgent: false)
    }

    /// Starts fetching what `targets` lack; returns what to wait for (nil: nothing).
    private func start(_ targets: [ThumbnailTarget], urgent: Bool) -> Round? {
        guard !targets.isEmpty else { return nil }
        var others: [Round] = []
        var written: [ThumbnailTarget] = []
        let time = now()
        let unknown = state.withLock { s -> [ThumbnailTarget] in
            guard !s.isIdle(at: time) else { return [] }
            return targets.filter { target in
                let key = Key(target)
                if s.cannotBeThumbnailed(target) { return false }
                if s.isCurrent(target) {
                    if urgent { written.append(target) }
                    return false
                }
                if let round = s.inFlight[key] { others.append(round); return false }
                return true
            }
        }
        // Entries this mount wrote may have been removed since (the cache cleared by hand or by a
        // housekeeping tool): a folder opened again would then have the file manager read every
        // image. Whether the files are still there is the cheap check; gone ones are fetched again.
        let removed = written.filter { !store.isPresent($0, flavors: options.flavors) }
        if !removed.isEmpty {
            state.withLock { s in
                for target in removed where s.isCurrent(target) { s.thumbnailedRev[target.relativePath] = nil }
            }
        }
        // A thumbnail another run of the mount (or the file manager) left is as good as a new one.
        let missing = (unknown + removed).filter { target in
            guard store.hasCurrent(target, flavors: options.flavors) else { return true }
            state.withLock { $0.thumbnailedRev[target.relativePath] = target.rev }
            return false
        }
        let round = Round(waitingOn: others)
        let claimed = state.withLock { s -> [ThumbnailTarget] in
            missing.filter { target in
                let key = Key(target)
                // Another caller claimed it while the store was checked: wait for that one too.
                if let other = s.inFlight[key] { round.alsoWait(for: other); return false }
                s.inFlight[key] = round
                return true
            }
        }
        guard !claimed.isEmpty else { return round.waitsOnOthers ? round : nil }
        let flavors = options.flavors
        var jobs: [(ArraySlice<ThumbnailTarget>, ThumbnailFlavor)] = []
        for flavor in flavors {
            for start in stride(from: 0, to: claimed.count, by: maxThumbnailBatch) {
                jobs.append((claimed[start..<min(start + maxThumbnailBatch, claimed.count)], flavor))
            }
        }
        round.expect(jobs: jobs.count, targets: claimed, flavors: flavors.count) { [self] saved in
            state.withLock { s in
                for target in claimed {
                    let key = Key(target)
                    if s.inFlight[key] === round { s.inFlight[key] = nil }
                    if saved.contains(key) { s.thumbnailedRev[target.relativePath] = target.rev }
                }
            }
        }
        for (chunk, flavor) in jobs {
            let batch = Array(chunk)
            workers.submit(urgent: urgent) { [self] in
                fetch(batch, flavor: flavor, into: round)
            }
        }
        return round
    }

    /// One `get_thumbnail_batch` call for one flavor, saved to the store.
    private func fetch(_ batch: [ThumbnailTarget], flavor: ThumbnailFlavor, into round: Round) {
        defer { round.jobFinished() }
        let time = now()
        if state.withLock({ $0.isIdle(at: time) }) { return }
        let (size, mode) = flavor.request
        // Pinned to the rev the folder showed: a thumbnail is never of newer content than its mtime.
        let requests = batch.map { ThumbnailRequest(path: "rev:" + $0.rev, format: .png, size: size, mode: mode) }
        let outcomes: [ThumbnailOutcome]
        do throws(DropboxError) {
            outcomes = try api.thumbnails(requests)
        } catch {
            // The client has logged the failed call; these files are asked again next time.
            logger.debug("thumbnails not fetched", metadata: ["files": "\(batch.count)", "error": "\(error)"])
            return
        }
        for (target, outcome) in zip(batch, outcomes) {
            switch outcome {
            case .image(let png):
                do throws(ThumbnailStoreError) {
                    try store.save(png, flavor: flavor, for: target)
                    round.saved(Key(target))
                } catch {
                    handle(error, target: target)
                }
            case .failed(let tags):
                logger.debug("Dropbox has no thumbnail", metadata: [
                    "path": "\(target.relativePath)", "error": "\(tags.joined(separator: "/"))"])
                // Any answer about the file itself stands for this rev; only the call's failure
                // (thrown above) is worth another try.
                state.withLock { $0.unthumbnailableRev[target.id] = target.rev }
            }
        }
    }

    private func handle(_ error: ThumbnailStoreError, target: ThumbnailTarget) {
        switch error {
        case .unwritable(let why):
            let first = state.withLock { s -> Bool in
                defer { s.disabled = true }
                return !s.disabled
            }
            if first {
                logger.warning("cannot write thumbnails; thumbnails are off for this mount", metadata: ["error": "\(why)"])
            }
        case .full(let why):
            let time = now()
            let first = state.withLock { s -> Bool in
                defer { s.pausedUntil = max(s.pausedUntil, time + Self.fullDiskPause) }
                return time >= s.pausedUntil
            }
            if first {
                logger.warning("the thumbnail cache's disk is full; thumbnails paused for 5 minutes",
                               metadata: ["error": "\(why)"])
            }
        case .entry(let why):
            logger.debug("thumbnail not saved", metadata: ["path": "\(target.relativePath)", "error": "\(why)"])
        }
    }

    /// The fetches started for one set of targets, and whoever waits for them.
    private final class Round: @unchecked Sendable {
        // `@unchecked Sendable`: every var is touched only under `condition`'s lock.
        private let condition = NSCondition()
        private var pendingJobs = 0
        private var savedFlavors: [Key: Int] = [:]
        private var flavorCount = 0
        private var others: [Round]
        private var onComplete: ((Set<Key>) -> Void)?
        private var complete = true

        init(waitingOn others: [Round]) { self.others = others }

        func alsoWait(for other: Round) {
            condition.withLock { others.append(other) }
        }

        var waitsOnOthers: Bool { condition.withLock { !others.isEmpty } }

        func expect(jobs: Int, targets: [ThumbnailTarget], flavors: Int, onComplete: @escaping (Set<Key>) -> Void) {
            condition.withLock {
                pendingJobs = jobs
                flavorCount = flavors
                complete = jobs == 0
                self.onComplete = onComplete
            }
        }

        func saved(_ key: Key) {
            condition.withLock { savedFlavors[key, default: 0] += 1 }
        }

        func jobFinished() {
            let finished = condition.withLock { () -> (Set<Key>, (Set<Key>) -> Void)? in
                pendingJobs -= 1
                guard pendingJobs == 0, let onComplete else { return nil }
                self.onComplete = nil
                return (Set(savedFlavors.filter { $0.value >= flavorCount }.keys), onComplete)
            }
            guard let (saved, onComplete) = finished else { return }
            onComplete(saved)
            condition.withLock {
                complete = true
                condition.broadcast()
            }
        }

        /// Waits until this round and those it waits on are done, or `duration` has passed.
        /// A worklist, not recursion: rounds that overlap one another form chains (each waits on
        /// rounds that claimed before it), whose length only the overlap bounds, and a round
        /// reached along two of them is waited for once.
        func wait(for duration: Duration) {
            let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
            let deadline = Date().addingTimeInterval(seconds)
            var pending: [Round] = [self]
            var visited: Set<ObjectIdentifier> = []
            while let round = pending.popLast() {
                guard visited.insert(ObjectIdentifier(round)).inserted else { continue }
                pending += round.waitForOwnJobs(until: deadline)
            }
        }

        /// Waits for this round's own fetches; returns the rounds it waits on besides.
        private func waitForOwnJobs(until deadline: Date) -> [Round] {
            condition.withLock { () -> [Round] in
                while !complete && condition.wait(until: deadline) {}
                return others
            }
        }
    }
}
