// The Dropbox API routes. Everything here runs on the blocking thread pool, never on an event
// loop: it stats, opens and hashes files.

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
        "files/export": .download, "users/get_current_account": .rpc, "users/get_space_usage": .rpc,
        "auth/token/revoke": .rpc,
    ]
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
            let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0].lowercased() == "bearer" else {
                return .badInput(route, "Invalid authorization value in HTTP header \"Authorization\": \"\(header)\".  Expecting \"Bearer <oauth2-access-token>\".")
            }
            let token = String(parts[1])
            switch auth.verdict(for: token) {
            case .valid: break
            case .malformed: return .badInput(route, "The given OAuth 2 access token is malformed.")
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
            arg = parsed
            return handleDownload(route: route, arg: arg, place: place, request: request)
        }

        switch route {
        case "files/list_folder": return listFolder(arg: arg, request: request, latestOnly: false, route: route)
        case "files/list_folder/get_latest_cursor": return listFolder(arg: arg, request: request, latestOnly: true, route: route)
        case "files/list_folder/continue": return listFolderContinue(arg: arg, route: route)
        case "files/list_folder/longpoll": return longpoll(arg: arg, route: route, eventLoop: eventLoop)
        case "files/get_metadata": return getMetadata(arg: arg, request: request, route: route)
        case "users/get_current_account": return getCurrentAccount()
        case "users/get_space_usage": return getSpaceUsage()
        default: return .text(.notFound, "Unknown API function: \"\(route)\"", [:])
        }
    }

    /// Void arguments: go sends no body, py sends `null`.
    private func checkVoidArg(route: String, request: EmulatorRequest) -> Reply? {
        let text = String(decoding: request.body, as: UTF8.self).trimmingSpaces
        if text.isEmpty || text == "null" { return nil }
        return .badInput(route, "request body: expected null, got value")
    }

    // MARK: Namespaces and paths

    /// The folder (lowercased components from the served root) that paths are relative to,
    /// chosen by `Dropbox-API-Path-Root`.
    private func pathBase(_ request: EmulatorRequest, route: String) -> Result<[String], ReplyBox> {
        let home: [String] = configuration.teamMode ? [configuration.teamHomeFolder.lowercased()] : []
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

    private func pathRootError(invalidRoot: Bool) -> Reply {
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
    private func resolve(_ path: String, base: [String]) -> Result<Target, ReplyBox> {
        func below(_ lower: [String], _ rest: [String]) -> Result<Target, ReplyBox> {
            if rest.contains(where: \.isEmpty) { return .failure(ReplyBox(.routeError(["path", "malformed_path"]))) }
            let full = lower + rest.map { $0.lowercased() }
            if full.count == base.count, rest.isEmpty, full == base { return .success(.root) }
            guard let entry = index.lookup(lower: full) else { return .failure(ReplyBox(.routeError(["path", "not_found"]))) }
            return .success(.entry(entry))
        }
        func within(_ entry: EntrySnapshot) -> Bool {
            entry.components.count > base.count && Array(entry.components.prefix(base.count).map { $0.lowercased() }) == base
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
            return below(entry.components.map { $0.lowercased() }, parts[1].split(separator: "/", omittingEmptySubsequences: false).map(String.init))
        }
        if path.hasPrefix("ns:") {
            let parts = path.dropFirst(3).split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            let ns = String(parts[0])
            let home: [String] = configuration.teamMode ? [configuration.teamHomeFolder.lowercased()] : []
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

    func metadata(_ e: EntrySnapshot, base: Int, tagged: Bool = true) -> JSON {
        let rel = e.components.dropFirst(base)
        let display = "/" + rel.joined(separator: "/")
        var pairs: [(String, JSON)] = []
        switch e.kind {
        case .file:
            if tagged { pairs.append((".tag", .string("file"))) }
            pairs += [
                ("name", .string(e.name)), ("id", .string(e.id)),
                ("path_lower", .string(display.lowercased())), ("path_display", .string(display)),
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
        case .folder:
            if tagged { pairs.append((".tag", .string("folder"))) }
            pairs += [
                ("name", .string(e.name)), ("id", .string(e.id)),
                ("path_lower", .string(display.lowercased())), ("path_display", .string(display)),
            ]
        case .deleted:
            if tagged { pairs.append((".tag", .string("deleted"))) }
            pairs += [("name", .string(e.name)), ("path_lower", .string(display.lowercased())), ("path_display", .string(display))]
        }
        return .object(pairs)
    }

    // MARK: list_folder

    struct Cursor {
        var boot: UInt64
        var epoch: Int
        var base: Int
        var folder: [String]
        var recursive: Bool
        var includeNonDownloadable: Bool
        var limit: Int?
        var seq: UInt64
        var resume: [String]?

        var encoded: String {
            var pairs: [(String, JSON)] = [
                ("b", .string(String(boot, radix: 16))), ("e", .int(Int64(epoch))), ("n", .int(Int64(base))),
                ("f", .array(folder.map { .string($0) })), ("r", .bool(recursive)), ("d", .bool(includeNonDownloadable)),
                ("s", .string(String(seq))),
            ]
            if let limit { pairs.append(("l", .int(Int64(limit)))) }
            if let resume { pairs.append(("k", .array(resume.map { .string($0) }))) }
            return "AAE" + base64URL(Array(JSON.object(pairs).serialized().utf8))
        }

        init(boot: UInt64, epoch: Int, base: Int, folder: [String], recursive: Bool, includeNonDownloadable: Bool, limit: Int?, seq: UInt64, resume: [String]?) {
            self.boot = boot; self.epoch = epoch; self.base = base; self.folder = folder; self.recursive = recursive
            self.includeNonDownloadable = includeNonDownloadable; self.limit = limit; self.seq = seq; self.resume = resume
        }

        init?(_ text: String) {
            guard text.hasPrefix("AAE"), let bytes = base64URLDecode(String(text.dropFirst(3))),
                  let json = try? JSON.parse(bytes),
                  let boot = json["b"]?.stringValue.flatMap({ UInt64($0, radix: 16) }),
                  let epoch = json["e"]?.intValue, let base = json["n"]?.intValue,
                  case .array(let folder)? = json["f"], let recursive = json["r"]?.boolValue,
                  let nd = json["d"]?.boolValue, let seq = json["s"]?.stringValue.flatMap({ UInt64($0) })
            else { return nil }
            self.boot = boot; self.epoch = Int(epoch); self.base = Int(base)
            self.folder = folder.compactMap(\.stringValue); self.recursive = recursive
            self.includeNonDownloadable = nd; self.seq = seq
            self.limit = json["l"]?.intValue.map { Int($0) }
            if case .array(let k)? = json["k"] { resume = k.compactMap(\.stringValue) } else { resume = nil }
        }
    }

    private func boolArg(_ arg: JSON, _ key: String, default value: Bool, route: String) -> Result<Bool, ReplyBox> {
        guard let v = arg[key], !v.isNull else { return .success(value) }
        guard let b = v.boolValue else { return .failure(ReplyBox(.badInput(route, "request body: \(key): expected boolean, got \(v.typeName)"))) }
        return .success(b)
    }

    private func pathArg(_ arg: JSON, route: String, readPath: Bool, place: String = "request body") -> Result<String, ReplyBox> {
        guard case .object = arg else { return .failure(ReplyBox(.badInput(route, "\(place): expected object, got \(arg.typeName)"))) }
        guard let v = arg["path"] else { return .failure(ReplyBox(.badInput(route, "\(place): missing required field 'path'"))) }
        guard let path = v.stringValue else { return .failure(ReplyBox(.badInput(route, "\(place): path: expected string, got \(v.typeName)"))) }
        if !readPath && path == "/" {
            return .failure(ReplyBox(.badInput(route, "\(place): path: Specify the root folder as an empty string rather than as \"/\".")))
        }
        if readPath && (path.isEmpty || path == "/") && route == "files/get_metadata" {
            return .failure(ReplyBox(.badInput(route, "\(place): path: The root folder is unsupported.")))
        }
        guard Router.matches(path, readPath: readPath) else {
            let pattern = readPath ? Router.readPath : Router.pathROrId
            return .failure(ReplyBox(.badInput(route, "\(place): path: '\(path)' did not match pattern '\(pattern)'")))
        }
        return .success(path)
    }

    private func listFolder(arg: JSON, request: EmulatorRequest, latestOnly: Bool, route: String) -> Reply {
        do {
            let path = try pathArg(arg, route: route, readPath: false).get()
            let recursive = try boolArg(arg, "recursive", default: false, route: route).get()
            _ = try boolArg(arg, "include_deleted", default: false, route: route).get()
            _ = try boolArg(arg, "include_mounted_folders", default: true, route: route).get()
            _ = try boolArg(arg, "include_media_info", default: false, route: route).get()
            _ = try boolArg(arg, "include_has_explicit_shared_members", default: false, route: route).get()
            let includeNonDownloadable = try boolArg(arg, "include_non_downloadable_files", default: true, route: route).get()
            var limit: Int? = nil
            if let v = arg["limit"], !v.isNull {
                guard let l = v.intValue else { return .badInput(route, "request body: limit: expected integer, got \(v.typeName)") }
                guard (1...2000).contains(l) else { return .badInput(route, "request body: limit: \(l) is not within range [1, 2000]") }
                limit = Int(l)
            }
            let base = try pathBase(request, route: route).get()
            let folder: [String]
            switch try resolve(path, base: base).get() {
            case .root: folder = base
            case .entry(let e):
                guard e.kind == .folder else { return .routeError(["path", "not_folder"]) }
                folder = e.components.map { $0.lowercased() }
            }
            let seq = index.currentSeq
            var cursor = Cursor(boot: index.bootID, epoch: index.cursorEpoch, base: base.count, folder: folder,
                                recursive: recursive, includeNonDownloadable: includeNonDownloadable, limit: limit, seq: seq, resume: [])
            if latestOnly {
                cursor.resume = nil
                return .json(.object([("cursor", .string(cursor.encoded))]))
            }
            return page(cursor: cursor)
        } catch {
            return error.reply
        }
    }

    private func page(cursor: Cursor) -> Reply {
        let pageSize = min(cursor.limit ?? EmulatorConfiguration.defaultPageSize, server.currentKnobs.pageSizeCap)
        var next = cursor
        let page: Page
        if let resume = cursor.resume {
            guard let p = index.listPage(folder: cursor.folder, resumeAfter: resume, recursive: cursor.recursive, limit: max(1, pageSize),
                                         includeNonDownloadable: cursor.includeNonDownloadable, seq: cursor.seq) else {
                return .routeError(["path", "not_found"])
            }
            page = p
            next.resume = p.resumeAfter
        } else {
            page = index.changes(folder: cursor.folder.isEmpty ? "" : "/" + cursor.folder.joined(separator: "/"),
                                 recursive: cursor.recursive, since: cursor.seq, limit: max(1, pageSize),
                                 includeNonDownloadable: cursor.includeNonDownloadable)
            next.seq = page.seq
        }
        let entries = index.withHashes(page.entries).map { metadata($0, base: cursor.base) }
        return .json(.object([
            ("entries", .array(entries)),
            ("cursor", .string(next.encoded)),
            ("has_more", .bool(page.hasMore)),
        ]))
    }

    /// Validates a cursor argument; `reset` when it can no longer be served.
    private func cursorArg(_ arg: JSON, route: String) -> Result<Cursor, ReplyBox> {
        guard let v = arg["cursor"] else { return .failure(ReplyBox(.badInput(route, "request body: missing required field 'cursor'"))) }
        guard let text = v.stringValue else { return .failure(ReplyBox(.badInput(route, "request body: cursor: expected string, got \(v.typeName)"))) }
        guard let cursor = Cursor(text) else {
            return .failure(ReplyBox(.badInput(route, "Invalid \"cursor\" parameter: \(JSON.string(text).serialized())")))
        }
        guard index.isCursorUsable(seq: cursor.seq, epoch: cursor.epoch, boot: cursor.boot) else {
            return .failure(ReplyBox(.routeError(["reset"])))
        }
        return .success(cursor)
    }

    private func listFolderContinue(arg: JSON, route: String) -> Reply {
        do {
            let cursor = try cursorArg(arg, route: route).get()
            if !cursor.folder.isEmpty {
                guard let folder = index.lookup(lower: cursor.folder), folder.kind == .folder else {
                    return .routeError(["path", "not_found"])
                }
            }
            return page(cursor: cursor)
        } catch {
            return error.reply
        }
    }

    private func longpoll(arg: JSON, route: String, eventLoop: EventLoop) -> Reply {
        do {
            let cursor = try cursorArg(arg, route: route).get()
            var timeout: Int64 = 30
            if let v = arg["timeout"], !v.isNull {
                guard let t = v.intValue else { return .badInput(route, "request body: timeout: expected integer, got \(v.typeName)") }
                guard (30...480).contains(t) else { return .badInput(route, "request body: timeout: \(t) is not within range [30, 480]") }
                timeout = t
            }
            let knobs = server.currentKnobs
            if let cap = knobs.longpollMaxWait { timeout = min(timeout, Int64(cap)) }
            @Sendable func answer(_ changes: Bool) -> Reply {
                var pairs: [(String, JSON)] = [("changes", .bool(changes))]
                if let backoff = knobs.longpollBackoff { pairs.append(("backoff", .int(Int64(backoff)))) }
                return .json(.object(pairs))
            }
            let scope = cursor.folder.isEmpty ? "" : "/" + cursor.folder.joined(separator: "/")
            let promise = eventLoop.makePromise(of: Reply.self)
            guard let token = index.addWaiter(LongpollWaiter(scope: scope, recursive: cursor.recursive, seq: cursor.seq,
                                                             wake: { promise.succeed(answer(true)) })) else {
                promise.succeed(answer(true))
                return .later(promise.futureResult)
            }
            let index = self.index
            eventLoop.scheduleTask(in: .seconds(timeout)) {
                if index.cancelWaiter(token) { promise.succeed(answer(false)) }
            }
            return .later(promise.futureResult)
        } catch {
            return error.reply
        }
    }

    // MARK: get_metadata

    private func getMetadata(arg: JSON, request: EmulatorRequest, route: String) -> Reply {
        do {
            let path = try pathArg(arg, route: route, readPath: true).get()
            let includeDeleted = try boolArg(arg, "include_deleted", default: false, route: route).get()
            _ = try boolArg(arg, "include_media_info", default: false, route: route).get()
            _ = try boolArg(arg, "include_has_explicit_shared_members", default: false, route: route).get()
            let base = try pathBase(request, route: route).get()
            switch resolve(path, base: base) {
            case .success(.root):
                return .badInput(route, "request body: path: The root folder is unsupported.")
            case .success(.entry(let e)):
                return .json(metadata(index.withHashes([e])[0], base: base.count))
            case .failure(let failure):
                if includeDeleted, path.hasPrefix("/"), case .json(.conflict, _, _) = failure.reply {
                    let rel = path.dropFirst().split(separator: "/").map(String.init)
                    if let name = rel.last, index.wasDeleted(lower: (base + rel.map { $0.lowercased() })) {
                        let real = (base.isEmpty ? [] : [configuration.teamHomeFolder]) + rel
                        return .json(metadata(EntrySnapshot(kind: .deleted, name: name, components: real), base: base.count))
                    }
                }
                return failure.reply
            }
        } catch {
            return error.reply
        }
    }

    // MARK: download and export

    private func handleDownload(route: String, arg: JSON, place: String, request: EmulatorRequest) -> Reply {
        do {
            let path = try pathArg(arg, route: route, readPath: true, place: place).get()
            let base = try pathBase(request, route: route).get()
            guard case .entry(let found) = try resolve(path, base: base).get() else {
                return .routeError(["path", "not_file"])
            }
            guard found.kind == .file else { return .routeError(["path", "not_file"]) }
            if let rev = arg["rev"]?.stringValue, rev != found.rev { return .routeError(["path", "not_found"]) }
            var exportFormat = "html"
            if route == "files/export" {
                guard !found.isDownloadable else { return .routeError(["non_exportable"]) }
                if let f = arg["export_format"]?.stringValue {
                    guard ["html", "markdown"].contains(f) else { return .routeError(["invalid_export_format"]) }
                    exportFormat = f
                }
            } else if !found.isDownloadable {
                return .routeError(["unsupported_file"])
            }

            let fd = open(index.realPath(found.components), O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return .routeError(["path", "not_found"]) }
            var st = stat()
            fstat(fd, &st)
            let size = Int64(st.st_size)
            var entry = index.withHashes([found])[0]
            entry.size = UInt64(size)
            let result: JSON
            if route == "files/export" {
                let stem = entry.name.dropLast(".paper".count)
                result = .object([
                    ("export_metadata", .object([
                        ("name", .string(stem + (exportFormat == "html" ? ".html" : ".md"))),
                        ("size", .int(size)),
                        ("export_hash", entry.contentHash.map { .string($0) } ?? .null),
                    ])),
                    ("file_metadata", metadata(entry, base: base.count, tagged: false)),
                ])
            } else {
                // Real download responses carry FileMetadata without ".tag".
                result = metadata(entry, base: base.count, tagged: false)
            }
            var headers: HTTPHeaders = [
                "Dropbox-API-Result": result.serialized(asciiOnly: true),
                "Accept-Ranges": "bytes",
                "ETag": "W/\"\(entry.rev)\"",
            ]
            if let inm = request.headers.first(name: "If-None-Match"),
               inm.split(separator: ",").contains(where: { $0.trimmingCharacters(in: " ") == "W/\"\(entry.rev)\"" || $0.trimmingCharacters(in: " ") == "\"\(entry.rev)\"" || $0.trimmingCharacters(in: " ") == "*" }) {
                close(fd)
                return .empty(.notModified, headers)
            }
            headers.add(name: "Content-Type", value: "application/octet-stream")
            switch Router.parseRange(request.headers.first(name: "Range"), size: size) {
            case .none:
                return .file(.ok, headers, FileBody(fd: fd, offset: 0, length: size))
            case .some(.some(let range)):
                headers.add(name: "Content-Range", value: "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(size)")
                return .file(.partialContent, headers, FileBody(fd: fd, offset: range.lowerBound, length: range.upperBound - range.lowerBound))
            case .some(.none):
                close(fd)
                if server.currentKnobs.rangePastEnd == .route409 { return .routeError(["range", "not_satisfiable"]) }
                var h: HTTPHeaders = ["Content-Range": "bytes */\(size)"]
                h.add(name: "Accept-Ranges", value: "bytes")
                return .text(.rangeNotSatisfiable, "Requested range not satisfiable", h)
            }
        } catch {
            return error.reply
        }
    }

    /// nil: no usable Range (serve all); .some(nil): unsatisfiable; else the byte range.
    static func parseRange(_ header: String?, size: Int64) -> Range<Int64>?? {
        guard let header, header.hasPrefix("bytes=") else { return nil }
        let spec = header.dropFirst(6).trimmingCharacters(in: " ")
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingCharacters(in: " ")
        let last = spec[spec.index(after: dash)...].trimmingCharacters(in: " ")
        if first.isEmpty {
            guard let n = Int64(last) else { return nil }
            guard n > 0, size > 0 else { return .some(nil) }
            return .some(max(0, size - n)..<size)
        }
        guard let start = Int64(first) else { return nil }
        if last.isEmpty {
            return start < size ? .some(start..<size) : .some(nil)
        }
        guard let end = Int64(last), end >= start else { return nil }
        guard start < size else { return .some(nil) }
        return .some(start..<min(end + 1, size))
    }

    // MARK: users

    private func getCurrentAccount() -> Reply {
        .json(.object([
            ("account_id", .string(Router.accountID)),
            ("name", .object([
                ("given_name", .string("Emulator")), ("surname", .string("User")),
                ("familiar_name", .string("Emulator")), ("display_name", .string("Emulator User")),
                ("abbreviated_name", .string("EU")),
            ])),
            ("email", .string("emulator@example.com")),
            ("email_verified", .bool(true)),
            ("disabled", .bool(false)),
            ("country", .string("US")),
            ("locale", .string("en")),
            ("referral_link", .string("https://www.dropbox.com/referrals/emulator")),
            ("is_paired", .bool(false)),
            ("account_type", .object([(".tag", .string(configuration.teamMode ? "business" : "basic"))])),
            ("root_info", rootInfo),
        ]))
    }

    static let allocated: Int64 = 2 * 1024 * 1024 * 1024 * 1024

    private func getSpaceUsage() -> Reply {
        let used = Int64(index.usedBytes())
        let allocation: JSON = configuration.teamMode
            ? .object([
                (".tag", .string("team")), ("used", .int(used)), ("allocated", .int(Router.allocated)),
                ("user_within_team_space_allocated", .int(0)),
                ("user_within_team_space_limit_type", .object([(".tag", .string("off"))])),
                ("user_within_team_space_used_cached", .int(used)),
            ])
            : .object([(".tag", .string("individual")), ("allocated", .int(Router.allocated))])
        return .json(.object([("used", .int(used)), ("allocation", allocation)]))
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
