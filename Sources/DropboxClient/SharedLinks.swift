// Shared links (docs/dropbox-api.md §10): what a link shows (`sharing/get_shared_link_metadata`),
// one folder of it at a time (`files/list_folder` with `shared_link`, paths relative to the link),
// and a file's bytes (`sharing/get_shared_link_file`, with Range, coping with a whole 200).

/// A shared link and its password, if it has one. The password goes only into request bodies and
/// `Dropbox-API-Arg`, never into a log or an error.
public struct SharedLink: Sendable, Equatable {
    public var url: String
    public var password: String?

    public init(url: String, password: String? = nil) {
        self.url = url
        self.password = password
    }

    /// Whether `text` is meant as a link rather than a Dropbox path.
    public static func looksLikeLink(_ text: String) -> Bool {
        let lower = text.lowercased()
        return lower.hasPrefix("https://") || lower.hasPrefix("http://")
    }

    /// Why `text` cannot be a link URL, or nil: an http(s) URL with a host and a path, nothing
    /// that needs escaping (a link is pasted as Dropbox printed it), at most 2,048 characters.
    public static func problem(with text: String) -> String? {
        guard text.utf8.count <= 2048 else { return "a shared link URL is at most 2,048 characters" }
        guard looksLikeLink(text) else { return "not an http(s) URL" }
        let rest = text.drop { $0 != ":" }.dropFirst(3)
        let host = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !host.isEmpty, !host.contains("@") else { return "no host in the URL" }
        guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
            return "spaces or other characters a URL cannot hold"
        }
        guard rest.dropFirst(host.count).hasPrefix("/"), rest.count > host.count + 1 else { return "no path in the URL" }
        return nil
    }

    /// The URL without its query (where `rlkey`, the link's secret part, lives), for logs and status.
    public var redactedURL: String {
        guard let question = url.firstIndex(of: "?") else { return url }
        return url[..<question] + "?..."
    }

    /// The sharing routes' argument: the link, its password, and a path relative to a folder link.
    func argument(path: String?) -> JSONValue {
        var object: JSONObject = ["url": .string(url)]
        if let path { object["path"] = .string(path) }
        if let password { object["link_password"] = .string(password) }
        return .object(object)
    }
}

/// What a shared link (or a path inside a folder link) names.
public enum SharedLinkTarget: Sendable, Equatable {
    case file(FileMetadata)
    case folder(name: String, id: String?)
}

extension DropboxHTTPClient {
    /// `sharing/get_shared_link_metadata`; `path` is relative to a folder link ("/a/b"), nil for
    /// the link itself. Errors: `shared_link_not_found` (also an expired link),
    /// `shared_link_access_denied` (also a missing or wrong password), `unsupported_link_type`.
    public func sharedLinkMetadata(_ link: SharedLink, path: String? = nil) throws(DropboxError) -> SharedLinkTarget {
        let body = try rpc("sharing/get_shared_link_metadata", link.argument(path: path))
        return try Decode.sharedLinkTarget(try Decode.json(body, context: "get_shared_link_metadata"))
    }

    /// One folder of a folder link: `path` "" for the link's root, "/a/b" below it. Dropbox lists
    /// links only non-recursively; `list_folder/continue` goes on from the cursor as usual.
    public func listFolder(in link: SharedLink, path: String, limit: Int?) throws(DropboxError) -> ListFolderPage {
        var shared: JSONObject = ["url": .string(link.url)]
        if let password = link.password { shared["password"] = .string(password) }
        var arg: JSONObject = ["path": .string(path), "recursive": .bool(false), "shared_link": .object(shared),
                               "include_non_downloadable_files": .bool(true)]
        if let limit { arg["limit"] = .int(min(max(limit, 1), 2000)) }
        return try decodedPage(try rpc("files/list_folder", .object(arg)))
    }

    /// `range` of the link's file (`path` nil) or of a file inside a folder link, streamed. The
    /// route takes no rev: with `rev`, an answer whose `Dropbox-API-Result` names another rev (the
    /// file changed since it was listed) is `path/not_found` before any byte of it is handed on.
    public func downloadFromLink(_ link: SharedLink, path: String?, rev: String? = nil, range: Range<UInt64>,
                                 into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        try rangedDownload(route: "sharing/get_shared_link_file", arg: link.argument(path: path), expectedRev: rev,
                                  range: range, into: consumer)
    }
}

extension DropboxHTTPClient {
    /// `files/get_thumbnail_v2` of a link's file (`path` relative to a folder link, nil for a
    /// file link): the encoded image. Failures are `ThumbnailV2Error` route errors
    /// (`unsupported_extension`, `unsupported_image`, `not_found`, `access_denied`, ...).
    public func thumbnail(in link: SharedLink, path: String?, format: ThumbnailFormat, size: ThumbnailSize,
                          mode: ThumbnailMode) throws(DropboxError) -> [UInt8] {
        var resource: JSONObject = [".tag": .string("link"), "url": .string(link.url)]
        if let path { resource["path"] = .string(path) }
        if let password = link.password { resource["password"] = .string(password) }
        let arg: JSONValue = .object(["resource": .object(resource), "format": .string(format.rawValue),
                                      "size": .string(size.rawValue), "mode": .string(mode.rawValue)])
        return try send(route: "files/get_thumbnail_v2", host: endpoints.content, maxResponseBytes: 16 << 20,
                        headers: [("Dropbox-API-Arg", JSONWriter.encode(arg, headerSafe: true))]).body
    }
}

extension Decode {
    static func sharedLinkTarget(_ value: JSONValue) throws(DropboxError) -> SharedLinkTarget {
        let context = "get_shared_link_metadata"
        let f = try JSONFields(value, context: context)
        let name = try f.string("name")
        guard !name.isEmpty, !name.utf8.contains(UInt8(ascii: "/")), !name.utf8.contains(0) else {
            throw .malformedResponse("\(context): invalid name")
        }
        switch try f.string(".tag") {
        case "file":
            return .file(FileMetadata(
                name: name, id: try f.optionalString("id") ?? "", pathLower: nil, pathDisplay: nil,
                clientModified: try f.timestamp("client_modified"), serverModified: try f.timestamp("server_modified"),
                rev: try f.string("rev"), size: try f.uint64("size"), isDownloadable: true, contentHash: nil, exportAs: nil))
        case "folder":
            return .folder(name: name, id: try f.optionalString("id"))
        case let other:
            throw .malformedResponse("\(context): a link to a \"\(other.prefix(40))\", neither a file nor a folder")
        }
    }
}
