// Keeps the tree in step with Dropbox on one background thread, started from FUSE's `init` (after
// any daemonizing fork):
//
// 1. A tree saved by an earlier mount is loaded and caught up with `continue` from its cursor;
//    otherwise one recursive `list_folder` of the mounted folder fills the tree (pages of 2000).
//    Folders become complete when the fill ends; until then each folder a user opens is listed on
//    its own (DropboxFilesystem.ensureFreshListing).
// 2. Then `longpoll` on the cursor, and `continue` when it reports changes, applying file, folder and
//    deleted entries in place and telling the kernel what to forget. `backoff` is honoured.
// 3. `reset` starts again from a fresh recursive listing; what it no longer shows is removed.
// 4. Any other failure marks the feed down (TTL rules apply again) and retries with backoff.

import DropboxClient
import Foundation

extension DropboxFilesystem {
    /// Loads the saved tree, if any, and starts the sync thread.
    public func startChangeFeed(longpollTimeout: Int = 30) {
        loadPersistedTree()
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
        var listedAll = false
        var lastSaved = now()
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
                    try fill(replacing: resetting)
                    resetting = false
                    listedAll = true
                    lastSaved = -.infinity
                }
                failures = 0
                if now() - lastSaved > 30 {
                    let saved = persist()
                    lastSaved = now()
                    if saved || listedAll { bulkWorkDone() }
                }
                listedAll = false
            } catch {
                if error.isRoute("reset") {
                    logger.warning("change feed cursor was reset; listing the mounted folder again")
                    state.withLock { $0.feed.cursor = nil; $0.feed.catchingUp = false }
                    store?.clear()
                    resetting = true
                    continue
                }
                failures += 1
                // The Dropbox client has logged the failed call; that the feed is down is news once.
                logger.log(level: failures == 1 ? .notice : .debug, "change feed is down; retrying with backoff",
                           metadata: ["error": "\(error)", "failures": "\(failures)"])
                setFeed(live: false)
                state.withLock { $0.feed.catchingUp = false }
                signalFeedChanged()
                pause(seconds: min(60, Double(1 << min(failures, 6))))
            }
        }
    }

    /// One recursive listing of the mounted folder into the tree. With `replacing`, what it does not
    /// show any more is removed (after a `reset`).
    private func fill(replacing: Bool) throws(DropboxError) {
        var update = TreeUpdate(rootPath: options.rootPath, logger: logger, collectTouched: replacing, showExports: options.showExports)
        var page = try api.listFolder(path: options.rootPath, recursive: true, limit: 2000)
        applyBatch(page.entries, update: &update, notify: replacing)
        while page.hasMore {
            if stopped.load(ordering: .relaxed) { return }
            page = try api.listFolderContinue(cursor: page.cursor)
            applyBatch(page.entries, update: &update, notify: replacing)
        }
        let touched = update.touched
        let invalidations = state.withLock { state -> [KernelInvalidation] in
            var gone: [KernelInvalidation] = []
            if let touched {
                var vanished: [Slot] = []
                state.tree.walk { slot in if !touched.contains(slot) { vanished.append(slot) } }
                for slot in vanished where state.tree.isAlive(slot) {
                    gone.append(.entry(parent: state.tree.parent(slot).inode, name: state.tree.name(slot)))
                    gone.append(.inode(state.tree.parent(slot).inode))
                    state.tree.remove(slot)
                }
            }
            state.tree.markAllFoldersComplete(at: now())
            state.feed.cursor = page.cursor
            state.feed.unsaved = true
            state.feed.live = true
            state.feed.lastContact = now()
            return gone
        }
        invalidate(invalidations)
        signalFeedChanged()
        logger.info("listed the mounted folder", metadata: ["entries": "\(cacheFootprint.entries)"])
    }

    /// `continue` from `cursor` until Dropbox has nothing more, applying every change.
    private func drain(from cursor: String) throws(DropboxError) {
        var cursor = cursor
        var page: ListFolderPage
        repeat {
            page = try api.listFolderContinue(cursor: cursor)
            var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
            applyBatch(page.entries, update: &update, notify: true, newFoldersListedAt: now())
            cursor = page.cursor
            state.withLock { $0.feed.cursor = cursor }
        } while page.hasMore
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
        let (invalidations, rewritten) = state.withLock { state -> ([KernelInvalidation], [ThumbnailTarget]) in
            update.invalidations = []
            update.changedFiles = []
            if !entries.isEmpty { state.feed.unsaved = true }
            update.apply(entries, to: &state.tree, notify: notify, newFoldersListedAt: newFoldersListedAt)
            let rewritten = thumbnailer == nil ? [] : update.changedFiles.compactMap { thumbnailTarget($0, in: state.tree) }
            return (update.invalidations, rewritten)
        }
        invalidate(invalidations)
        // A rewritten image gets thumbnails of its new rev, so a file manager's stay valid.
        if !rewritten.isEmpty { thumbnailer?.refresh(rewritten) }
    }

    private func setFeed(live: Bool) {
        state.withLock { state in
            state.feed.live = live
            if live { state.feed.lastContact = now() }
        }
        signalFeedChanged()
    }

    private func signalFeedChanged() {
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
