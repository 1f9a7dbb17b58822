// Where the tree stands against Dropbox, for `dbx-mount status`: the first listing's progress and
// whether the change feed is following changes. Durations rather than instants: the core's clock
// is monotonic, and the process around it turns them into wall-clock times.

/// A snapshot of the first listing and the change feed.
public struct SyncProgress: Sendable, Equatable {
    /// The last first listing of the mounted folder; nil while none has run (the tree came from the
    /// persistent cache, or the feed has not started).
    public var firstListing: FirstListing?
    /// The feed follows Dropbox's changes: the tree is complete and current.
    public var feedLive: Bool
    /// A tree loaded from the persistent cache is being brought up to date.
    public var catchingUp: Bool
    /// How long the feed has failed to reach Dropbox, and its last error; nil while it works.
    public var feedDownForSeconds: Double?
    public var feedError: String?
    /// Dropbox cannot be reached at all (or could not when mounting): the mount serves the saved
    /// tree and the block cache, and what needs Dropbox fails at once.
    public var offline = false

    public struct FirstListing: Sendable, Equatable {
        public var done: Bool
        /// Entries and folders listed so far.
        public var entries: Int
        public var folders: Int
        /// Listings (a subtree, or one folder) started and finished: the unit of progress, since
        /// Dropbox does not say how many entries an account holds.
        public var listingsStarted: Int
        public var listingsDone: Int
        /// Since it started, or how long it took once done.
        public var seconds: Double

        /// Finished listings of those known so far, 0 to 1; 1 once done. It may step back when a
        /// finished listing reveals new subtrees.
        public var fraction: Double {
            if done { return 1 }
            guard listingsStarted > 0 else { return 0 }
            return min(0.99, Double(listingsDone) / Double(listingsStarted))
        }
    }
}

extension DropboxFilesystem {
    public var syncProgress: SyncProgress {
        let at = now()
        return state.withLock { state in
            let feed = state.feed
            return SyncProgress(
                firstListing: feed.fill.map { fill in
                    SyncProgress.FirstListing(done: fill.endedAt != nil, entries: fill.entries, folders: fill.folders,
                                              listingsStarted: fill.listingsStarted, listingsDone: fill.listingsDone,
                                              seconds: (fill.endedAt ?? at) - fill.startedAt)
                },
                feedLive: feed.live, catchingUp: feed.catchingUp,
                feedDownForSeconds: feed.downSince.map { at - $0 }, feedError: feed.lastError,
                offline: reachability.isUnreachable)
        }
    }
}
