// `DropboxAPI` over HTTP: builds each route's request (DROPBOX_API.md §0–1), sends it through an
// `HTTPTransport` with bounded retries (`RetryPolicy`), and decodes the answer or the error.
//
// The only state the client shares between calls is its pacer: a 429 pauses every caller, not
// just the one that got it, since rate-limited requests still count against the limit. Any number
// of FUSE worker threads may call it at once. Connection reuse is the transport's job.

import Logging
import Synchronization

public final class DropboxHTTPClient: DropboxAPI {
    public let endpoints: DropboxEndpoints
    public let retryPolicy: RetryPolicy
    /// Seconds one RPC or download attempt may take (longpoll gets its own, longer, timeout).
    public let requestTimeout: Double

    private let tokens: any AccessTokenProvider
    private let transport: any HTTPTransport
    /// The `Dropbox-API-Path-Root` header value, re-encoded header-safe; or why it cannot be sent.
    private let pathRootHeader: Result<String, DropboxError>?
    private let logger: Logger
    /// Level of the one line logged per failed call (route, error summary, request id).
    private let failureLogLevel: Logger.Level
    /// Until when no request may be sent, after a 429's Retry-After (shared by all callers).
    private let pausedUntil = Mutex<ContinuousClock.Instant?>(nil)

    /// Largest RPC answer accepted: a 2000-entry list_folder page is about 1 MB.
    public static let maxRPCResponseBytes = 16 << 20
    /// Largest body one `download` call accepts.
    public static let maxDownloadBytes: UInt64 = 1 << 30
    /// A server that ignores `Range` and answers 200 with the whole file is tolerated only for
    /// files up to this size; a larger one fails rather than buffering a whole file per read.
    public static let wholeFileAllowance: UInt64 = 1 << 20

    /// - Parameters:
    ///   - pathRoot: raw JSON for `Dropbox-API-Path-Root`, e.g. `{".tag":"root","root":"123"}`
    ///     (DROPBOX_API.md §6); nil sends none. Invalid JSON makes every call fail with `.badInput`.
    public init(endpoints: DropboxEndpoints, tokens: any AccessTokenProvider, transport: any HTTPTransport,
                pathRoot: String? = nil, retryPolicy: RetryPolicy = .standard, requestTimeout: Double = 60,
                logger: Logger = Logger(label: "dbx-mount.dropbox"), failureLogLevel: Logger.Level = .debug) {
        self.endpoints = endpoints
        self.tokens = tokens
        self.transport = transport
        self.retryPolicy = retryPolicy
        self.requestTimeout = requestTimeout
        self.logger = logger
        self.failureLogLevel = failureLogLevel
        self.pathRootHeader = pathRoot.map { raw in
            do {
                return .success(JSONWriter.encode(try JSONReader.parse(raw), headerSafe: true))
            } catch {
                return .failure(.badInput("the path root is not valid JSON (\(error))"))
            }
        }
    }

    // MARK: - Routes

    public func currentAccount() throws(DropboxError) -> Account {
        try Decode.account(try rpc("users/get_current_account", nil))
    }

    public func spaceUsage() throws(DropboxError) -> SpaceUsage {
        try Decode.spaceUsage(try rpc("users/get_space_usage", nil))
    }

    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(DropboxError) -> ListFolderPage {
        var arg = listFolderArg(path: path, recursive: recursive)
        // The API accepts 1...2000 (and treats it as approximate).
        if let limit { arg["limit"] = .int(min(max(limit, 1), 2000)) }
        return try Decode.listFolderPage(try rpc("files/list_folder", .object(arg)))
    }

    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderPage {
        try Decode.listFolderPage(try rpc("files/list_folder/continue", .object(["cursor": .string(cursor)])))
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

    /// The bytes of `range`, buffered: the streaming download below with a consumer that collects,
    /// so both share one set of Content-Range checks and resume a cut body the same way.
    public func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        var bytes: [UInt8] = []
        _ = try download(path: path, range: range) { chunk in
            bytes.append(contentsOf: chunk)
            return true
        }
        return bytes
    }

    public func download(path: String, range: Range<UInt64>,
                         into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        guard !range.isEmpty else { return 0 }
        let wanted = range.upperBound - range.lowerBound
        let cap = max(min(wanted, Self.maxDownloadBytes), Self.wholeFileAllowance)
        let arg = JSONWriter.encode(.object(["path": .string(path)]), headerSafe: true)
        let url = endpoints.url(endpoints.content, route: "files/download")
        return try withoutActuallyEscaping(consumer) { consumer throws(DropboxError) -> UInt64 in
            let receiver = RangeReceiver(range: range, consumer: consumer)
            let response: HTTPResponse
            do throws(DropboxError) {
                // A retry after a body was cut short asks only for the rest: `nextOffset` moves
                // with every byte handed over, and each attempt's Range starts there.
                response = try perform(route: "files/download", auth: true, accept: [200, 206, 416], send: { request throws(DropboxError) in
                    try receiver.attempt { () throws(DropboxError) in try self.transport.send(request, streamingTo: receiver) }
                }) { token throws(DropboxError) in
                    var headers = try commonHeaders(token: token)
                    headers.append(("Dropbox-API-Arg", arg))
                    headers.append(("Range", "bytes=\(receiver.nextOffset)-\(range.upperBound - 1)"))
                    return HTTPRequest(method: .get, url: url, headers: headers, timeout: requestTimeout,
                                       maxResponseBytes: Int(cap))
                }
            } catch let error where error.isRoute("range", "not_satisfiable") {
                return receiver.delivered
            }
            if receiver.finished || response.status == 206 { return receiver.delivered }
            let first = receiver.nextOffset
            if response.status == 200 {
                let bytes = try Self.slicedWholeBody(response, range: first..<range.upperBound)
                if !bytes.isEmpty { _ = bytes.withUnsafeBytes { consumer($0) } }
                return receiver.delivered + UInt64(bytes.count)
            }
            // 416: the range starts at or past the end of the file.
            if let header = response.headers["content-range"], let total = ContentRange.unsatisfiedTotal(header),
               total > first {
                throw .malformedResponse("download: 416 for bytes \(first)-\(range.upperBound - 1) of a \(total)-byte file")
            }
            return receiver.delivered
        }
    }

    // MARK: - Response checks

    /// A 200 carries the whole file: check it against `Dropbox-API-Result`'s size when present,
    /// then cut out the asked range.
    static func slicedWholeBody(_ response: HTTPResponse, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        let body = response.body
        if let result = response.headers["dropbox-api-result"] {
            let value = try Decode.json(Array(result.utf8), context: "Dropbox-API-Result")
            if let size = try JSONFields(value, context: "Dropbox-API-Result").optionalUInt64("size"),
               size != UInt64(body.count) {
                throw .malformedResponse("download: Dropbox-API-Result says \(size) bytes, body has \(body.count)")
            }
        }
        let count = UInt64(body.count)
        guard range.lowerBound < count else { return [] }
        return Array(body[Int(range.lowerBound)..<Int(min(range.upperBound, count))])
    }

    // MARK: - Plumbing

    /// A content-host call with its argument in headers and the whole body buffered (export).
    func send(route: String, host: String, maxResponseBytes: Int, headers extra: [(String, String)])
        throws(DropboxError) -> HTTPResponse
    {
        let url = endpoints.url(host, route: route)
        return try perform(route: route, auth: true, accept: [200]) { token throws(DropboxError) in
            var headers = try commonHeaders(token: token)
            headers.append(contentsOf: extra)
            return HTTPRequest(method: .post, url: url, headers: headers, timeout: requestTimeout,
                               maxResponseBytes: maxResponseBytes)
        }
    }

    /// One line per call that failed for good. Answers the caller handles as a normal outcome
    /// (a past-the-end range, a feed `reset`) are not failures. The line carries no token:
    /// `DropboxError`'s description never holds one.
    private func logFailure(route: String, error: DropboxError, requestID: String?, attempts: Int) {
        if error.isRoute("range", "not_satisfiable") || error.isRoute("reset") { return }
        var metadata: Logger.Metadata = ["route": "\(route)", "error": "\(error)"]
        if let requestID { metadata["request_id"] = "\(requestID)" }
        if attempts > 1 { metadata["attempts"] = "\(attempts)" }
        logger.log(level: failureLogLevel, "Dropbox call failed", metadata: metadata)
    }

    private func listFolderArg(path: String, recursive: Bool) -> [String: JSONValue] {
        // Every flag explicit, as py sends them; `include_deleted` false still reports deletions
        // on `continue` (chg).
        ["path": .string(path), "recursive": .bool(recursive), "include_deleted": .bool(false),
         "include_mounted_folders": .bool(true), "include_non_downloadable_files": .bool(true)]
    }

    private func commonHeaders(token: String?) throws(DropboxError) -> [(String, String)] {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if let pathRootHeader { headers.append(("Dropbox-API-Path-Root", try pathRootHeader.get())) }
        return headers
    }

    /// An RPC call: POST JSON to the api host, 200 with a JSON body. `arg` nil is a Void argument,
    /// sent as `null` as py does.
    private func rpc(_ route: String, _ arg: JSONValue?) throws(DropboxError) -> [UInt8] {
        let body = Array(JSONWriter.encode(arg ?? .null).utf8)
        let url = endpoints.url(endpoints.api, route: route)
        return try perform(route: route, auth: true, accept: [200]) { token throws(DropboxError) in
            var headers = try commonHeaders(token: token)
            headers.append(("Content-Type", "application/json"))
            return HTTPRequest(method: .post, url: url, headers: headers, body: body, timeout: requestTimeout,
                               maxResponseBytes: Self.maxRPCResponseBytes)
        }.body
    }

    /// Sends the request `build` makes (given the current token) until a status in `accept`
    /// arrives, the policy gives up, or the deadline passes. Other statuses become typed errors.
    private func perform(route: String, auth: Bool, accept: Set<Int>, extraDeadline: Double = 0,
                         send: ((HTTPRequest) throws(DropboxError) -> HTTPResponse)? = nil,
                         _ build: (String?) throws(DropboxError) -> HTTPRequest) throws(DropboxError) -> HTTPResponse {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = retryPolicy.callDeadline + extraDeadline
        func remaining() -> Double {
            let elapsed = (clock.now - start).components
            return deadline - (Double(elapsed.seconds) + Double(elapsed.attoseconds) * 1e-18)
        }
        var attempt = 0
        var transportFailures = 0
        var refreshed = false
        // The id Dropbox gave the last answer, so a failure can be traced on Dropbox's side.
        var requestID: String?
        while true {
            attempt += 1
            // A 429 seen by any caller holds every caller back until its Retry-After has passed.
            if let until = pausedUntil.withLock({ $0 }), until > clock.now {
                let wait = until - clock.now
                let seconds = Double(wait.components.seconds) + Double(wait.components.attoseconds) * 1e-18
                retryPolicy.sleep(min(seconds, max(0, remaining() - 1)))
            }
            let token = auth ? try tokens.accessToken() : nil
            var request = try build(token)
            request.timeout = max(1, min(request.timeout, remaining()))
            let error: DropboxError
            do {
                let response: HTTPResponse
                if let send { response = try send(request) } else { response = try transport.send(request) }
                if accept.contains(response.status) { return response }
                requestID = response.headers["x-dropbox-request-id"]
                error = ErrorDecoding.error(for: response)
            } catch let transportError {
                requestID = nil
                error = transportError
            }
            if case .auth(tag: "expired_access_token", _) = error, let token, !refreshed {
                // One refresh per call (py does the same); a provider that cannot refresh hands
                // back the same token and the 401 stands.
                refreshed = true
                try tokens.tokenExpired(token)
                if try tokens.accessToken() != token {
                    attempt -= 1
                    continue
                }
            }
            if case .transport = error { transportFailures += 1 }
            if case .rateLimited(let retryAfter) = error {
                let until = clock.now + .seconds(retryAfter)
                pausedUntil.withLock { $0 = max($0 ?? until, until) }
            }
            guard let wait = retryPolicy.delay(after: error, attempt: attempt, transportFailures: transportFailures,
                                               remaining: remaining()) else {
                logFailure(route: route, error: error, requestID: requestID, attempts: attempt)
                throw error
            }
            logger.debug("retrying Dropbox call", metadata: [
                "route": "\(route)", "attempt": "\(attempt)", "error": "\(error)",
                "wait_s": "\((wait * 1000).rounded() / 1000)"])
            retryPolicy.sleep(wait)
        }
    }
}

/// Takes one streamed download, across the attempts of one call. Each 206 is checked before any
/// of its body is handed on: its `Content-Range` must start exactly where the last attempt stopped
/// and end where asked (or at end of file), and its body may not run past what it promised. A
/// body cut short hands on what arrived, and the next attempt asks for the rest.
final class RangeReceiver: HTTPBodyReceiver {
    let range: Range<UInt64>
    private let consumer: (UnsafeRawBufferPointer) -> Bool
    /// Bytes handed to the consumer over all attempts.
    private(set) var delivered: UInt64 = 0
    /// The consumer asked to stop, or every byte of the range has been handed over.
    private(set) var finished = false
    /// Why this attempt's answer cannot be used; thrown instead of the transport's abort error.
    private var problem: DropboxError?
    /// Bytes the current 206 promised, and how many of them arrived.
    private var promised: UInt64?
    private var received: UInt64 = 0

    init(range: Range<UInt64>, consumer: @escaping (UnsafeRawBufferPointer) -> Bool) {
        self.range = range
        self.consumer = consumer
    }

    var nextOffset: UInt64 { range.lowerBound + delivered }

    /// Runs one attempt. An answer that was streamed but ended short is a transport error, so the
    /// retry loop tries again (from `nextOffset`).
    func attempt(_ send: () throws(DropboxError) -> HTTPResponse) throws(DropboxError) -> HTTPResponse {
        problem = nil
        promised = nil
        received = 0
        if finished { return HTTPResponse(status: 206, headers: [:], body: []) }
        do throws(DropboxError) {
            let response = try send()
            if let problem { throw problem }
            if let promised, received < promised, !finished {
                throw .transport(code: 18, message: "download: body ended \(promised - received) bytes short of its Content-Range")
            }
            return response
        } catch {
            if let problem { throw problem }
            if finished { return HTTPResponse(status: 206, headers: [:], body: []) }
            throw error
        }
    }

    func responseStarted(status: Int, headers: [String: String]) -> HTTPBodyDisposition {
        guard status == 206 else { return .buffer }   // errors, a whole-file 200, a 416: small, decoded whole
        let first = nextOffset, last = range.upperBound - 1
        guard let header = headers["content-range"], let cr = ContentRange.parse(header) else {
            problem = .malformedResponse("download: 206 without a valid Content-Range")
            return .abort
        }
        guard cr.first == first, cr.last <= last else {
            problem = .malformedResponse("download: asked for bytes \(first)-\(last), got \(cr.first)-\(cr.last)")
            return .abort
        }
        if cr.last < last, let total = cr.total, total != cr.last + 1 {
            problem = .malformedResponse("download: short range \(cr.first)-\(cr.last) of a \(total)-byte file")
            return .abort
        }
        if let total = cr.total, cr.last >= total {
            problem = .malformedResponse("download: range \(cr.first)-\(cr.last) beyond the \(total)-byte file")
            return .abort
        }
        promised = cr.last - cr.first + 1
        return .stream
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
        guard let promised else { return false }
        let room = promised - received
        guard UInt64(chunk.count) <= room else {
            // Never hand on more than the Content-Range promised.
            problem = .malformedResponse("download: body longer than its Content-Range (\(promised) bytes)")
            return false
        }
        received += UInt64(chunk.count)
        delivered += UInt64(chunk.count)
        if !consumer(chunk) { finished = true; return false }
        if nextOffset == range.upperBound { finished = true }
        return true
    }
}

/// `Content-Range: bytes first-last/total` (RFC 9110 §14.4), `total` possibly `*`.
struct ContentRange: Equatable {
    var first: UInt64
    var last: UInt64
    var total: UInt64?

    static func parse(_ header: String) -> ContentRange? {
        let value = header.trimmingSpaces
        guard value.hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6)
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let bounds = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = UInt64(bounds[0]), let last = UInt64(bounds[1]), first <= last
        else { return nil }
        let total: UInt64?
        if halves[1] == "*" { total = nil } else {
            guard let t = UInt64(halves[1]) else { return nil }
            total = t
        }
        return ContentRange(first: first, last: last, total: total)
    }

    /// The size in `bytes */size`, the form a 416 carries.
    static func unsatisfiedTotal(_ header: String) -> UInt64? {
        let value = header.trimmingSpaces
        guard value.hasPrefix("bytes */") else { return nil }
        return UInt64(value.dropFirst(8))
    }
}
