// The Dropbox API routes: the entry point (which route, which style, authorization), namespaces
// and paths, and the metadata JSON every route shares. Each family of routes is in `Routes/`.
// Everything here runs on the blocking thread pool, never on an event loop: it stats, opens and
// hashes files.

import DropboxCase
import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

final class Router: Sendable {
    let index: FileIndex
    let auth: AuthStore
    let server: ServerState
    let configuration: EmulatorConfiguration
    let sharedLinks = SharedLinkRegistry()

    static let accountID = "dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"
    static let homeNamespace = "3235641"
    /// Only differs from the home namespace in team mode.
    var rootNamespace: String { configuration.teamMode ? "3235640" : Router.homeNamespace }

    init(index: FileIndex, auth: AuthStore, server: ServerState, configuration: EmulatorConfiguration) {
        self.index = index
        self.auth = auth
        self.server = server
        self.configuration = configuration
    }

    enum Style { case rpc, download }
    static let routes: [String: Style] = [
        "files/list_folder": .rpc, "files/list_folder/continue": .rpc, "files/list_folder/get_latest_cursor": .rpc,
        "files/list_folder/longpoll": .rpc, "files/get_metadata": .rpc, "files/download": .download,
        "files/export": .download, "files/get_thumbnail_batch": .rpc, "files/get_thumbnail_v2": .download,
        "users/get_current_account": .rpc, "users/get_space_usage": .rpc, "auth/token/revoke": .rpc,
        "sharing/get_shared_link_metadata": .rpc, "sharing/get_shared_link_file": .download,
    ]
    /// The scope each route needs (spec `files.stone`, `users.stone`, `sharing.stone`); a token
    /// granted fewer scopes gets 401 `missing_scope`. Longpoll takes no token, revoke no scope.
    static let requiredScope: [String: String] = [
        "files/list_folder": "files.metadata.read", "files/list_folder/continue": "files.metadata.read",
        "files/list_folder/get_latest_cursor": "files.metadata.read", "files/get_metadata": "files.metadata.read",
        "files/download": "files.content.read", "files/export": "files.content.read",
        "files/get_thumbnail_batch": "files.content.read", "files/get_thumbnail_v2": "files.content.read",
        "users/get_current_account": "account_info.read", "users/get_space_usage": "account_info.read",
        "sharing/get_shared_link_metadata": "sharing.read", "sharing/get_shared_link_file": "sharing.read",
    ]
    /// The scopes the emulated app was given in its Permissions tab.
    static let appScopes: Set<String> = Set(requiredScope.values)
    static let voidRoutes: Set<String> = ["users/get_current_account", "users/get_space_usage", "auth/token/revoke"]

    static let pathROrId = #"(/(.|[\r\n])*)?|id:.*|(ns:[0-9]+(/(.|[\r\n])*)?)"#
    static let readPath = #"(/(.|[\r\n])*|id:.*)|(rev:[0-9a-f]{9,})|(ns:[0-9]+(/(.|[\r\n])*)?)"#

    // MARK: Entry

    /// Answers one `/2/<route>` request. `eventLoop` is where longpoll completes.
    func handleAPI(route: String, request: EmulatorRequest, eventLoop: EventLoop) -> Reply {
        guard let style = Router.routes[route] else {
            return .text(.notFound, "Unknown API function: \"\(route)\"", [:])
        }
        // Read-your-writes: whatever changed on disk before this request arrived is visible to it.
        index.drain()

        if route == "files/list_folder/longpoll" {
            if request.headers.contains(name: "Authorization") {
                return .badInput(route, "Your request includes an Authorization header, but this function does not use it.")
            }
        } else {
            var header = request.headers.first(name: "Authorization")
            if header == nil, let param = request.query["authorization"] { header = param }
            guard let header else {
                return .badInput(route, "Must provide HTTP header \"Authorization\" or URL parameter \"authorization\".")
            }
            // Dropbox quotes a value it cannot parse whole, token and all (docs/dropbox-api.md §3).
            let unparsable = Reply.badInput(route, "Invalid authorization value in HTTP header \"Authorization\": \"\(header)\".  Expecting \"Bearer <oauth2-access-token>\".")
            let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0].lowercased() == "bearer" else { return unparsable }
            let token = String(parts[1])
            switch auth.verdict(for: token) {
            case .valid:
                if let required = Router.requiredScope[route], let granted = auth.scopes(of: token), !granted.contains(required) {
                    return .missingScope(required)
                }
            case .malformed: return unparsable
            case .invalid: return .authError("invalid_access_token")
            case .expired: return .authError("expired_access_token")
            }
            if route == "auth/token/revoke" {
                if let bad = checkVoidArg(route: route, request: request) { return bad }
                auth.revoke(token: token)
                return .json(.null)
            }
        }

        let arg: JSON
        switch style {
        case .rpc:
            guard request.method == .POST else {
                return .badInput(route, "Expected POST, got \(request.method.rawValue).")
            }
            if let ct = request.headers.first(name: "Content-Type"), !request.body.isEmpty,
               !["application/json", "application/json; charset=utf-8", "text/plain; charset=dropbox-cors-hack"].contains(ct.lowercased()) {
                return .badInput(route, "Bad HTTP \"Content-Type\" header: \"\(ct)\".  Expecting one of \"application/json\", \"application/json; charset=utf-8\", \"text/plain; charset=dropbox-cors-hack\".")
            }
            if Router.voidRoutes.contains(route) {
                if let bad = checkVoidArg(route: route, request: request) { return bad }
                arg = .null
            } else {
                guard let parsed = try? JSON.parse(request.body) else {
                    return .badInput(route, "request body: could not decode input as JSON")
                }
                arg = parsed
            }
        case .download:
            guard request.method == .POST || request.method == .GET else {
                return .badInput(route, "Expected POST or GET, got \(request.method.rawValue).")
            }
            if let ct = request.headers.first(name: "Content-Type"), !ct.isEmpty,
               !["application/octet-stream", "text/plain; charset=dropbox-cors-hack"].contains(ct.lowercased()) {
                return .badInput(route, "Bad HTTP \"Content-Type\" header: \"\(ct)\".  Expecting one of \"application/octet-stream\", \"text/plain; charset=dropbox-cors-hack\".")
            }
            let text: String
            let place: String
            if let header = request.headers.first(name: "Dropbox-API-Arg") {
                text = header
                place = "HTTP header \"Dropbox-API-Arg\""
            } else if let param = request.query["arg"] {
                text = param
                place = "URL parameter \"arg\""
            } else {
                return .badInput(route, "Must provide HTTP header \"Dropbox-API-Arg\" or URL parameter \"arg\".")
            }
            guard let parsed = try? JSON.parse(text) else {
                return .badInput(route, "\(place): could not decode input as JSON")
            }
            if route == "files/get_thumbnail_v2" { return thumbnailV2(arg: parsed, place: place, request: request, route: route) }
            if route == "sharing/get_shared_link_file" { return getSharedLinkFile(arg: parsed, place: place, request: request, route: route) }
            return handleDownload(route: route, arg: parsed, place: place, request: request)
        }

        switch route {
        case "files/list_folder" where !(arg["shared_link"]?.isNull ?? true):
            return listSharedLinkFolder(arg: arg, route: route)
        case "files/list_folder": return listFolder(arg: arg, request: request, latestOnly: false, route: route)
        case "sharing/get_shared_link_metadata": return getSharedLinkMetadata(arg: arg, route: route)
        case "files/list_folder/get_latest_cursor": return listFolder(arg: arg, request: request, latestOnly: true, route: route)
        case "files/list_folder/continue": return listFolderContinue(arg: arg, route: route)
        case "files/list_folder/longpoll": return longpoll(arg: arg, route: route, eventLoop: eventLoop)
        case "files/get_metadata": return getMetadata(arg: arg, request: request, route: route)
        case "files/get_thumbnail_batch": return thumbnailBatch(arg: arg, request: request, route: route)
        case "users/get_current_account": return getCurrentAccount()
        case "users/get_space_usage": return getSpaceUsage()
        default: return .text(.notFound, "Unknown API function: \"\(route)\"", [:])
        }
    }

    /// Void arguments: go sends no body, py sends `null`.
    func checkVoidArg(route: String, request: EmulatorRequest) -> Reply? {
        let text = String(decoding: request.body, as: UTF8.self).trimmingSpaces
        if text.isEmpty || text == "null" { return nil }
        return .badInput(route, "request body: expected null, got value")
    }

    // MARK: Namespaces and paths

    /// The folder (lowercased components from the served root) that paths are relative to,
    /// chosen by `Dropbox-API-Path-Root`.
    func pathBase(_ request: EmulatorRequest, route: String) -> Result<[String], ReplyBox> {
        let home: [String] = configuration.teamMode ? [configuration.teamHomeFolder.dropboxLowercased] : []
        guard let header = request.headers.first(name: "Dropbox-API-Path-Root") else { return .success(home) }
        guard let value = try? JSON.parse(header), let tag = value[".tag"]?.stringValue else {
            return .failure(ReplyBox(.badInput(route, "Invalid value for HTTP header \"Dropbox-API-Path-Root\": could not decode input as JSON")))
        }
        switch tag {
        case "home":
            return .success(home)
        case "root":
            guard let ns = value["root"]?.stringValue else {
                return .failure(ReplyBox(.badInput(route, "HTTP header \"Dropbox-API-Path-Root\": missing required field 'root'")))
            }
            if ns == rootNamespace { return .success([]) }
            return .failure(ReplyBox(pathRootError(invalidRoot: true)))
        case "namespace_id":
            guard let ns = value["namespace_id"]?.stringValue else {
                return .failure(ReplyBox(.badInput(route, "HTTP header \"Dropbox-API-Path-Root\": missing required field 'namespace_id'")))
            }
            if ns == rootNamespace { return .success([]) }
            if ns == Router.homeNamespace { return .success(home) }
            return .failure(ReplyBox(pathRootError(invalidRoot: false)))
        default:
            return .failure(ReplyBox(.badInput(route, "HTTP header \"Dropbox-API-Path-Root\": unknown tag '\(tag)'")))
        }
    }

    func pathRootError(invalidRoot: Bool) -> Reply {
        let error: JSON = invalidRoot
            ? .object([(".tag", .string("invalid_root")), ("invalid_root", rootInfo)])
            : .object([(".tag", .string("no_permission"))])
        return .json(HTTPResponseStatus(statusCode: 422), .object([
            ("error_summary", .string(invalidRoot ? "invalid_root/.." : "no_permission/..")),
            ("error", error),
        ]), [:])
    }

    var rootInfo: JSON {
        if configuration.teamMode {
            return .object([
                (".tag", .string("team")),
                ("root_namespace_id", .string(rootNamespace)),
                ("home_namespace_id", .string(Router.homeNamespace)),
                ("home_path", .string("/" + configuration.teamHomeFolder)),
            ])
        }
        return .object([
            (".tag", .string("user")),
            ("root_namespace_id", .string(rootNamespace)),
            ("home_namespace_id", .string(Router.homeNamespace)),
        ])
    }

    enum Target {
        case root
        case entry(EntrySnapshot)
    }

    /// Resolves a validated path argument against `base`; failures are 409 path errors.
    func resolve(_ path: String, base: [String]) -> Result<Target, ReplyBox> {
        func below(_ lower: [String], _ rest: [String]) -> Result<Target, ReplyBox> {
            if rest.contains(where: \.isEmpty) { return .failure(ReplyBox(.routeError(["path", "malformed_path"]))) }
            let full = lower + rest.map { $0.dropboxLowercased }
            if full.count == base.count, rest.isEmpty, full == base { return .success(.root) }
            guard let entry = index.lookup(lower: full) else { return .failure(ReplyBox(.routeError(["path", "not_found"]))) }
            return .success(.entry(entry))
        }
        func within(_ entry: EntrySnapshot) -> Bool {
            entry.components.count > base.count && Array(entry.components.prefix(base.count).map { $0.dropboxLowercased }) == base
        }
        if path.isEmpty {
            if !base.isEmpty, index.lookup(lower: base) == nil { return .failure(ReplyBox(.routeError(["path", "not_found"]))) }
            return .success(.root)
        }
        if path.hasSuffix("/") { return .failure(ReplyBox(.routeError(["path", "malformed_path"]))) }
        if path.hasPrefix("/") {
            if !base.isEmpty, index.lookup(lower: base) == nil { return .failure(ReplyBox(.routeError(["path", "not_found"]))) }
            return below(base, path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map(String.init))
        }
        if path.hasPrefix("rev:") {
            guard let entry = index.lookup(rev: String(path.dropFirst(4))), within(entry) else {
                return .failure(ReplyBox(.routeError(["path", "not_found"])))
            }
            return .success(.entry(entry))
        }
        if path.hasPrefix("id:") {
            let parts = path.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let entry = index.lookup(id: String(parts[0])), within(entry) else {
                return .failure(ReplyBox(.routeError(["path", "not_found"])))
            }
            if parts.count == 1 { return .success(.entry(entry)) }
            guard entry.kind == .folder else { return .failure(ReplyBox(.routeError(["path", "not_folder"]))) }
            return below(entry.components.map { $0.dropboxLowercased }, parts[1].split(separator: "/", omittingEmptySubsequences: false).map(String.init))
        }
        if path.hasPrefix("ns:") {
            let parts = path.dropFirst(3).split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            let ns = String(parts[0])
            let home: [String] = configuration.teamMode ? [configuration.teamHomeFolder.dropboxLowercased] : []
            let nsBase: [String]
            if ns == rootNamespace { nsBase = [] } else if ns == Router.homeNamespace { nsBase = home } else {
                return .failure(ReplyBox(.routeError(["path", "not_found"])))
            }
            // Entries outside the request's namespace have no path relative to it.
            guard nsBase.starts(with: base) else { return .failure(ReplyBox(.routeError(["path", "not_found"]))) }
            if parts.count == 1 { return nsBase == base ? .success(.root) : below(nsBase, []) }
            return below(nsBase, parts[1].split(separator: "/", omittingEmptySubsequences: false).map(String.init))
        }
        return .failure(ReplyBox(.routeError(["path", "malformed_path"])))
    }

    static func matches(_ path: String, readPath: Bool) -> Bool {
        if path.hasPrefix("/") || path.hasPrefix("id:") { return true }
        if path.isEmpty { return !readPath }
        if path.hasPrefix("ns:") {
            let rest = path.dropFirst(3)
            let digits = rest.prefix(while: { $0.isASCII && $0.isNumber })
            return !digits.isEmpty && (digits.count == rest.count || rest.dropFirst(digits.count).hasPrefix("/"))
        }
        if readPath, path.hasPrefix("rev:") {
            let hex = path.dropFirst(4)
            return hex.count >= 9 && hex.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
        }
        return false
    }

    // MARK: Metadata

    /// `withPaths` false: an entry seen through a shared link, which carries no path (the spec:
    /// null when the entry is not mounted in the caller's Dropbox).
    func metadata(_ e: EntrySnapshot, base: Int, tagged: Bool = true, withPaths: Bool = true) -> JSON {
        let rel = e.components.dropFirst(base)
        let display = "/" + rel.joined(separator: "/")
        func paths() -> [(String, JSON)] {
            withPaths ? [("path_lower", .string(display.dropboxLowercased)), ("path_display", .string(display))] : []
        }
        var pairs: [(String, JSON)] = []
        switch e.kind {
        case .file:
            if tagged { pairs.append((".tag", .string("file"))) }
            pairs += [
                ("name", .string(e.name)), ("id", .string(e.id)),
            ] + paths() + [
                ("client_modified", .string(dropboxTimestamp(e.clientModified))),
                ("server_modified", .string(dropboxTimestamp(e.serverModified))),
                ("rev", .string(e.rev)), ("size", .int(Int64(e.size))),
                ("is_downloadable", .bool(e.isDownloadable)),
            ]
            if !e.isDownloadable {
                pairs.append(("export_info", .object([
                    ("export_as", .string("html")),
                    ("export_options", .array([.string("html"), .string("markdown")])),
                ])))
            }
            if let hash = e.contentHash { pairs.append(("content_hash", .string(hash))) }
            if let target = e.symlinkTarget { pairs.append(("symlink_info", .object([("target", .string(target))]))) }
        case .folder:
            if tagged { pairs.append((".tag", .string("folder"))) }
            pairs += [("name", .string(e.name)), ("id", .string(e.id))] + paths()
        case .deleted:
            if tagged { pairs.append((".tag", .string("deleted"))) }
            pairs += [("name", .string(e.name))] + paths()
        }
        return .object(pairs)
    }
}

/// Lets a `Reply` travel as a typed error through `Result` and `try`.
struct ReplyBox: Error, Sendable {
    let reply: Reply
    init(_ reply: Reply) { self.reply = reply }
}

extension Error {
    var reply: Reply {
        (self as? ReplyBox)?.reply ?? .text(.internalServerError, "internal error: \(self)", [:])
    }
}

extension JSON {
    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int, .double: "number"
        case .string: "string"
        case .array: "list"
        case .object: "object"
        }
    }
}

extension StringProtocol {
    func trimmingCharacters(in set: String) -> String {
        var s = Substring(self)
        while let f = s.first, set.contains(f) { s = s.dropFirst() }
        while let l = s.last, set.contains(l) { s = s.dropLast() }
        return String(s)
    }
    var trimmingSpaces: String { trimmingCharacters(in: " \t\r\n") }
}

extension StringProtocol {
    /// Lowercased as Dropbox makes `path_lower` (`DropboxCase`), for every path and name key.
    var dropboxLowercased: String { DropboxCase.lowercased(self) }
}
