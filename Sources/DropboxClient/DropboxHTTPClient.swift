// `DropboxAPI` over HTTP: builds each route's request (docs/dropbox-api.md §0–1), sends it through an
// `HTTPTransport` with bounded retries (`RetryPolicy`), and decodes the answer or the error.
// The routes are in Routes.swift, the retry loop in RetryLoop.swift, ranged downloads in
// RangeDownload.swift; this file holds the client's state and how every request starts.
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

    let tokens: any AccessTokenProvider
    let transport: any HTTPTransport
    /// The `Dropbox-API-Path-Root` header value, re-encoded header-safe; or why it cannot be sent.
    let pathRootHeader: Result<String, DropboxError>?
    let logger: Logger
    /// Level of the one line logged per failed call (route, error summary, request id).
    let failureLogLevel: Logger.Level
    /// Until when no request may be sent, after a 429's Retry-After (shared by all callers).
    let pausedUntil = Mutex<ContinuousClock.Instant?>(nil)
    /// Told of every 429 answer, retried ones included (the mount's counters).
    let onRateLimited: @Sendable () -> Void

    /// Largest RPC answer accepted: a 2000-entry list_folder page is about 1 MB.
    public static let maxRPCResponseBytes = 16 << 20
    /// Largest body one `download` call accepts.
    public static let maxDownloadBytes: UInt64 = 1 << 30
    /// The least response a buffered download call accepts, whatever its range: room for a small
    /// file's whole-file 200 from a server that ignores `Range`. (A streamed download has no cap:
    /// its receiver drops the bytes before the range and stops at its end.)
    public static let wholeFileAllowance: UInt64 = 1 << 20

    /// - Parameters:
    ///   - pathRoot: raw JSON for `Dropbox-API-Path-Root`, e.g. `{".tag":"root","root":"123"}`
    ///     (docs/dropbox-api.md §6); nil sends none. Invalid JSON makes every call fail with `.badInput`.
    public init(endpoints: DropboxEndpoints, tokens: any AccessTokenProvider, transport: any HTTPTransport,
                pathRoot: String? = nil, retryPolicy: RetryPolicy = .standard, requestTimeout: Double = 60,
                logger: Logger = Logger(label: "dbx-mount.dropbox"), failureLogLevel: Logger.Level = .debug,
                onRateLimited: @escaping @Sendable () -> Void = {}) {
        self.endpoints = endpoints
        self.onRateLimited = onRateLimited
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
    // MARK: - Requests

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

    func commonHeaders(token: String?) throws(DropboxError) -> [(String, String)] {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if let pathRootHeader { headers.append(("Dropbox-API-Path-Root", try pathRootHeader.get())) }
        return headers
    }

    /// An RPC call: POST JSON to the api host (or `host`: get_thumbnail_batch is an RPC on the
    /// content host), 200 with a JSON body. `arg` nil is a Void argument, sent as `null` as py does.
    func rpc(_ route: String, _ arg: JSONValue?, host: String? = nil,
             maxResponseBytes: Int = DropboxHTTPClient.maxRPCResponseBytes) throws(DropboxError) -> [UInt8] {
        let body = Array(JSONWriter.encode(arg ?? .null).utf8)
        let url = endpoints.url(host ?? endpoints.api, route: route)
        return try perform(route: route, auth: true, accept: [200]) { token throws(DropboxError) in
            var headers = try commonHeaders(token: token)
            headers.append(("Content-Type", "application/json"))
            return HTTPRequest(method: .post, url: url, headers: headers, body: body, timeout: requestTimeout,
                               maxResponseBytes: maxResponseBytes)
        }.body
    }
}
