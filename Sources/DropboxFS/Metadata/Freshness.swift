// When a folder's listing may be trusted, and listing it again when not.

import DropboxClient
import Foundation

extension DropboxFilesystem {
    // MARK: - Freshness

    var ttlSeconds: Double {
        let ttl = options.metadataTTL.components
        return Double(ttl.seconds) + Double(ttl.attoseconds) / 1e18
    }

    private enum Freshness { case fresh, waitForCatchUp, list(path: String, firstTime: Bool) }

    private func freshness(of folder: Slot, in state: State) throws(FSError) -> Freshness {
        let tree = state.tree
        guard tree.isAlive(folder) else { throw .notFound }
        guard tree.isDirectory(folder) else { throw .notADirectory }
        if tree.isComplete(folder), !tree.mustListAgain(folder), tree.listedAt(folder) >= state.cachesDroppedAt {
            if state.feed.live { return .fresh }
            if now() - max(tree.listedAt(folder), state.feed.lastContact) < ttlSeconds { return .fresh }
            if state.feed.catchingUp { return .waitForCatchUp }
        }
        let path = options.rootPath + tree.components(folder).map { "/" + $0 }.joined()
        return .list(path: path, firstTime: !tree.isComplete(folder))
    }

    /// Lists `folder` if what the tree holds of it cannot be trusted. If the caller waits for that
    /// folder's own listing (its own, or the first listing's of that folder alone), subtree
    /// listings make way meanwhile (`FeedStatus.readersWaitingForAFolder`); with `readerHandle`,
    /// they go on making way while that handle reads the folder (`foldersReadAfterWaiting`),
    /// from the same lock hold on, so that none starts in between. A reader opening a folder it
    /// reached by name (`reachedPastTheFill`) does not wait for a subtree listing: it lists it.
    func ensureFreshListing(of folder: Slot, readerHandle: FileHandleID? = nil) throws(FSError) {
        var decision = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) }
        if case .waitForCatchUp = decision, !reachability.isUnreachable {
            // A tree loaded from the persistent cache is being brought up to date; its `continue`
            // chain is cheaper than listing this folder, so wait for it (but not forever).
            let deadline = Date().addingTimeInterval(10)
            feedChanged.lock()
            while state.withLock({ $0.feed.catchingUp }) && Date() < deadline { _ = feedChanged.wait(until: deadline) }
            feedChanged.unlock()
            decision = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) }
        }
        if case .list(let path, _) = decision, readerHandle == nil || !reachedPastTheFill(folder, at: path) {
            if waitForFill(covering: path, readerHandle: readerHandle) { decision = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) } }
        }
        guard case .list(let path, let firstTime) = decision else { return }
        if reachability.isUnreachable {
            // Offline: a listed folder keeps its saved answer, and one never listed is an error
            // now rather than after the retries of a call that cannot connect.
            if firstTime { throw .upstream(Reachability.offline) }
            return
        }
        try folderListings.run(folder) { () throws(FSError) -> Void in
            // A caller that queued behind another's listing may find the folder already fresh.
            let again = try state.withLock { state throws(FSError) in try freshness(of: folder, in: state) }
            guard case .list = again else {
                // It waited for another reader's listing of the folder.
                state.withLock { $0.feed.holdForReader(readerHandle, until: now() + fillWaitLimit) }
                return
            }
            // While it lists, the first listing waits for it rather than list the folder again,
            // and its subtree listings make way (`readersWaitingForAFolder`).
            let call = (lowerPath: path.lowercased(), recursive: false)
            state.withLock {
                $0.feed.listingsInFlight.append(call)
                $0.feed.readersWaitingForAFolder += 1
            }
            defer {
                state.withLock {
                    $0.feed.listingsInFlight.removeAll { $0 == call }
                    $0.feed.readersWaitingForAFolder -= 1
                    $0.feed.holdForReader(readerHandle, until: now() + fillWaitLimit)
                }
                signalFeedChanged()
            }
            do throws(FSError) {
                try listAndReplaceChildren(of: folder, at: path, notify: !firstTime) { state, listedAt in
                    let earlier = state.feed.listedByReadersDuringFill?[folder] ?? -.infinity
                    state.feed.listedByReadersDuringFill?[folder] = max(earlier, listedAt)
                }
            } catch {
                // Dropbox unreachable (or answering 5xx/429 past the retries): a folder listed
                // before keeps its last answer rather than turning into EIO, and is listed again
                // on the next access (issue 8). The client has logged the failed call.
                guard case .upstream = error, !firstTime else { throw error }
                logger.debug("serving the cached listing", metadata: ["path": "\(path)"])
                return
            }
        }
    }

    /// How many times a folder is listed while the feed keeps changing it during its listing.
    static let listingAttemptsWhileChanging = 3

    /// Lists `folder` (at `path`) alone and replaces its children with what Dropbox answered,
    /// unless the feed brought a change in the folder while the listing ran (`noteFeedChanges`):
    /// the listing may then show the folder from before that change, and would undo it for good.
    /// Such a listing is thrown away and the folder listed again; the last attempt's is kept, with
    /// the folder marked to be listed again at its next use. `whenApplied` runs under the same
    /// lock hold, with when the listing that was kept started.
    private func listAndReplaceChildren(of folder: Slot, at path: String, notify: Bool,
                                        whenApplied: (inout State, Double) -> Void = { _, _ in }) throws(FSError) {
        for attempt in 1...Self.listingAttemptsWhileChanging {
            let listedAt = now()
            let watch = state.withLock { $0.feed.watchFolderListing(path) }
            let entries: [Metadata]
            do {
                entries = try listWholeFolder(path)
            } catch {
                state.withLock { _ = $0.feed.endFolderListingWatch(watch) }
                throw error
            }
            let last = attempt == Self.listingAttemptsWhileChanging
            let applied = state.withLock { state -> [KernelInvalidation]? in
                let overtaken = state.feed.endFolderListingWatch(watch)
                if overtaken && !last { return nil }
                guard state.tree.isAlive(folder) else { return [] }
                var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
                update.replaceChildren(of: folder, with: entries, in: &state.tree, listedAt: listedAt, notify: notify)
                if overtaken { state.tree.markMustListAgain(folder) }
                whenApplied(&state, listedAt)
                return update.invalidations
            }
            if let invalidations = applied {
                invalidate(invalidations)
                return
            }
            logger.debug("listing the folder again: the change feed changed it while it was listed", metadata: ["path": "\(path)"])
        }
    }

    /// Lists `folder` again once the first listing is done, telling the kernel what changed; if
    /// Dropbox cannot answer, the folder is listed on its next use instead (see `fill`), and
    /// keeps its answer meanwhile should Dropbox stay out of reach.
    func listAgainAfterFill(_ folder: Slot) {
        guard let path = state.withLock({ state -> String? in
            guard state.tree.isAlive(folder), state.tree.isDirectory(folder) else { return nil }
            return options.rootPath + state.tree.components(folder).map { "/" + $0 }.joined()
        }) else { return }
        do throws(FSError) {
            try listAndReplaceChildren(of: folder, at: path, notify: true)
        } catch {
            state.withLock { if $0.tree.isAlive(folder) { $0.tree.markMustListAgain(folder) } }
            invalidate([.inode(folder.inode)])
        }
    }

    /// The path of `folder` if the first listing is listing it as part of a subtree under way and
    /// has not listed it whole yet: nil otherwise. What the tree holds there came from that listing,
    /// so it is as fresh as the listing; what it lacks may still come, in an order Dropbox does not
    /// say, up to the whole subtree later.
    func pathWithinASubtreeUnderWay(_ folder: Slot, in state: State) -> String? {
        let tree = state.tree
        guard tree.isAlive(folder), tree.isDirectory(folder), !tree.isComplete(folder) else { return nil }
        let path = options.rootPath + tree.components(folder).map { "/" + $0 }.joined()
        let lowerPath = path.lowercased()
        guard state.feed.fillCovers(lowerPath), !state.feed.fillListsFolderAlone(lowerPath) else { return nil }
        return path
    }

    /// Whether a reader reached `folder` (at `path`) by name rather than by reading its parent
    /// during the first listing (through folders nobody has listed whole yet, or past a parent
    /// nobody opened), and that listing will reach it only within a subtree: `ls a/b` right after
    /// mounting, not `find` walking behind the first listing. Such a reader wants one folder;
    /// waiting for the subtree listing that covers it (up to `fillWaitLimit` at each level of the
    /// path) would cost it seconds where listing the folder itself costs a round trip. A folder the
    /// first listing lists on its own is waited for: that is one listing either way.
    private func reachedPastTheFill(_ folder: Slot, at path: String) -> Bool {
        state.withLock { state in
            guard folder != .root, state.tree.isAlive(folder),
                  !state.feed.fillListsFolderAlone(path.lowercased()) else { return false }
            let parent = state.tree.parent(folder)
            if pathWithinASubtreeUnderWay(parent, in: state) != nil { return true }
            guard let opened = state.feed.foldersOpenedDuringFill else { return false }
            return !opened.contains(parent)
        }
    }

    /// How long a reader waits for the first listing to reach a folder it is listing anyway
    /// (`FilesystemOptions.fillWaitSeconds`).
    var fillWaitLimit: TimeInterval { options.fillWaitSeconds }

    /// Waits while a call of the first listing (or a reader's listing of that folder) under way
    /// covers `path`: whether it waited. If it waited for that folder's own listing, subtree
    /// listings make way meanwhile, and then for `readerHandle` (see `ensureFreshListing`).
    @discardableResult
    func waitForFill(covering path: String, readerHandle: FileHandleID? = nil) -> Bool {
        let lowerPath = path.lowercased()
        let (covered, alone) = state.withLock { state -> (Bool, Bool) in
            let alone = state.feed.fillListsFolderAlone(lowerPath)
            if alone { state.feed.readersWaitingForAFolder += 1 }
            return (state.feed.fillCovers(lowerPath), alone)
        }
        guard covered else { return false }
        let deadline = Date().addingTimeInterval(fillWaitLimit)
        feedChanged.lock()
        while state.withLock({ $0.feed.fillCovers(lowerPath) }) && Date() < deadline { _ = feedChanged.wait(until: deadline) }
        feedChanged.unlock()
        if alone {
            state.withLock {
                $0.feed.readersWaitingForAFolder -= 1
                $0.feed.holdForReader(readerHandle, until: now() + fillWaitLimit)
            }
            signalFeedChanged()   // subtree listings paused for this reader go on (without one)
        }
        return true
    }

    private func listWholeFolder(_ path: String) throws(FSError) -> [Metadata] {
        let pages = ListingPages(api, path: path, recursive: false, limit: 2000)
        defer { pages.stop() }
        do {
            var entries: [Metadata] = []
            while let page = try pages.next() { entries.append(contentsOf: page.entries) }
            return entries
        } catch {
            // The Dropbox client has logged the failed call (with its request id); the operation's
            // boundary adds the path (FailureReport.swift).
            throw FSError(error)
        }
    }
}
