// One method per Dropbox route the mount uses: each builds its argument (docs/dropbox-api.md §1)
// and decodes its answer; sending, retrying and errors are `perform`'s (RetryLoop.swift).

extension DropboxHTTPClient {
    public func currentAccount() throws(DropboxError) -> Account {
        try Decode.account(try rpc("users/get_current_account", nil))
    }

    public func spaceUsage() throws(DropboxError) -> SpaceUsage {
        try Decode.spaceUsage(try rpc("users/get_space_usage", nil))
    }

    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        try listFolder(path: path, recursive: recursive, limit: limit) { _, _ in }
    }

    public func listFolder(path: String, recursive: Bool, limit: Int?,
                           cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        var arg = listFolderArg(path: path, recursive: recursive)
        // The API accepts 1...2000 (and treats it as approximate).
        if let limit { arg["limit"] = .int(min(max(limit, 1), 2000)) }
        return try listFolderPage(try rpc("files/list_folder", .object(arg)), cursorKnown: cursorKnown)
    }

    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try listFolderContinue(cursor: cursor) { _, _ in }
    }

    public func listFolderContinue(cursor: String,
                                   cursorKnown: (_ cursor: String, _ hasMore: Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        try listFolderPage(try rpc("files/list_folder/continue", .object(["cursor": .string(cursor)])), cursorKnown: cursorKnown)
    }

    /// Decodes a page, telling `cursorKnown` its cursor first: reading the cursor alone costs a
    /// scan of the text, decoding 2,000 entries several milliseconds.
    private func listFolderPage(_ body: [UInt8], cursorKnown: (String, Bool) -> Void) throws(DropboxError) -> ListFolderPage {
        let early = Decode.listFolderContinuation(body)
        if let early { cursorKnown(early.cursor, early.hasMore) }
        let page = try decodedPage(body)
        if early == nil { cursorKnown(page.cursor, page.hasMore) }
        return page
    }

    /// A `list_folder` page, with one log line for any entries it had to leave out.
    func decodedPage(_ body: [UInt8]) throws(DropboxError) -> ListFolderPage {
        let page = try Decode.listFolderPage(body)
        if page.skippedEntries > 0 {
            logger.warning("left out entries of a Dropbox listing that cannot be shown", metadata: [
                "entries": "\(page.skippedEntries)", "first": "\(page.firstSkipReason ?? "")"])
        }
        return page
    }

    public func latestCursor(path: String, recursive: Bool) throws(DropboxError) -> String {
        let arg = listFolderArg(path: path, recursive: recursive)
        return try Decode.cursor(try rpc("files/list_folder/get_latest_cursor", .object(arg)))
    }

    public func longpoll(cursor: String, timeout: Int) throws(DropboxError) -> LongpollResult {
        let timeout = min(max(timeout, 30), 480)
        // The server holds the request up to `timeout` plus 90 s of jitter (spec); py waits
        // timeout + 90; a little more so the server, not us, ends a quiet poll.
        let transportTimeout = Double(timeout + 90 + 15)
        let body = Array(JSONWriter.encode(.object(["cursor": .string(cursor), "timeout": .int(timeout)])).utf8)
        let url = endpoints.url(endpoints.notify, route: "files/list_folder/longpoll")
        let response = try perform(route: "files/list_folder/longpoll", auth: false, accept: [200],
                                   extraDeadline: transportTimeout) { _ throws(DropboxError) in
            // `noauth`: an Authorization header gets a 400 (dropbox-sdk-rust#15), and py drops
            // custom headers on noauth routes, so no path root either.
            HTTPRequest(method: .post, url: url, headers: [("Content-Type", "application/json")], body: body,
                        timeout: transportTimeout, maxResponseBytes: 64 << 10)
        }
        return try Decode.longpoll(response.body)
    }

    public func metadata(path: String) throws(DropboxError) -> Metadata {
        let arg: JSONValue = .object(["path": .string(path), "include_deleted": .bool(false)])
        return try Decode.metadata(try Decode.json(try rpc("files/get_metadata", arg), context: "get_metadata"),
                                   context: "get_metadata")
    }

    private func listFolderArg(path: String, recursive: Bool) -> JSONObject {
        // Every flag explicit, as py sends them; `include_deleted` false still reports deletions
        // on `continue` (chg).
        ["path": .string(path), "recursive": .bool(recursive), "include_deleted": .bool(false),
         "include_mounted_folders": .bool(true), "include_non_downloadable_files": .bool(true)]
    }
}
