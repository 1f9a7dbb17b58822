// Shared links: a served folder or file published under a link URL (with an optional password
// and expiry), and the routes that read through one: sharing/get_shared_link_metadata,
// sharing/get_shared_link_file, and files/list_folder with `shared_link` (docs/dropbox-api.md §10).

import NIOHTTP1
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One published link. Its URL is made from its path, so an emulator restarted over the same tree
/// with the same links hands out the same URLs, as Dropbox keeps a link's URL.
struct PublishedLink: Sendable {
    /// Lower-cased components of what the link shows, from the served root.
    var lower: [String]
    var password: String?
    /// Seconds since 1970 after which the link no longer works.
    var expires: Int?
    var isFolder: Bool
    var token: String
    var key: String

    var url: String {
        "https://www.dropbox.com/scl/\(isFolder ? "fo" : "fi")/\(token)/\(slug)?rlkey=\(key)&dl=0"
    }
    /// What the link's page would be called; never used to find it.
    var slug: String {
        guard let last = lower.last else { return "root" }
        let kept = last.unicodeScalars.map { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) ? Character($0) : "-" }
        return String(kept.prefix(40))
    }
}

/// The links published so far, found by the token and `rlkey` in the URL a client sends (the rest
/// of it, such as `dl=1`, may differ, as it may for Dropbox).
final class SharedLinkRegistry: Sendable {
    private let links = Mutex<[String: PublishedLink]>([:])

    enum Problem: Error, CustomStringConvertible {
        case noSuchEntry(String)
        var description: String {
            switch self { case .noSuchEntry(let path): "nothing at \(path) to publish" }
        }
    }

    /// Publishes `path` (of `index`) and returns its URL; publishing it again replaces the
    /// password and expiry and keeps the URL.
    func publish(path: String, password: String?, expires: Int?, index: FileIndex) throws(Problem) -> String {
        index.drain()   // a path made just before is publishable
        let lower = path.split(separator: "/").map { $0.dropboxLowercased }
        let isFolder: Bool
        if lower.isEmpty { isFolder = true } else {
            guard let entry = index.lookup(lower: lower), entry.kind != .deleted else { throw .noSuchEntry(path) }
            isFolder = entry.kind == .folder
        }
        let joined = "/" + lower.joined(separator: "/")
        let link = PublishedLink(lower: lower, password: password, expires: expires, isFolder: isFolder,
                                 token: Self.digest(joined, salt: 1, length: 21), key: Self.digest(joined, salt: 2, length: 25))
        links.withLock { $0[link.token + "/" + link.key] = link }
        return link.url
    }

    func find(url: String) -> PublishedLink? {
        let lower = url.lowercased()
        let prefix = ["https://www.dropbox.com/", "https://dropbox.com/"].first { lower.hasPrefix($0) }
        guard let prefix else { return nil }
        let rest = url.dropFirst(prefix.count)
        let path = rest.prefix { $0 != "?" && $0 != "#" }
        let query = rest.dropFirst(path.count).dropFirst().prefix { $0 != "#" }
        let parts = path.split(separator: "/")
        guard parts.count >= 3, parts[0] == "scl", parts[1] == "fo" || parts[1] == "fi" else { return nil }
        let key = query.split(separator: "&").first { $0.hasPrefix("rlkey=") }.map { String($0.dropFirst(6)) }
        guard let key else { return nil }
        return links.withLock { $0[String(parts[2]) + "/" + key] }
    }

    var all: [PublishedLink] { links.withLock { Array($0.values) } }

    /// A lower-case base-36 digest of `text` (FNV-1a, stretched): stable across runs.
    private static func digest(_ text: String, salt: UInt64, length: Int) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ salt
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        var out = ""
        var round: UInt64 = 0
        while out.count < length {
            for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            hash = (hash ^ round) &* 0x100_0000_01b3
            round += 1
            var h = hash
            for _ in 0..<6 where out.count < length {
                out.append(alphabet[Int(h % 36)])
                h /= 36
            }
        }
        return out
    }
}

extension Router {
    /// What a link argument names, once the link, its password and its expiry are checked.
    struct LinkTarget {
        var link: PublishedLink
        var entry: EntrySnapshot?   // nil: the served root itself
        var lower: [String]
        var isFolder: Bool
    }

    /// Resolves `url` (with `password`) and a path relative to the link; failures are the 409s
    /// `SharedLinkError` names. An expired link is `shared_link_not_found`, as Dropbox answers
    /// for a link that no longer works.
    func linkTarget(url: String, password: String?, path: String?) -> Result<LinkTarget, ReplyBox> {
        guard let link = sharedLinks.find(url: url) else { return .failure(ReplyBox(.routeError(["shared_link_not_found"]))) }
        if let expires = link.expires, time(nil) >= expires {
            return .failure(ReplyBox(.routeError(["shared_link_not_found"])))
        }
        if let wanted = link.password, wanted != password { return .failure(ReplyBox(.routeError(["shared_link_access_denied"]))) }
        var lower = link.lower
        if let path, !path.isEmpty, path != "/" {
            guard link.isFolder else { return .failure(ReplyBox(.routeError(["shared_link_not_found"]))) }
            let rest = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
            guard path.hasPrefix("/"), !rest.contains(where: \.isEmpty) else {
                return .failure(ReplyBox(.routeError(["shared_link_not_found"])))
            }
            lower += rest.map { $0.dropboxLowercased }
        }
        if lower.isEmpty { return .success(LinkTarget(link: link, entry: nil, lower: [], isFolder: true)) }
        guard let entry = index.lookup(lower: lower), entry.kind != .deleted else {
            return .failure(ReplyBox(.routeError(["shared_link_not_found"])))
        }
        return .success(LinkTarget(link: link, entry: entry, lower: lower, isFolder: entry.kind == .folder))
    }

    /// `url`, `path` and `link_password` of a sharing route's argument.
    func linkArg(_ arg: JSON, route: String, place: String = "request body") -> Result<(String, String?, String?), ReplyBox> {
        guard case .object = arg else { return .failure(ReplyBox(.badInput(route, "\(place): expected object, got \(arg.typeName)"))) }
        guard let v = arg["url"] else { return .failure(ReplyBox(.badInput(route, "\(place): missing required field 'url'"))) }
        guard let url = v.stringValue else { return .failure(ReplyBox(.badInput(route, "\(place): url: expected string, got \(v.typeName)"))) }
        var fields: [String?] = []
        for key in ["path", "link_password"] {
            guard let value = arg[key], !value.isNull else { fields.append(nil); continue }
            guard let text = value.stringValue else {
                return .failure(ReplyBox(.badInput(route, "\(place): \(key): expected string, got \(value.typeName)")))
            }
            fields.append(text)
        }
        if let path = fields[0], !path.isEmpty, !path.hasPrefix("/") {
            return .failure(ReplyBox(.badInput(route, "\(place): path: '\(path)' did not match pattern '/(.|[\\r\\n])*'")))
        }
        return .success((url, fields[0], fields[1]))
    }

    /// `SharedLinkMetadata` of what a link argument names: a file's rev, size and times, or a
    /// folder; no `path_lower`, which Dropbox gives only to the link's owner.
    func linkMetadata(_ target: LinkTarget, url: String) -> JSON {
        var pairs: [(String, JSON)] = [(".tag", .string(target.isFolder ? "folder" : "file")), ("url", .string(url))]
        let name = target.entry?.name ?? "Dropbox"
        if let entry = target.entry { pairs.append(("id", .string(entry.id))) }
        pairs.append(("name", .string(name)))
        if let expires = target.link.expires { pairs.append(("expires", .string(dropboxTimestamp(expires)))) }
        pairs.append(("link_permissions", .object([
            ("resolved_visibility", .object([(".tag", .string(target.link.password == nil ? "public" : "password"))])),
            ("can_revoke", .bool(false)),
            ("revoke_failure_reason", .object([(".tag", .string("owner_only"))])),
            ("visibility_policies", .array([])),
            ("can_set_expiry", .bool(false)), ("can_remove_expiry", .bool(false)),
            ("allow_download", .bool(true)), ("can_allow_download", .bool(false)), ("can_disallow_download", .bool(false)),
            ("allow_comments", .bool(false)), ("team_restricts_comments", .bool(false)),
            ("require_password", .bool(target.link.password != nil)),
        ])))
        if !target.isFolder, let entry = target.entry {
            pairs += [
                ("client_modified", .string(dropboxTimestamp(entry.clientModified))),
                ("server_modified", .string(dropboxTimestamp(entry.serverModified))),
                ("rev", .string(entry.rev)), ("size", .int(Int64(entry.size))),
            ]
        }
        return .object(pairs)
    }

    func getSharedLinkMetadata(arg: JSON, route: String) -> Reply {
        do {
            let (url, path, password) = try linkArg(arg, route: route).get()
            let target = try linkTarget(url: url, password: password, path: path).get()
            return .json(linkMetadata(target, url: url))
        } catch {
            return error.reply
        }
    }

    /// The file's bytes, with `Range` honoured unless the `link_range` knob says to ignore it
    /// (Dropbox does not document Range on this route; a client must cope with a whole 200).
    func getSharedLinkFile(arg: JSON, place: String, request: EmulatorRequest, route: String) -> Reply {
        do {
            let (url, path, password) = try linkArg(arg, route: route, place: place).get()
            let target = try linkTarget(url: url, password: password, path: path).get()
            guard !target.isFolder, let entry = target.entry else { return .routeError(["shared_link_is_directory"]) }
            guard entry.isDownloadable else { return .routeError(["unsupported_link_type"]) }
            let honourRange = server.currentKnobs.linkRange
            return serveFile(entry, request: request, honourRange: honourRange) { opened in
                var seen = target
                seen.entry = opened
                return linkMetadata(seen, url: url)
            }
        } catch {
            return error.reply
        }
    }

    /// `files/list_folder` with `shared_link`: one folder of the link (Dropbox lists links only
    /// non-recursively), entries without paths, a cursor that remembers the link.
    func listSharedLinkFolder(arg: JSON, route: String) -> Reply {
        guard let url = arg["shared_link"]?["url"]?.stringValue else {
            return .badInput(route, "request body: shared_link: missing required field 'url'")
        }
        let password = arg["shared_link"]?["password"]?.stringValue
        if arg["recursive"]?.boolValue == true {
            return .badInput(route, "request body: recursive: Only non-recursive mode is supported for shared link.")
        }
        guard let path = arg["path"]?.stringValue else { return .badInput(route, "request body: missing required field 'path'") }
        let limit: Int?
        switch limitArg(arg, route: route) {
        case .success(let value): limit = value
        case .failure(let box): return box.reply
        }
        // A link listing's problems come back as list_folder's own path errors.
        let target: LinkTarget
        switch linkTarget(url: url, password: password, path: path) {
        case .success(let t): target = t
        case .failure(let box):
            return box.reply.routeErrorTags == ["shared_link_access_denied"]
                ? .routeError(["path", "restricted_content"]) : .routeError(["path", "not_found"])
        }
        guard target.isFolder else { return .routeError(["path", "not_folder"]) }
        let includeNonDownloadable = arg["include_non_downloadable_files"]?.boolValue ?? true
        let cursor = Cursor(boot: index.bootID, epoch: index.cursorEpoch, base: target.lower.count, folder: target.lower,
                            recursive: false, includeNonDownloadable: includeNonDownloadable, limit: limit,
                            seq: index.currentSeq, resume: [], link: target.link.url)
        return page(cursor: cursor)
    }
}

extension Admin {
    /// `POST /__admin/shared_links {"path", "password"?, "expires"? (seconds since 1970)}` publishes
    /// a link and answers `{"url"}`; `GET` lists them.
    static func sharedLinks(_ request: EmulatorRequest, app: App) -> Reply {
        if request.method == .GET {
            return .json(.array(app.router.sharedLinks.all.map { link in
                .object([("url", .string(link.url)), ("path", .string("/" + link.lower.joined(separator: "/"))),
                         ("password", .bool(link.password != nil))])
            }))
        }
        guard let body = try? JSON.parse(request.body), let path = body["path"]?.stringValue else {
            return .text(.badRequest, "shared_links: body must be {\"path\": ...}", [:])
        }
        let expires = body["expires"]?.intValue.map { Int($0) }
        do {
            let url = try app.router.sharedLinks.publish(path: path, password: body["password"]?.stringValue, expires: expires,
                                                         index: app.router.index)
            return .json(.object([("url", .string(url))]))
        } catch {
            return .text(.badRequest, "shared_links: \(error)", [:])
        }
    }
}
