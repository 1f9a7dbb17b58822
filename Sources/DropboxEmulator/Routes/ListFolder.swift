// files/list_folder, list_folder/continue, get_latest_cursor and longpoll: cursors that survive
// restarts (boot id and epoch), pages of at most `limit` entries, and the change feed.

import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

extension Router {

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
        /// The shared link listed, for a link listing (its entries carry no paths).
        var link: String? = nil

        var encoded: String {
            var pairs: [(String, JSON)] = [
                ("b", .string(String(boot, radix: 16))), ("e", .int(Int64(epoch))), ("n", .int(Int64(base))),
                ("f", .array(folder.map { .string($0) })), ("r", .bool(recursive)), ("d", .bool(includeNonDownloadable)),
                ("s", .string(String(seq))),
            ]
            if let limit { pairs.append(("l", .int(Int64(limit)))) }
            if let resume { pairs.append(("k", .array(resume.map { .string($0) }))) }
            if let link { pairs.append(("L", .string(link))) }
            return "AAE" + base64URL(Array(JSON.object(pairs).serialized().utf8))
        }

        init(boot: UInt64, epoch: Int, base: Int, folder: [String], recursive: Bool, includeNonDownloadable: Bool, limit: Int?, seq: UInt64, resume: [String]?, link: String? = nil) {
            self.link = link
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
            link = json["L"]?.stringValue
        }
    }

    func boolArg(_ arg: JSON, _ key: String, default value: Bool, route: String, place: String = "request body") -> Result<Bool, ReplyBox> {
        guard let v = arg[key], !v.isNull else { return .success(value) }
        guard let b = v.boolValue else { return .failure(ReplyBox(.badInput(route, "\(place): \(key): expected boolean, got \(v.typeName)"))) }
        return .success(b)
    }

    /// `limit`: absent, or 1...2000.
    func limitArg(_ arg: JSON, route: String) -> Result<Int?, ReplyBox> {
        guard let v = arg["limit"], !v.isNull else { return .success(nil) }
        guard let l = v.intValue else { return .failure(ReplyBox(.badInput(route, "request body: limit: expected integer, got \(v.typeName)"))) }
        guard (1...2000).contains(l) else { return .failure(ReplyBox(.badInput(route, "request body: limit: \(l) is not within range [1, 2000]"))) }
        return .success(Int(l))
    }

    func pathArg(_ arg: JSON, route: String, readPath: Bool, place: String = "request body") -> Result<String, ReplyBox> {
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

    func listFolder(arg: JSON, request: EmulatorRequest, latestOnly: Bool, route: String) -> Reply {
        do {
            let path = try pathArg(arg, route: route, readPath: false).get()
            let recursive = try boolArg(arg, "recursive", default: false, route: route).get()
            _ = try boolArg(arg, "include_deleted", default: false, route: route).get()
            _ = try boolArg(arg, "include_mounted_folders", default: true, route: route).get()
            _ = try boolArg(arg, "include_media_info", default: false, route: route).get()
            _ = try boolArg(arg, "include_has_explicit_shared_members", default: false, route: route).get()
            let includeNonDownloadable = try boolArg(arg, "include_non_downloadable_files", default: true, route: route).get()
            let limit = try limitArg(arg, route: route).get()
            let base = try pathBase(request, route: route).get()
            let folder: [String]
            var itself: EntrySnapshot?
            switch try resolve(path, base: base).get() {
            case .root: folder = base
            case .entry(let e):
                guard e.kind == .folder else { return .routeError(["path", "not_folder"]) }
                folder = e.components.map { $0.dropboxLowercased }
                // Dropbox starts a recursive listing of a folder other than the root with that
                // folder's own entry (docs/dropbox-api.md §1); clients must skip it.
                if recursive { itself = e }
            }
            let seq = index.currentSeq
            var cursor = Cursor(boot: index.bootID, epoch: index.cursorEpoch, base: base.count, folder: folder,
                                recursive: recursive, includeNonDownloadable: includeNonDownloadable, limit: limit, seq: seq, resume: [])
            if latestOnly {
                cursor.resume = nil
                return .json(.object([("cursor", .string(cursor.encoded))]))
            }
            return page(cursor: cursor, leading: itself)
        } catch {
            return error.reply
        }
    }

    /// One page from `cursor`; `leading` goes first (a recursive listing's own folder).
    func page(cursor: Cursor, leading: EntrySnapshot? = nil) -> Reply {
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
        let entries = index.withHashes((leading.map { [$0] } ?? []) + page.entries).map { metadata($0, base: cursor.base, withPaths: cursor.link == nil) }
        return .json(.object([
            ("entries", .array(entries)),
            ("cursor", .string(next.encoded)),
            ("has_more", .bool(page.hasMore)),
        ]))
    }

    /// Validates a cursor argument; `reset` when it can no longer be served.
    func cursorArg(_ arg: JSON, route: String) -> Result<Cursor, ReplyBox> {
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

    func listFolderContinue(arg: JSON, route: String) -> Reply {
        do {
            let cursor = try cursorArg(arg, route: route).get()
            if let link = cursor.link, sharedLinks.find(url: link) == nil { return .routeError(["path", "not_found"]) }
            if !cursor.folder.isEmpty {
                guard let folder = index.lookup(lower: cursor.folder) else { return .routeError(["path", "not_found"]) }
                guard folder.kind == .folder else { return .routeError(["path", "not_folder"]) }
            }
            return page(cursor: cursor)
        } catch {
            return error.reply
        }
    }

    func longpoll(arg: JSON, route: String, eventLoop: EventLoop) -> Reply {
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
}
