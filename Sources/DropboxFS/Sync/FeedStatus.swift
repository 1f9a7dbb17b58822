import DropboxClient

/// Where the change feed stands. While it is live, a complete folder is trusted without a TTL:
/// every change reaches the tree through `list_folder/continue`.
struct FeedStatus {
    var live = false
    /// Last time the feed heard from Dropbox (monotonic seconds).
    var lastContact = -Double.infinity
    /// A tree loaded from the persistent cache is being brought up to date with `continue`.
    var catchingUp = false
    var cursor: String?
    /// The tree changed (a fill, or a batch with entries) since it was last saved; an idle feed
    /// therefore never rewrites the whole saved tree.
    var unsaved = false
    /// The first listing's calls under way, and readers' own listings of a folder: lower-case
    /// path, and whether the call lists the whole subtree (recursive) or the folder alone. A reader
    /// (or the first listing) that reaches a folder one of them covers waits for it rather than
    /// listing the folder a second time.
    var listingsInFlight: [(lowerPath: String, recursive: Bool)] = []
    /// Folders a reader listed on its own while a first listing ran (nil when none runs), with when
    /// the last such listing started. That first listing applies its pages without kernel
    /// invalidations, so it may add what the reader's listing, already cached by the kernel, did
    /// not show: these folders are invalidated when it ends. And it only adds and updates, so a
    /// reader's listing from before the feed's cursor may keep an entry deleted since, which
    /// neither the listing nor the feed reports: such folders are listed again when it ends.
    var listedByReadersDuringFill: [Slot: Double]?
    /// Folders a reader opened while a first listing runs (nil when none runs). A folder whose
    /// parent nobody read was reached by name (`ls Photos` right after mounting), not by `find`
    /// walking behind the listing, and is listed at once rather than waited for
    /// (`DropboxFilesystem.reachedPastTheFill`).
    var foldersOpenedDuringFill: Set<Slot>?

    /// Readers waiting now for one folder's own listing under way (not a subtree's): `ls` of a
    /// large folder right after mounting. Subtree listings pause between pages meanwhile, so
    /// that the folder someone is looking at gets the CPU rather than the background.
    var readersWaitingForAFolder = 0
    /// Folders a reader waited for and is reading now (open, not read to the end), with when the
    /// subtree listings stop making way for it at the latest: `ls -l` reads the 10,000 entries
    /// it waited for while they pause, not among their pages (their decoding, and the tree's
    /// lock while they apply). `find` keeps folders open while it walks below them, so the end
    /// of the reading, not `releasedir`, ends the pause.
    var foldersReadAfterWaiting: [FileHandleID: Double] = [:]

    /// Listings of one folder alone under way outside the first listing (a reader's, or one again
    /// after it), by an id from `watchFolderListing`: the folder's path folded as Dropbox folds
    /// case (`FoldedName`), and whether the feed has brought a change in it since the listing
    /// started. Such a listing may show the folder from before that change, and replacing the
    /// folder's children with it would undo the change for good, since the feed does not bring it
    /// twice.
    private var folderListingsWatched: [Int: (folded: [UInt8], overtaken: Bool)] = [:]
    private var nextFolderListingID = 0

    /// Starts watching a listing of the folder at `path`, before its first call goes out.
    mutating func watchFolderListing(_ path: String) -> Int {
        nextFolderListingID += 1
        folderListingsWatched[nextFolderListingID] = (FoldedName(path).bytes, false)
        return nextFolderListingID
    }

    /// Stops watching; whether the feed brought a change in the folder meanwhile.
    mutating func endFolderListingWatch(_ id: Int) -> Bool {
        folderListingsWatched.removeValue(forKey: id)?.overtaken ?? false
    }

    /// The feed is about to apply `entries`: listings under way of a folder they touch are
    /// overtaken. An entry touches the folder it lies in, every folder above it (a new file deep
    /// below implies the subfolder the listing may lack), and every folder below it (a deleted
    /// or moved folder takes them along). An entry without a path touches everything.
    mutating func noteFeedChanges(_ entries: [Metadata]) {
        guard !folderListingsWatched.isEmpty else { return }
        for entry in entries {
            let path = (entry.pathLower ?? entry.pathDisplay).map { FoldedName($0).bytes }
            for (id, watch) in folderListingsWatched where !watch.overtaken {
                if let path, !Self.isWithin(path, watch.folded), !Self.isWithin(watch.folded, path) { continue }
                folderListingsWatched[id]!.overtaken = true
            }
        }
    }

    /// Whether `path` is `folder` or lies below it ("" is the account's root).
    private static func isWithin(_ path: some Collection<UInt8>, _ folder: some Collection<UInt8>) -> Bool {
        path.starts(with: folder) && path.dropFirst(folder.count).first.map { $0 == UInt8(ascii: "/") } ?? true
    }

    /// Subtree listings go on making way for `handle` (if any) while it reads what it waited for.
    mutating func holdForReader(_ handle: FileHandleID?, until deadline: Double) {
        if let handle { foldersReadAfterWaiting[handle] = deadline }
    }

    /// Whether subtree listings should pause now (see the two above).
    func fillMakesWay(now: Double) -> Bool {
        readersWaitingForAFolder > 0 || foldersReadAfterWaiting.values.contains { $0 > now }
    }

    /// The last first listing of the mounted folder (nil if the tree came from the persistent
    /// cache and none was needed), for `dbx-mount status`.
    var fill: FillProgress?
    /// When the feed last failed to reach Dropbox (monotonic seconds) and why; nil while it works.
    var downSince: Double?
    var lastError: String?

    /// Whether the fill is listing the folder at `lowerPath` on its own (not as part of a subtree).
    func fillListsFolderAlone(_ lowerPath: String) -> Bool {
        listingsInFlight.contains { $0.lowerPath == lowerPath && !$0.recursive }
    }

    /// Whether a fill call under way will list the folder at `lowerPath`.
    func fillCovers(_ lowerPath: String) -> Bool {
        listingsInFlight.contains { call in
            call.lowerPath == lowerPath || (call.recursive && Self.isWithin(lowerPath.utf8, call.lowerPath.utf8))
        }
    }
}

/// How far a first listing has come. Dropbox does not say how many entries a folder holds, so
/// progress is counted in listings: each subtree or folder the listing split the account into is
/// one, and new ones appear as their parents' listings return.
struct FillProgress {
    var startedAt: Double
    var endedAt: Double?
    var entries = 0
    var folders = 0
    var listingsStarted = 0
    var listingsDone = 0
}
