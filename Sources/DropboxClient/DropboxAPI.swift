// The seam between the filesystem core and Dropbox. The core sees only this protocol, so its tests
// drive it with an in-memory fake, and the real implementation (`DropboxHTTPClient`) speaks HTTP
// through an `HTTPTransport`.
//
// Calls are synchronous and blocking: FUSE worker threads call them directly. Implementations must
// be safe to call from many threads at once.

public protocol DropboxAPI: Sendable {
    /// `users/get_current_account`.
    func currentAccount() throws(DropboxError) -> Account
    /// `users/get_space_usage`.
    func spaceUsage() throws(DropboxError) -> SpaceUsage
    /// `files/list_folder`. `path` is `""` for the root, `/a/b`, or `id:...`.
    func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage
    /// `files/list_folder/continue`.
    func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage
    /// `listFolder`, calling `cursorKnown` once with the page's cursor and `has_more` as soon as
    /// they are known, which may be before its entries are decoded (`ListingPages` asks for the
    /// next page then). The default calls it when the page is decoded.
    func listFolder(path: String, recursive: Bool, limit: Int?,
                    cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage
    /// `listFolderContinue`, with `cursorKnown` as for `listFolder`.
    func listFolderContinue(cursor: String,
                            cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage
    /// `files/list_folder/get_latest_cursor`.
    func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String
    /// `files/list_folder/longpoll` (notify host, no auth). `timeout` is 30...480 seconds.
    func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult
    /// `files/get_metadata`. Not valid for the root, which Dropbox refuses with 400.
    func metadata(path: String) throws(DropboxError) -> Metadata
    /// `files/download` of `range` (end exclusive) of the file at `path` (`/p`, `id:`, or `rev:`).
    /// Returns fewer bytes than asked only at end of file; a range wholly past the end returns `[]`.
    func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8]
    /// `files/download` of `range`, handed to `consumer` in order as it arrives instead of
    /// buffered. Returns the bytes handed over: all of `range`, or fewer at end of file, or fewer
    /// when `consumer` returned false (it has taken that chunk; nothing follows). If it throws,
    /// the bytes already handed over are a correct prefix of `range`: a caller resumes from there.
    func download(path: String, range: Range<UInt64>,
                  into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64
    /// `files/export` of a file Dropbox cannot download (`is_downloadable=false`); `format` nil
    /// uses its `export_as`. The default (Export.swift) answers `non_exportable`.
    func export(path: String, format: String?) throws(DropboxError) -> ExportedFile
    /// `files/get_thumbnail_batch`: one outcome per request, in order, at most `maxThumbnailBatch`
    /// requests. The default (Thumbnails.swift) answers every entry `unsupported_extension`.
    func thumbnails(_ requests: [ThumbnailRequest]) throws(DropboxError) -> [ThumbnailOutcome]
    /// The Dropbox route that really answers `route` (one of the names above) for this
    /// implementation, for metrics: a shared link downloads through `sharing/get_shared_link_file`.
    /// The default (below) is `route` itself.
    func routeAnswering(_ route: String) -> String
}

extension DropboxAPI {
    public func routeAnswering(_ route: String) -> String { route }

    public func listFolder(path: String, recursive: Bool, limit: Int?,
                           cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        let page = try listFolder(path: path, recursive: recursive, limit: limit)
        cursorKnown(page.cursor, page.hasMore)
        return page
    }

    public func listFolderContinue(cursor: String,
                                   cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        let page = try listFolderContinue(cursor: cursor)
        cursorKnown(page.cursor, page.hasMore)
        return page
    }

    /// The bytes of `range` collected from the streaming download, for an implementation whose
    /// streaming download is its own (so both forms share one set of checks).
    public func collectingDownload(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        var bytes: [UInt8] = []
        _ = try download(path: path, range: range) { chunk in
            bytes.append(contentsOf: chunk)
            return true
        }
        return bytes
    }

    /// Buffers with `download(path:range:)`, then hands the bytes over in one piece.
    public func download(path: String, range: Range<UInt64>,
                         into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        let bytes = try download(path: path, range: range)
        if !bytes.isEmpty { _ = bytes.withUnsafeBytes { consumer($0) } }
        return UInt64(bytes.count)
    }
}
