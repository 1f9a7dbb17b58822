// A shared link seen as a Dropbox of its own, so that the filesystem core mounts it as it mounts
// an account: the link's folder is the root, listed one folder at a time; files are read by rev
// as always, which this adapter turns into `get_shared_link_file` of the path it saw that rev at.
// A file link shows as a folder holding that one file (which the mount shows as the mount point
// itself: `FilesystemOptions.rootFileName`). There is no change feed through a link
// (no recursive cursor, no longpoll), so a mount of one refreshes folders when their TTL ends.

import Synchronization

public final class SharedLinkDropbox: DropboxAPI {
    let client: DropboxHTTPClient
    public let link: SharedLink
    /// The link's one file, for a file link; nil for a folder link.
    let file: FileMetadata?
    /// What the link's listings showed: a link listing's entries carry no paths.
    private let seen: Mutex<Seen>

    /// `target` is what `sharedLinkMetadata(link)` said the link is.
    public convenience init(client: DropboxHTTPClient, link: SharedLink, target: SharedLinkTarget) {
        self.init(client: client, link: link, target: target, unfinishedListingLimit: 1024)
    }

    /// `unfinishedListingLimit`: how many cursors of paged listings not yet continued are kept
    /// (oldest dropped first). A listing that fails or is stopped midway never continues its
    /// last cursors; the mount runs at most 80 listings at once (64 of its own, 16 for readers),
    /// each a few pages ahead.
    init(client: DropboxHTTPClient, link: SharedLink, target: SharedLinkTarget, unfinishedListingLimit: Int) {
        self.client = client
        self.link = link
        if case .file(let metadata) = target { file = metadata } else { file = nil }
        seen = Mutex(Seen(unfinishedListingLimit: max(unfinishedListingLimit, 1)))
    }

    public func currentAccount() throws(DropboxError) -> Account { try client.currentAccount() }

    /// A link has no quota of the caller's: nothing used, nothing allocated.
    public func spaceUsage() throws(DropboxError) -> SpaceUsage { SpaceUsage(used: 0, allocated: 0) }

    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        guard !recursive else { throw Self.unsupported("a recursive listing") }
        if let file {
            guard path.isEmpty else { throw Self.notFound }
            return ListFolderPage(entries: [.file(file)], cursor: Self.fileLinkCursor, hasMore: false)
        }
        return record(try client.listFolder(in: link, path: path, limit: limit), folder: path)
    }

    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        guard cursor != Self.fileLinkCursor else { return ListFolderPage(entries: [], cursor: cursor, hasMore: false) }
        let folder = seen.withLock { $0.folderOfCursor.removeValue(forKey: cursor)?.folder }
        let page = try client.listFolderContinue(cursor: cursor)
        return folder.map { record(page, folder: $0) } ?? page
    }

    public func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String {
        throw Self.unsupported("a change feed")
    }

    public func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult {
        throw Self.unsupported("a change feed")
    }

    /// `path` relative to the link, as `get_shared_link_metadata` names it.
    public func metadata(path: String) throws(DropboxError) -> Metadata {
        switch try client.sharedLinkMetadata(link, path: path.isEmpty ? nil : path) {
        case .file(let metadata):
            remember(rev: metadata.rev, at: path)
            return .file(metadata)
        case .folder(let name, let id):
            return .folder(FolderMetadata(name: name, id: id ?? "", pathLower: nil, pathDisplay: nil))
        }
    }

    public func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        try collectingDownload(path: path, range: range)
    }

    /// `path` is `rev:…` (how the core reads): the file is fetched by where that rev was listed.
    /// A rev the link no longer shows at that path is `not_found`, never another file's bytes:
    /// Dropbox answers with the path's current content, so its `rev` is checked too.
    public func download(path: String, range: Range<UInt64>,
                         into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        guard path.hasPrefix("rev:") else { throw .badInput("a shared link is read by rev") }
        let rev = String(path.dropFirst(4))
        guard let place = place(of: rev) else { throw Self.notFound }
        return try client.downloadFromLink(link, path: place.path, rev: rev, range: range, into: consumer)
    }

    /// One `get_thumbnail_v2` per image (the batch route takes no link): each image's own
    /// refusal is its outcome, and only a failure of the call itself (the link, the network) throws.
    public func thumbnails(_ requests: [ThumbnailRequest]) throws(DropboxError) -> [ThumbnailOutcome] {
        var outcomes: [ThumbnailOutcome] = []
        for request in requests {
            let rev = request.path.hasPrefix("rev:") ? String(request.path.dropFirst(4)) : ""
            guard let place = place(of: rev) else { outcomes.append(.failed(["path", "not_found"])); continue }
            do {
                outcomes.append(.image(try client.thumbnail(in: link, path: place.path, format: request.format,
                                                            size: request.size, mode: request.mode)))
            } catch {
                guard case .route(let tags, _) = error else { throw error }
                outcomes.append(.failed(tags))
            }
        }
        return outcomes
    }

    public func routeAnswering(_ route: String) -> String {
        switch route {
        case "files/download": "sharing/get_shared_link_file"
        case "files/get_metadata": "sharing/get_shared_link_metadata"
        case "files/get_thumbnail_batch": "files/get_thumbnail_v2"
        default: route
        }
    }

    // MARK: - Paths of what was listed

    /// Where each rev was last listed, relative to the link ("/a/b.txt"), and which folder each
    /// cursor of a paged listing belongs to. A path keeps only the rev it was last listed at: the
    /// link serves a path's current content only, so an older rev there could never be read
    /// again, and a mount that lives for months would otherwise keep every rev it ever saw. The
    /// cursors are bounded too: those of listings that ended midway are never continued, so past
    /// `unfinishedListingLimit` the oldest goes.
    private struct Seen {
        let unfinishedListingLimit: Int
        var pathOfRev: [String: String] = [:]
        var revAtPath: [String: String] = [:]
        var folderOfCursor: [String: (folder: String, order: UInt64)] = [:]
        var cursorsNoted: UInt64 = 0

        init(unfinishedListingLimit: Int) { self.unfinishedListingLimit = unfinishedListingLimit }

        mutating func note(cursor: String, of folder: String) {
            folderOfCursor[cursor] = (folder, cursorsNoted)
            cursorsNoted += 1
            // A scan of at most the limit, and only once listings have been left unfinished.
            if folderOfCursor.count > unfinishedListingLimit,
               let oldest = folderOfCursor.min(by: { $0.value.order < $1.value.order }) {
                folderOfCursor[oldest.key] = nil
            }
        }

        mutating func note(rev: String, at path: String) {
            if let replaced = revAtPath.updateValue(rev, forKey: path), replaced != rev,
               pathOfRev[replaced] == path {
                pathOfRev[replaced] = nil
            }
            if let moved = pathOfRev.updateValue(path, forKey: rev), moved != path, revAtPath[moved] == rev {
                revAtPath[moved] = nil
            }
        }
    }

    /// Where a rev is read through the link: `path` nil is the link itself (a file link's one
    /// file), else the path relative to the link where it was last listed.
    private struct Place { let path: String? }

    /// Where `rev` is read; nil for a rev the link does not show.
    private func place(of rev: String) -> Place? {
        if let file { return file.rev == rev ? Place(path: nil) : nil }
        return seen.withLock { $0.pathOfRev[rev] }.map { Place(path: $0) }
    }

    private func record(_ page: ListFolderPage, folder: String) -> ListFolderPage {
        seen.withLock { seen in
            for case .file(let file) in page.entries {
                seen.note(rev: file.rev, at: folder + "/" + file.name)
            }
            if page.hasMore { seen.note(cursor: page.cursor, of: folder) }
        }
        return page
    }

    private func remember(rev: String, at path: String) {
        seen.withLock { $0.note(rev: rev, at: path) }
    }

    /// How many revs the adapter remembers a place for (tests: one per path listed, not per rev).
    var rememberedRevs: Int { seen.withLock { $0.pathOfRev.count } }

    /// How many cursors of paged listings the adapter keeps (tests: bounded however many are left).
    var rememberedCursors: Int { seen.withLock { $0.folderOfCursor.count } }

    static let fileLinkCursor = "shared-file-link"
    static let notFound = DropboxError.route(tags: ["path", "not_found"], summary: "path/not_found/")

    static func unsupported(_ what: String) -> DropboxError {
        .badInput("a shared link has no \(what); Dropbox lists links one folder at a time")
    }
}
