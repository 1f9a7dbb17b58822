// Keeps the tree in step with Dropbox on one background thread, started from FUSE's `init` (after
// any daemonizing fork):
//
// 1. A tree saved by an earlier mount is loaded and caught up with `continue` from its cursor;
//    otherwise one recursive `list_folder` of the mounted folder fills the tree (pages of 2000).
//    Folders become complete when the fill ends; until then each folder a user opens is listed on
//    its own (DropboxFS.ensureFreshListing).
// 2. Then `longpoll` on the cursor, and `continue` when it reports changes, applying file, folder and
//    deleted entries in place and telling the kernel what to forget. `backoff` is honoured.
// 3. `reset` starts again from a fresh recursive listing; what it no longer shows is removed.
// 4. Any other failure marks the feed down (TTL rules apply again) and retries with backoff.

import DropboxClient
import Foundation

extension DropboxFS {
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

    private func loadPersistedTree() {
        guard let saved = store?.load() else { return }
        state.withLock { state in
            var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
            update.apply(saved.entries.map(metadata(for:)), to: &state.tree, notify: false)
            // Complete but stale: answers wait for the catch-up below rather than list again.
            state.tree.markAllFoldersComplete(at: -.infinity)
            state.feed.cursor = saved.cursor
            state.feed.catchingUp = true
        }
        logger.info("loaded saved tree", metadata: ["entries": "\(saved.entries.count)"])
        bulkWorkDone()
    }

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
        let invalidations = state.withLock { state -> [KernelInvalidation] in
            update.invalidations = []
            if !entries.isEmpty { state.feed.unsaved = true }
            update.apply(entries, to: &state.tree, notify: notify, newFoldersListedAt: newFoldersListedAt)
            return update.invalidations
        }
        invalidate(invalidations)
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

    /// Saves the tree and its cursor, if there is a store, a cursor, and a change since the last save. The tree is copied under
    /// the lock (copy-on-write makes that O(1)) and walked outside it, so lookups never wait on a
    /// save of a large tree.
    /// Returns whether it saved.
    @discardableResult
    public func persist() -> Bool {
        guard let store else { return false }
        guard let (tree, cursor) = state.withLock({ state -> (Tree, String)? in
            guard let cursor = state.feed.cursor, !state.feed.catchingUp, state.feed.unsaved else { return nil }
            state.feed.unsaved = false
            return (state.tree, cursor)
        }) else { return false }
        var entries: [PersistedEntry] = []
        entries.reserveCapacity(tree.liveCount)
        tree.walk { slot in
            let path = tree.components(slot).map { "/" + $0 }.joined()
            let file = tree.details(slot).map {
                PersistedFile(size: $0.size, modified: $0.modified, id: $0.id, rev: $0.rev, contentHash: $0.contentHash,
                              isExport: $0.isExport)
            }
            entries.append(PersistedEntry(path: path, file: file))
        }
        store.save(PersistedTree(cursor: cursor, entries: entries))
        return true
    }

    private func metadata(for entry: PersistedEntry) -> Metadata {
        let display = options.rootPath + entry.path
        let name = String(entry.path.split(separator: "/").last ?? "")
        guard let file = entry.file else {
            return .folder(FolderMetadata(name: name, id: "", pathLower: display.lowercased(), pathDisplay: display))
        }
        // An export was saved under its visible name, whose extension names its format.
        let exportAs = file.isExport ? String(name.split(separator: ".").last ?? "html") : nil
        return .file(FileMetadata(name: name, id: file.id, pathLower: display.lowercased(), pathDisplay: display,
                                  clientModified: file.modified, serverModified: file.modified, rev: file.rev,
                                  size: file.size, isDownloadable: !file.isExport, contentHash: file.contentHash,
                                  exportAs: exportAs))
    }
}
