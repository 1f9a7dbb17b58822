// Keeps the tree in step with Dropbox on one background thread, started from FUSE's `init` (after
// any daemonizing fork):
//
// 1. A tree saved by an earlier mount is loaded and caught up with `continue` from its cursor;
//    otherwise the mounted folder is listed whole (`fill`): the feed's cursor first, then subtree
//    listings in parallel on the listing pool. Folders become complete when the fill ends; until
//    then each folder a user opens is listed on its own (DropboxFilesystem.ensureFreshListing).
// 2. Then `longpoll` on the cursor, and `continue` when it reports changes, applying file, folder and
//    deleted entries in place and telling the kernel what to forget. `backoff` is honoured.
// 3. `reset` starts again from a fresh recursive listing; what it no longer shows is removed.
// 4. Any other failure marks the feed down (TTL rules apply again) and retries with backoff; a
//    fill that failed part way is retried as a replacing one.

import DropboxClient
import Foundation
import Synchronization

extension DropboxFilesystem {
    /// Loads the saved tree, if any, and starts the sync thread and the pins' thread; a mount that
    /// follows no changes (`FilesystemOptions.followsChanges`, a shared link) starts only the pins'.
    public func startChangeFeed(longpollTimeout: Int = 30) {
        // The saved tree first: pins protect the files it names from the first pass on, where a
        // pass over an empty tree would leave pinned blocks to be evicted by the first reads.
        if options.followsChanges { loadPersistedTree() }
        startPinning()
        guard options.followsChanges else { return }
        let thread = Thread { [self] in syncLoop(longpollTimeout: longpollTimeout) }
        thread.name = "dbx-sync"
        thread.start()
    }

    /// Asks the sync thread to stop after its current call.
    public func stopChangeFeed() {
        stopped.store(true, ordering: .relaxed)
    }

    /// True once the tree holds the whole mounted folder and the feed is following changes.
    public var isFeedLive: Bool { state.withLock { $0.feed.live } }

    private func syncLoop(longpollTimeout: Int) {
        var failures = 0
        var resetting = false
        var lastSaved = now()
        var saveInterval = Self.shortestSaveInterval
        // The next turn lists the mounted folder afresh, replacing what the tree holds.
        func forgetCursor() {
            state.withLock { $0.feed.cursor = nil; $0.feed.catchingUp = false }
            store?.clear()
            resetting = true
        }
        while !stopped.load(ordering: .relaxed) {
            do throws(DropboxError) {
                let (cursor, catchingUp) = state.withLock { ($0.feed.cursor, $0.feed.catchingUp) }
                if let cursor {
                    if catchingUp {
                        try drain(from: cursor)
                    } else {
                        let result = try api.longpoll(cursor: cursor, timeout: longpollTimeout)
                        setFeed(live: true)
                        if result.changes { try drain(from: cursor) }
                        if let backoff = result.backoff, backoff > 0 { pause(seconds: Double(backoff)) }
                    }
                } else {
                    // A fill that failed part way left entries in the tree that may be gone by
                    // now, and the next fill's cursor will not report them: it must replace.
                    let replacing = resetting
                    resetting = true
                    try fill(replacing: replacing)
                    resetting = false
                    // The listing's decoded pages are garbage now: the mount may trim the heap.
                    bulkWorkDone()
                    // Saved 5 s later (or at unmount), not at once: writing the whole tree competes
                    // for the CPU with whatever the user started on the fresh mount, and `find`
                    // right after mounting paid for it. Not at the feed's next turn either, which
                    // waits out a longpoll (30 s, and up to 90 s more on Dropbox): a mount killed
                    // meanwhile would lose a listing that may have taken minutes.
                    saveSoon(after: Self.firstSaveDelay)
                    lastSaved = now()
                }
                failures = 0
                reachability.update(after: nil)
                if now() - lastSaved > saveInterval {
                    let started = ContinuousClock.now
                    let saved = BackgroundPriority.onALoweredThread { [self] in persistUnlessASaveIsUnderWay() }
                    lastSaved = now()
                    if saved {
                        bulkWorkDone()
                        saveInterval = Self.saveInterval(afterASaveTaking: (ContinuousClock.now - started) / .seconds(1))
                    }
                }
            } catch {
                if error == .stopped { return }   // the mount is stopping: not a feed outage
                if error.isRoute("reset") {
                    logger.warning("change feed cursor was reset; listing the mounted folder again")
                    // Not live until the new listing is done: the tree may miss changes until then,
                    // so the TTL rules apply, and `status` does not say "live" for minutes.
                    setFeed(live: false)
                    forgetCursor()
                    continue
                }
                if error.isRoute("path", "not_found") || error.isRoute("path", "not_folder") {
                    // `continue` (or the listing) cannot find the mounted folder: it was deleted,
                    // moved, or replaced by a file. (A subfolder's listing answers these itself, in
                    // `listAndApply`.) Its contents are gone from Dropbox, so the mount shows it
                    // empty, not its old tree for good; and the cursor is dropped, so the folder is
                    // listed afresh (with backoff, below) until it is back.
                    if failures == 0 {
                        logger.warning("the mounted folder is gone from Dropbox; showing it empty until it is back",
                                       metadata: ["error": "\(error)"])
                    }
                    forgetCursor()
                    emptyMountedFolder()
                }
                failures += 1
                // The Dropbox client has logged the failed call; that the feed is down is news once.
                logger.log(level: failures == 1 ? .notice : .debug, "change feed is down; retrying with backoff",
                           metadata: ["error": "\(error)", "failures": "\(failures)"])
                reachability.update(after: error)
                setFeed(live: false)
                state.withLock {
                    $0.feed.catchingUp = false
                    if $0.feed.downSince == nil { $0.feed.downSince = now() }
                    $0.feed.lastError = "\(error)"
                }
                signalFeedChanged()
                // Unreachable costs nothing to ask again (the connection is refused at once), and
                // the sooner the feed finds Dropbox back, the sooner the mount is online again.
                pause(seconds: min(error.isUnreachable ? 4 : 60, Double(1 << min(failures, 6))))
            }
        }
    }

    /// One listing of the whole mounted folder into the tree. With `replacing`, what it does not
    /// show any more is removed (after a `reset`).
    ///
    /// Split into subtrees listed in parallel (`listingConcurrency` at once), because a recursive
    /// listing is a chain of pages, each a round trip after the last. The change feed's cursor is
    /// taken first (`get_latest_cursor`), and the feed replays every change after it once the
    /// listing is done. That is why no entry is lost or resurrected whatever changes meanwhile:
    /// each subtree shows its entries as they were at some moment after the cursor, and every
    /// change after the cursor (a deletion, a rename as delete and add, a folder replaced by a
    /// file) is applied again, in order, on top; applying an entry twice changes nothing. A
    /// reader's listing of a folder from before the cursor is the one thing that could keep an
    /// entry deleted meanwhile (the pages only add and update, and the feed starts after the
    /// deletion), so such a folder is listed again when the fill ends (`listAgainAfterFill`); so is
    /// the mounted folder, whose own listing runs beside `get_latest_cursor`. A top folder made or
    /// deleted between that listing and the cursor is therefore found then (an added one is listed
    /// when first opened; a deleted one's subtree listing finds nothing). Subtrees never overlap:
    /// the mounted folder's own children are listed on their own, then each subfolder's subtree once.
    private func fill(replacing: Bool) throws(DropboxError) {
        let startedAt = now()
        state.withLock {
            $0.feed.listedByReadersDuringFill = [:]
            $0.feed.foldersOpenedDuringFill = []
            $0.feed.fill = FillProgress(startedAt: startedAt)
        }
        defer { invalidateFoldersListedByReaders() }
        let concurrency = options.listingConcurrency
        // Listings that started from here on show everything the feed will not bring.
        var coveredFrom = startedAt
        var touched: Set<Slot>? = replacing ? [] : nil
        let cursor: String
        var listRootAgain = false
        if concurrency <= 1 {
            var update = TreeUpdate(rootPath: options.rootPath, logger: logger, collectTouched: replacing, showExports: options.showExports)
            let pages = ListingPages(api, path: options.rootPath, recursive: true, limit: 2000)
            defer { pages.stop() }
            var last: String?
            while let page = try pages.next() {
                applyBatch(page.entries, update: &update, notify: replacing)
                last = page.cursor
                if stopped.load(ordering: .relaxed) { return }
            }
            guard let last else { return }   // stopped before the first page
            touched = update.touched
            cursor = last
        } else {
            // The cursor and the mounted folder's own entries at once, one round trip sooner for
            // whoever waits for the top folder (`ls -l` of a large folder right after mounting).
            // That listing may be from before the cursor, so the mounted folder is listed again
            // when the fill ends, as a reader's early listing is. The subtrees start after the cursor.
            let cursorCall = Shared<Result<String, DropboxError>?>(nil)
            let cursorTaken = DispatchSemaphore(value: 0)
            let api = self.api, rootPath = options.rootPath
            Thread.detachNewThread {
                let result: Result<String, DropboxError>
                do throws(DropboxError) {
                    result = .success(try api.latestCursor(path: rootPath, recursive: true))
                } catch {
                    result = .failure(error)
                }
                cursorCall.value.withLock { $0 = result }
                cursorTaken.signal()
            }
            let collected = Shared<Set<Slot>>([])
            let topListing: Result<[String], DropboxError>
            do throws(DropboxError) {
                topListing = .success(try listAndApply(options.rootPath, recursive: false, replacing: replacing, into: collected))
            } catch {
                topListing = .failure(error)
            }
            cursorTaken.wait()
            cursor = try cursorCall.value.withLock { $0! }.get()
            let top = try topListing.get()
            listRootAgain = true
            // Listings that start from here on show everything the feed will not bring.
            coveredFrom = now()
            let jobs = ListingJobs { [self] in !stopped.load(ordering: .relaxed) }
            split(top, breadth: 1, depth: 1, replacing: replacing, collected: collected, jobs: jobs,
                  readersCountSince: coveredFrom)
            try jobs.wait()
            if stopped.load(ordering: .relaxed) { return }
            if replacing { touched = collected.value.withLock { $0 } }
        }
        let (invalidations, listedEarly) = state.withLock { state -> ([KernelInvalidation], [Slot]) in
            var gone: [KernelInvalidation] = []
            // A folder a reader listed before the cursor may still show an entry deleted
            // meanwhile: it is listed again below.
            let listedEarly = (state.feed.listedByReadersDuringFill ?? [:]).filter { $0.value < coveredFrom }.map(\.key)
            if let touched {
                var vanished: [Slot] = []
                state.tree.walk { slot in if !touched.contains(slot) { vanished.append(slot) } }
                for slot in vanished where state.tree.isAlive(slot) {
                    gone.append(.removed(parent: state.tree.parent(slot).inode, name: state.tree.name(slot), node: slot.inode))
                    gone.append(.inode(state.tree.parent(slot).inode))
                    state.tree.remove(slot)
                }
            }
            gone.append(contentsOf: state.tree.settleFolderTimes().map { .inode($0.inode) })
            // Listed no earlier than the cursor was taken; the feed brings everything after it.
            state.tree.markAllFoldersComplete(at: concurrency <= 1 ? now() : startedAt)

            state.feed.cursor = cursor
            state.feed.unsaved = true
            state.feed.live = true
            state.feed.lastContact = now()
            state.feed.fill?.endedAt = now()
            state.feed.downSince = nil
            state.feed.lastError = nil
            return (gone, listedEarly)
        }
        invalidate(invalidations)
        for folder in listedEarly { listAgainAfterFill(folder) }
        if listRootAgain, !listedEarly.contains(.root) { listAgainAfterFill(.root) }
        signalFeedChanged()
        logger.info("listed the mounted folder", metadata: ["entries": "\(cacheFootprint.entries)"])
    }

    /// The display paths of the subfolders of `path`, if a reader listed it whole at `since` or later;
    /// nil if the first listing must list it.
    private func subfoldersListedByAReader(_ path: String, since: Double, replacing: Bool,
                                           into touched: Shared<Set<Slot>>) -> [String]? {
        let found = state.withLock { state -> (subfolders: [String], children: [Slot])? in
            let tree = state.tree
            guard let folder = tree.slot(atPath: path, below: options.rootPath), tree.isDirectory(folder),
                  tree.isComplete(folder), tree.listedAt(folder) >= since else { return nil }
            let children = tree.children(of: folder)
            let subfolders = children.filter { tree.isDirectory($0) }.map {
                options.rootPath + tree.components($0).map { "/" + $0 }.joined()
            }
            return (subfolders, children)
        }
        guard let found else { return nil }
        if replacing { touched.value.withLock { $0.formUnion(found.children) } }
        return found.subfolders
    }

    /// A subtree listing's pause, before each page, while a reader waits for one folder's own
    /// listing or reads a folder it waited for (`FeedStatus.fillMakesWay`), at most
    /// `fillWaitLimit`: on two cores, eight subtree listings otherwise doubled the time of `ls -l`
    /// of a 10,000-file folder right after mounting. A reader waiting for a subtree pauses
    /// nothing: that is `find` walking behind the fill, which needs all of it.
    private func yieldToReadersWaitingForAFolder() {
        guard state.withLock({ $0.feed.fillMakesWay(now: now()) }) else { return }
        let deadline = Date().addingTimeInterval(fillWaitLimit)
        feedChanged.lock()
        while state.withLock({ $0.feed.fillMakesWay(now: now()) }) && Date() < deadline && !stopped.load(ordering: .relaxed) {
            // A reader's hold ends by itself too: look again every 50 ms.
            _ = feedChanged.wait(until: min(deadline, Date().addingTimeInterval(0.05)))
        }
        feedChanged.unlock()
    }

    /// Ends a fill (done or failed): the kernel drops its copies of the folders readers listed
    /// during it (`FeedStatus.listedByReadersDuringFill`). This is what lets the kernel keep every
    /// folder's listing across opens (the adapter's opendir): every other change to the tree that
    /// a listing could show reaches the kernel as an invalidation (the feed's batches, a listing
    /// again after the TTL, a replacing fill); only a first listing's pages do not.
    private func invalidateFoldersListedByReaders() {
        let folders = state.withLock { state -> [Slot] in
            let listed = state.feed.listedByReadersDuringFill ?? [:]
            state.feed.listedByReadersDuringFill = nil
            state.feed.foldersOpenedDuringFill = nil
            return listed.keys.filter { state.tree.isAlive($0) }
        }
        invalidate(folders.map { .inode($0.inode) })
    }

    /// Lists `path` (all its pages) into the tree; returns the display paths of the subfolders
    /// it holds directly, for a non-recursive listing.
    private func listAndApply(_ path: String, recursive: Bool, replacing: Bool,
                              into touched: Shared<Set<Slot>>) throws(DropboxError) -> [String] {
        // Touched slots are kept for a subtree in any case: its folders are complete once it is.
        let listedAt = now()
        var update = TreeUpdate(rootPath: options.rootPath, logger: logger, collectTouched: replacing || recursive,
                                showExports: options.showExports)
        var subfolders: [String] = []
        let call = (lowerPath: path.lowercased(), recursive: recursive)
        state.withLock {
            $0.feed.listingsInFlight.append(call)
            $0.feed.fill?.listingsStarted += 1
        }
        defer {
            state.withLock {
                $0.feed.listingsInFlight.removeAll { $0 == call }
                $0.feed.fill?.listingsDone += 1
            }
            signalFeedChanged()   // readers waiting for this call (waitForFill)
        }
        // A subtree's first page waits too: its answers, and those of the subtrees beside it, would
        // otherwise take the two cores from the folder the reader waits for.
        if recursive { yieldToReadersWaitingForAFolder() }
        let chain = ListingPages(api, path: path, recursive: recursive, limit: 2000)
        defer { chain.stop() }
        var pages = 0, entries = 0
        while true {
            let next: ListFolderPage?
            do throws(DropboxError) {
                next = try chain.next()
            } catch where path != options.rootPath && pages == 0 && (error.isRoute("path", "not_found") || error.isRoute("path", "not_folder")) {
                // Deleted, or replaced by a file, since its parent was listed: the feed brings that.
                return []
            } catch where path != options.rootPath && pages > 0 && error.isRoute("path") {
                // The folder went away while it was being listed; the feed removes what was applied.
                break
            }
            guard let page = next else { break }
            pages += 1
            entries += page.entries.count
            applyBatch(page.entries, update: &update, notify: replacing)
            if !recursive {
                for case .folder(let folder) in page.entries {
                    // Its own entry (a recursive listing's first) is not a child.
                    if let display = folder.pathDisplay, display.lowercased() != path.lowercased() { subfolders.append(display) }
                }
            }
            guard page.hasMore, !stopped.load(ordering: .relaxed) else { break }
            if recursive { yieldToReadersWaitingForAFolder() }
        }
        if stopped.load(ordering: .relaxed) { return subfolders }
        // Listed whole: its folders answer from the tree now, so a reader that reaches them
        // (`find` walking ahead of the fill) lists none of them again.
        let collected = update.touched
        state.withLock { state in
            guard let folder = state.tree.slot(atPath: path, below: options.rootPath), state.tree.isDirectory(folder) else { return }
            state.tree.markComplete(folder, listedAt: listedAt)
            if recursive, let collected {
                for slot in collected where state.tree.isAlive(slot) && state.tree.isDirectory(slot) {
                    state.tree.markComplete(slot, listedAt: listedAt)
                }
            }
        }
        if replacing, let collected { touched.value.withLock { $0.formUnion(collected) } }
        logger.debug("listed for the first listing", metadata: [
            "path": "\(path)", "recursive": "\(recursive)", "pages": "\(pages)", "entries": "\(entries)",
            "seconds": "\(String(format: "%.3f", now() - listedAt))"])
        return subfolders
    }

    /// Lists `folders` for the first listing: each on its own, to split it one level further, while
    /// the tree is narrower than `listingConcurrency` (two levels below the mounted folder at
    /// most; `breadth` is how many folders its parent's level had); else each as one recursive
    /// subtree. A folder's subfolders are scheduled as soon as its own listing is in, so a large
    /// folder at the top does not hold back the subtrees beside it; the splitting listings go
    /// first (urgent) because they find more work.
    ///
    /// A folder a reader listed whole after the cursor was taken (`readersCountSince`) is not
    /// listed again: the feed replays every change after the cursor on top of that listing too.
    private func split(_ folders: [String], breadth: Int, depth: Int, replacing: Bool,
                       collected: Shared<Set<Slot>>, jobs: ListingJobs, readersCountSince: Double) {
        let expand = depth <= 2 && folders.count * breadth < options.listingConcurrency
        for folder in folders {
            jobs.run(on: listers, urgent: expand) { [self] () throws(DropboxError) in
                if expand {
                    _ = waitForFill(covering: folder)   // a reader's listing of it under way
                    let below: [String]
                    if let listed = subfoldersListedByAReader(folder, since: readersCountSince, replacing: replacing, into: collected) {
                        below = listed
                    } else {
                        below = try listAndApply(folder, recursive: false, replacing: replacing, into: collected)
                    }
                    split(below, breadth: folders.count * breadth, depth: depth + 1, replacing: replacing,
                          collected: collected, jobs: jobs, readersCountSince: readersCountSince)
                } else {
                    _ = try listAndApply(folder, recursive: true, replacing: replacing, into: collected)
                }
            }
        }
    }

    /// `continue` from `cursor` until Dropbox has nothing more, applying every change.
    private func drain(from cursor: String) throws(DropboxError) {
        let pages = ListingPages(api, continuingFrom: cursor)
        defer { pages.stop() }
        while let page = try pages.next() {
            // Before they land: a folder listing that ends in between is then listed again.
            state.withLock { $0.feed.noteFeedChanges(page.entries) }
            var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
            applyBatch(page.entries, update: &update, notify: true, newFoldersListedAt: now())
            state.withLock { $0.feed.cursor = page.cursor }
        }
        state.withLock { state in
            if state.feed.catchingUp {
                state.feed.catchingUp = false
                state.tree.touchCompleteFolders(at: now())
            }
        }
        setFeed(live: true)
    }

    private func applyBatch(_ entries: [Metadata], update: inout TreeUpdate, notify: Bool,
                            newFoldersListedAt: Double? = nil) {
        // A slice at a time: a page of 2,000 entries held the tree's lock for 5-40 ms on two busy
        // cores, and every lookup and readdir of the user's waited behind it. A slice boundary
        // is no different from a page boundary Dropbox could have chosen there.
        var start = entries.startIndex
        repeat {
            let end = min(start + Self.entriesPerLockHold, entries.endIndex)
            applySlice(entries[start..<end], update: &update, notify: notify, newFoldersListedAt: newFoldersListedAt)
            start = end
        } while start < entries.endIndex
    }

    /// How many entries of a page are applied under one hold of the tree's lock (about 1 ms).
    static let entriesPerLockHold = 200

    private func applySlice(_ entries: ArraySlice<Metadata>, update: inout TreeUpdate, notify: Bool,
                            newFoldersListedAt: Double?) {
        let (invalidations, rewritten) = state.withLock { state -> ([KernelInvalidation], [ThumbnailTarget]) in
            update.invalidations = []
            update.changedFiles = []
            if !entries.isEmpty { state.feed.unsaved = true }
            if state.feed.fill?.endedAt == nil, state.feed.fill != nil {
                state.feed.fill!.entries += entries.count
                state.feed.fill!.folders += entries.count { if case .folder = $0 { true } else { false } }
            }
            update.apply(entries, to: &state.tree, notify: notify, newFoldersListedAt: newFoldersListedAt)
            let rewritten = thumbnailer == nil ? [] : update.changedFiles.compactMap { thumbnailTarget($0, in: state.tree) }
            return (update.invalidations, rewritten)
        }
        invalidate(invalidations)
        // A rewritten image gets thumbnails of its new rev, so a file manager's stay valid.
        if !rewritten.isEmpty { thumbnailer?.refresh(rewritten) }
    }

    /// Removes everything below the mounted folder, telling the kernel to forget it.
    private func emptyMountedFolder() {
        let invalidations = state.withLock { state -> [KernelInvalidation] in
            guard state.tree.hasChildren(.root) else { return [] }
            var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
            update.emptyMountedFolder(in: &state.tree, listedAt: now(), notify: true)
            state.feed.unsaved = true
            return update.invalidations
        }
        invalidate(invalidations)
    }

    private func setFeed(live: Bool) {
        state.withLock { state in
            state.feed.live = live
            if live {
                state.feed.lastContact = now()
                state.feed.downSince = nil
                state.feed.lastError = nil
            }
        }
        signalFeedChanged()
    }

    /// While changes flow, the tree is saved at most this often.
    static let shortestSaveInterval: Double = 30

    /// Seconds until the next save while changes flow, after one that took `seconds`. Every save
    /// writes the whole tree (3.5 CPU-s for a million entries on the development machine, during
    /// which the feed applies nothing): a large tree is saved less often, so that saving takes at
    /// most a twentieth of the feed's time however large the account. What a later save would
    /// have added costs a remount only a longer `continue` catch-up.
    static func saveInterval(afterASaveTaking seconds: Double) -> Double {
        max(shortestSaveInterval, 20 * seconds)
    }

    /// Seconds with no file open, after the first listing ends, before its tree is saved.
    static let firstSaveDelay: Double = 5

    /// Saves the tree once no file has been open for `seconds`, at low priority, on a thread of
    /// its own (the feed's is in a longpoll by then). Not while files are read: a save walks the
    /// whole tree, and a read that touches the tree meanwhile makes it copy it, so a save in the
    /// middle of a stream raised the mount's peak memory by tens of MiB. Files open for good
    /// leave it to the feed's own save, `shortestSaveInterval` on. With a save already under way
    /// this one is skipped (that save took the tree); nothing unsaved, nothing written.
    private func saveSoon(after seconds: Double) {
        Thread.detachNewThread { [self] in
            let giveUp = ContinuousClock.now + .seconds(60)
            var idleSince: ContinuousClock.Instant?
            while ContinuousClock.now < giveUp {
                if stopped.load(ordering: .relaxed) { return }
                if state.withLock({ $0.fileHandles.isEmpty }) {
                    let since = idleSince ?? .now
                    idleSince = since
                    if ContinuousClock.now - since >= .milliseconds(Int(seconds * 1000)) {
                        if BackgroundPriority.lowered({ persistUnlessASaveIsUnderWay() }) { bulkWorkDone() }
                        return
                    }
                } else {
                    idleSince = nil
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
    }

    func signalFeedChanged() {
        pins?.wake()   // a new rev of a pinned file, or the listing a pin waited for
        feedChanged.lock()
        feedChanged.broadcast()
        feedChanged.unlock()
    }

    /// Sleeps in short steps so that `stopChangeFeed` takes effect promptly.
    private func pause(seconds: Double) {
        let until = Date().addingTimeInterval(seconds)
        while Date() < until && !stopped.load(ordering: .relaxed) {
            Thread.sleep(forTimeInterval: min(0.1, until.timeIntervalSinceNow))
        }
    }
}

/// Jobs of one fill on the listing pool, which may add more jobs while they run; `wait` returns
/// once all have ended, and throws the first error (after it, jobs not yet started do nothing).
final class ListingJobs: Sendable {
    private let progress = Mutex<(pending: Int, error: DropboxError?)>((0, nil))
    private let ended = NSCondition()
    private let shouldRun: @Sendable () -> Bool

    init(shouldRun: @escaping @Sendable () -> Bool) { self.shouldRun = shouldRun }

    func run(on pool: WorkerPool, urgent: Bool, _ body: @escaping @Sendable () throws(DropboxError) -> Void) {
        progress.withLock { $0.pending += 1 }
        pool.submit(urgent: urgent) { [self] in
            if progress.withLock({ $0.error == nil }) && shouldRun() {
                do throws(DropboxError) { try body() } catch {
                    progress.withLock { if $0.error == nil { $0.error = error } }
                }
            }
            // A job's own new jobs were counted before this, so zero means all are done.
            let last = progress.withLock { p -> Bool in p.pending -= 1; return p.pending == 0 }
            if last { ended.withLock { ended.broadcast() } }
        }
    }

    func wait() throws(DropboxError) {
        ended.withLock {
            while progress.withLock({ $0.pending > 0 }) { ended.wait() }
        }
        if let error = progress.withLock({ $0.error }) { throw error }
    }
}

/// A Mutex that closures running on other threads can share.
final class Shared<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ initial: Value) { value = Mutex(initial) }
}
