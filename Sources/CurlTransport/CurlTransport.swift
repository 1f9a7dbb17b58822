// `HTTPTransport` over libcurl: the only module in dbx-mount that talks to curl.
//
// Connection reuse. libcurl keeps its connection cache in the easy handle, so reusing handles is
// what keeps TCP and TLS sessions alive between requests. The transport keeps a pool of idle
// handles; `send` checks one out, resets its options (`curl_easy_reset` keeps live connections),
// runs one blocking transfer on the calling thread, and parks it again. With N FUSE threads busy
// there are at most N handles in use and, afterwards, up to `maxIdleHandles` kept warm.
// `connectionsOpened` counts new connections (`CURLINFO_NUM_CONNECTS`) so tests can check reuse.
//
// Safety. TLS peer and host verification are always on for https; plain http exists for the
// emulator on 127.0.0.1. Only http and https are allowed, redirects are not followed, and
// `CURLOPT_NOSIGNAL` keeps curl's DNS timeouts from raising signals in a process with many threads.
// A buffered response body is capped per request (`HTTPRequest.maxResponseBytes`): curl refuses a
// larger `Content-Length` up front, and the write callback stops a chunked or lying body at the cap;
// a streamed body is its receiver's to bound.
// A body cut short of its `Content-Length` is curl error 18 (PARTIAL_FILE), reported as
// `.failed`. Header values are never logged or put in errors, so an `Authorization` header
// cannot leak.
//
// Streaming (issue 6). With `send(_:streamingTo:)` the sink asks the receiver, at the first body
// byte, whether to buffer (error answers) or stream; streamed chunks go straight to the receiver
// from curl's buffer, one copy into the read-ahead's part (`Part.append`), and nothing is
// collected here.
//
// Stopping. `stop()` ends every transfer in flight within about a second (curl's progress
// callback, which curl calls at least once a second even on a silent connection, aborts it) and
// refuses new ones, so a mount told to stop never waits out a call's timeout on a dead link. The
// same callback ends a transfer whose caller cancelled it (`CallCancellation`, in force on the
// thread that sends it): a reader killed, a file closed.

import CShims
import DropboxClient
import Synchronization

public final class CurlTransport: HTTPTransport {
    /// How many idle handles (each with its cached connections) are kept between requests.
    public static let poolCapacity = 32

    public let caBundlePath: String?
    public let connectTimeout: Double
    public let maxIdleHandles: Int

    private let pool = Mutex(HandlePool())
    private let stopping = CallCancellation()
    private let newConnections = Atomic<Int>(0)
    private let handlesCreated = Atomic<Int>(0)

    /// - Parameters:
    ///   - caBundlePath: PEM file of CAs to trust for https (`CURLOPT_CAINFO`); nil uses the system's.
    ///   - connectTimeout: seconds to establish a connection (TCP and TLS), capped by each request's timeout.
    ///   - maxIdleHandles: idle handles kept for reuse, at most `poolCapacity`.
    public init(caBundlePath: String?, connectTimeout: Double = 10, maxIdleHandles: Int = 16) {
        _ = CurlGlobal.initialized
        self.caBundlePath = caBundlePath
        self.connectTimeout = connectTimeout
        self.maxIdleHandles = min(max(maxIdleHandles, 0), Self.poolCapacity)
    }

    /// New TCP connections opened so far, over all requests (sum of `CURLINFO_NUM_CONNECTS`).
    public var connectionsOpened: Int { newConnections.load(ordering: .relaxed) }

    /// Easy handles created so far (one per concurrently active request, at most).
    public var handlesOpened: Int { handlesCreated.load(ordering: .relaxed) }

    /// Aborts every transfer in flight and fails every later one with `.stopped`. For a process
    /// that is shutting down; there is no restart.
    public func stop() { stopping.cancel() }

    public var stopSignal: CallCancellation? { stopping }

    public func send(_ request: HTTPRequest) throws(HTTPTransportError) -> HTTPResponse {
        try send(request, receiver: nil)
    }

    public func send(_ request: HTTPRequest, streamingTo receiver: HTTPBodyReceiver) throws(HTTPTransportError) -> HTTPResponse {
        try send(request, receiver: receiver)
    }

    private func send(_ request: HTTPRequest, receiver: HTTPBodyReceiver?) throws(HTTPTransportError) -> HTTPResponse {
        guard !stopping.isCancelled, !CallCancellation.isCurrentCallCancelled else { throw .stopped }
        guard let easy = checkOut() else {
            throw .failed(code: Int(CURLE_FAILED_INIT.rawValue), message: "curl_easy_init failed")
        }
        let result = perform(request, on: easy, receiver: receiver)
        checkIn(easy)
        return try result.get()
    }

    // MARK: - Pool

    private func checkOut() -> CurlEasy? {
        let pooled: CurlEasy? = pool.withLock { pool in pool.pop() }
        if let pooled { return pooled }
        handlesCreated.add(1, ordering: .relaxed)
        return CurlEasy()
    }

    private func checkIn(_ easy: consuming CurlEasy) {
        // Outside the lock: reset is cheap but is still a C call.
        easy.reset()
        let capacity = maxIdleHandles
        // A non-escaping closure cannot consume a captured parameter, but it can take from a var.
        var parked: CurlEasy? = consume easy
        let surplus: CurlEasy? = pool.withLock { pool in
            guard let handle = parked.take() else { return nil }
            return pool.push(handle, limit: capacity)
        }
        // A surplus handle is cleaned up here, outside the lock, closing its connections.
        _ = consume surplus
    }

    // MARK: - One transfer

    private func perform(_ request: HTTPRequest, on easy: borrowing CurlEasy,
                         receiver: HTTPBodyReceiver?) -> Result<HTTPResponse, HTTPTransportError> {
        let h = easy.handle
        let sink = TransferSink(limit: max(0, request.maxResponseBytes), receiver: receiver, stopping: stopping,
                                cancellation: CallCancellation.inForce)
        var headerList = CurlHeaderList()
        do throws(HTTPTransportError) {
            try configure(h, easy: easy, request: request, headers: &headerList, sink: sink)
        } catch {
            return .failure(error)
        }
        let code = withExtendedLifetime(sink) { curl_easy_perform(h) }

        var connects = 0
        _ = dbx_curl_getinfo_long(h, CURLINFO_NUM_CONNECTS, &connects)
        if connects > 0 { newConnections.add(connects, ordering: .relaxed) }

        guard code == CURLE_OK else {
            if code == CURLE_ABORTED_BY_CALLBACK && sink.isCancelled {
                return .failure(.stopped)
            }
            if sink.receiverAborted {
                return .failure(.aborted)
            }
            if sink.exceededLimit || code == CURLE_FILESIZE_EXCEEDED {
                return .failure(.tooLarge(sink.headerBytes > TransferSink.headerLimit
                    ? "response headers larger than \(TransferSink.headerLimit >> 10) KiB"
                    : "response larger than the \(request.maxResponseBytes)-byte limit"))
            }
            if code == CURLE_OPERATION_TIMEDOUT && Self.neverConnected(h) {
                // A route that drops packets (a pulled cable behind a router, a captive network)
                // times out in connect, where a missing route is refused at once. Either way no
                // connection was made, which is what COULDNT_CONNECT says and what the mount's
                // reachability reads as offline; a timeout on a connection that was made (a
                // reused one included) stays a timeout.
                return .failure(.failed(code: Int(CURLE_COULDNT_CONNECT.rawValue),
                                        message: "curl error 7: no connection within the connect timeout (\(easy.message(for: code)))"))
            }
            return .failure(.failed(code: Int(code.rawValue), message: "curl error \(code.rawValue): \(easy.message(for: code))"))
        }
        var status = 0
        _ = dbx_curl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
        _ = consume headerList
        // An empty body never reached the write callback; the receiver still hears of the answer.
        if sink.disposition == nil, let receiver {
            if receiver.responseStarted(status: status, headers: sink.headers) == .abort {
                return .failure(.aborted)
            }
        }
        return .success(HTTPResponse(status: status, headers: sink.headers, body: sink.body))
    }

    private func configure(_ h: UnsafeMutableRawPointer, easy: borrowing CurlEasy, request: HTTPRequest,
                           headers headerList: inout CurlHeaderList, sink: TransferSink) throws(HTTPTransportError) {
        func check(_ code: CURLcode, _ what: StaticString) throws(HTTPTransportError) {
            guard code == CURLE_OK else {
                throw .failed(code: Int(code.rawValue),
                                 message: "cannot set \(what): \(String(cString: curl_easy_strerror(code)))")
            }
        }
        let isHTTPS = request.url.lowercased().hasPrefix("https://")
        guard isHTTPS || request.url.lowercased().hasPrefix("http://") else {
            throw .failed(code: Int(CURLE_UNSUPPORTED_PROTOCOL.rawValue), message: "only http and https URLs are supported")
        }
        try check(dbx_curl_setopt_ptr(h, CURLOPT_ERRORBUFFER, easy.errorBuffer), "CURLOPT_ERRORBUFFER")
        try check(dbx_curl_setopt_str(h, CURLOPT_URL, request.url), "CURLOPT_URL")
        try check(dbx_curl_setopt_str(h, CURLOPT_PROTOCOLS_STR, "http,https"), "CURLOPT_PROTOCOLS_STR")
        if Self.isLoopback(request.url) {
            // An emulator on 127.0.0.1 is never reached through a proxy from the environment
            // (`http_proxy` and friends): "" disables proxies for this transfer.
            try check(dbx_curl_setopt_str(h, CURLOPT_PROXY, ""), "CURLOPT_PROXY")
        }
        try check(dbx_curl_setopt_long(h, CURLOPT_NOSIGNAL, 1), "CURLOPT_NOSIGNAL")
        try check(dbx_curl_setopt_long(h, CURLOPT_FOLLOWLOCATION, 0), "CURLOPT_FOLLOWLOCATION")
        try check(dbx_curl_setopt_long(h, CURLOPT_SSL_VERIFYPEER, 1), "CURLOPT_SSL_VERIFYPEER")
        try check(dbx_curl_setopt_long(h, CURLOPT_SSL_VERIFYHOST, 2), "CURLOPT_SSL_VERIFYHOST")
        if let caBundlePath {
            try check(dbx_curl_setopt_str(h, CURLOPT_CAINFO, caBundlePath), "CURLOPT_CAINFO")
        }
        if isHTTPS {
            // Offer AES-128-GCM first for TLS 1.3, as browsers and Go's TLS do; OpenSSL's own
            // order puts AES-256-GCM first. Every byte read is decrypted, and with AES hardware
            // 128-bit keys decrypt it faster (README, "Reads at Dropbox's real conditions"). A
            // server that keeps its own order still picks; a libcurl whose TLS library cannot
            // take this list keeps its default.
            _ = dbx_curl_setopt_str(h, CURLOPT_TLS13_CIPHERS, Self.tls13CipherPreference)
        }
        try check(dbx_curl_setopt_long(h, CURLOPT_TCP_KEEPALIVE, 1), "CURLOPT_TCP_KEEPALIVE")
        let timeoutMS = Self.milliseconds(request.timeout)
        try check(dbx_curl_setopt_long(h, CURLOPT_TIMEOUT_MS, timeoutMS), "CURLOPT_TIMEOUT_MS")
        try check(dbx_curl_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, min(timeoutMS, Self.milliseconds(connectTimeout))),
                  "CURLOPT_CONNECTTIMEOUT_MS")
        if sink.receiver == nil {
            // Streamed bodies are bounded by their receiver (a ranged download stops at its
            // range's end, even in a whole-file 200), and buffered ones by the write callback.
            try check(dbx_curl_setopt_off(h, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(sink.limit)), "CURLOPT_MAXFILESIZE_LARGE")
        } else {
            try check(dbx_curl_setopt_off(h, CURLOPT_MAXFILESIZE_LARGE, 0), "CURLOPT_MAXFILESIZE_LARGE")
        }
        if sink.receiver != nil {
            // Fewer, larger write callbacks for streamed downloads (curl's default is 16 KiB).
            try check(dbx_curl_setopt_long(h, CURLOPT_BUFFERSIZE, Self.streamBufferSize), "CURLOPT_BUFFERSIZE")
        }

        let sinkPointer = Unmanaged.passUnretained(sink).toOpaque()
        try check(dbx_curl_setopt_write_function(h, CurlCallbacks.body), "CURLOPT_WRITEFUNCTION")
        try check(dbx_curl_setopt_ptr(h, CURLOPT_WRITEDATA, sinkPointer), "CURLOPT_WRITEDATA")
        try check(dbx_curl_setopt_header_function(h, CurlCallbacks.header), "CURLOPT_HEADERFUNCTION")
        try check(dbx_curl_setopt_ptr(h, CURLOPT_HEADERDATA, sinkPointer), "CURLOPT_HEADERDATA")
        try check(dbx_curl_setopt_xferinfo_function(h, CurlCallbacks.progress), "CURLOPT_XFERINFOFUNCTION")
        try check(dbx_curl_setopt_ptr(h, CURLOPT_XFERINFODATA, sinkPointer), "CURLOPT_XFERINFODATA")
        try check(dbx_curl_setopt_long(h, CURLOPT_NOPROGRESS, 0), "CURLOPT_NOPROGRESS")

        var hasContentType = false
        for (name, value) in request.headers {
            // A line break would let a value smuggle in headers. The message names the header,
            // never its value (which may be a token).
            guard Self.isHeaderSafe(name), !name.isEmpty, Self.isHeaderSafe(value) else {
                throw .invalidRequest("header \(Self.isHeaderSafe(name) ? name : "<invalid name>") contains a control character")
            }
            if name.lowercased() == "content-type" { hasContentType = true }
            // "Name;" is curl's spelling of a header with an empty value ("Name:" would remove it).
            guard headerList.append(value.isEmpty ? "\(name);" : "\(name): \(value)") else {
                throw .failed(code: Int(CURLE_OUT_OF_MEMORY.rawValue), message: "out of memory building headers")
            }
        }
        // No `Expect: 100-continue` round trip; and for a POST without a type, no curl default
        // `application/x-www-form-urlencoded`.
        var removals = ["Expect:"]
        if request.method == .post && !hasContentType { removals.append("Content-Type:") }
        for line in removals where !headerList.append(line) {
            throw .failed(code: Int(CURLE_OUT_OF_MEMORY.rawValue), message: "out of memory building headers")
        }
        try check(dbx_curl_setopt_slist(h, CURLOPT_HTTPHEADER, headerList.head), "CURLOPT_HTTPHEADER")

        switch request.method {
        case .get:
            try check(dbx_curl_setopt_long(h, CURLOPT_HTTPGET, 1), "CURLOPT_HTTPGET")
        case .post:
            try check(dbx_curl_setopt_long(h, CURLOPT_POST, 1), "CURLOPT_POST")
            try check(dbx_curl_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)),
                      "CURLOPT_POSTFIELDSIZE_LARGE")
            // COPYPOSTFIELDS copies the bytes now, so the body need not outlive this call. An empty
            // body still needs a non-NULL pointer, or curl would read the body from stdin.
            let code: CURLcode = request.body.isEmpty
                ? Self.emptyBody.withUnsafeBytes { dbx_curl_setopt_ptr(h, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress)) }
                : request.body.withUnsafeBytes { dbx_curl_setopt_ptr(h, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress)) }
            try check(code, "CURLOPT_COPYPOSTFIELDS")
        }
    }

    private static let emptyBody: [UInt8] = [0]
    /// curl's receive buffer for streamed bodies, per transfer in flight.
    static let streamBufferSize = 512 << 10
    /// The TLS 1.3 suites offered, in order of preference (all three of TLS 1.3's usual ones).
    static let tls13CipherPreference = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

    private static func milliseconds(_ seconds: Double) -> Int {
        guard seconds.isFinite, seconds > 0 else { return 1 }
        return Int(min(seconds * 1000, Double(Int32.max)).rounded(.up))
    }

    /// Whether the transfer ended before any TCP connection was made: no connect time, and no
    /// request sent (a reused connection has no connect time of its own, but its request went out).
    private static func neverConnected(_ h: UnsafeMutableRawPointer) -> Bool {
        var connectTime: curl_off_t = 0
        var requestBytes = 0
        return dbx_curl_getinfo_off(h, CURLINFO_CONNECT_TIME_T, &connectTime) == CURLE_OK && connectTime == 0
            && dbx_curl_getinfo_long(h, CURLINFO_REQUEST_SIZE, &requestBytes) == CURLE_OK && requestBytes == 0
    }

    /// True for `http(s)://127.x.x.x`, `localhost` and `[::1]` URLs.
    static func isLoopback(_ url: String) -> Bool {
        guard let schemeEnd = url.firstRange(of: "://") else { return false }
        var authority = url[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let host: Substring
        if authority.hasPrefix("[") {
            host = authority.prefix { $0 != "]" }.dropFirst()
        } else {
            host = authority.prefix { $0 != ":" }
        }
        let lower = host.lowercased()
        return lower == "localhost" || lower == "::1"
            || (lower.hasPrefix("127.") && lower.allSatisfy { $0 == "." || $0.isASCII && $0.isNumber })
    }

    private static func isHeaderSafe(_ s: String) -> Bool {
        !s.utf8.contains { $0 < 0x20 && $0 != 0x09 || $0 == 0x7F }
    }
}

/// `curl_global_init`, once per process and before the first handle (older libcurl does not make
/// it safe against concurrent curl calls; a `static let` runs it exactly once).
private enum CurlGlobal {
    static let initialized: CURLcode = curl_global_init(Int(CURL_GLOBAL_ALL))
}

/// Idle handles, a stack: the most recently used handle (warmest connection) goes out first.
struct HandlePool: ~Copyable {
    private var slots: InlineArray<32, CurlEasy?>
    private var count = 0

    init() { slots = InlineArray { _ in nil } }

    mutating func pop() -> CurlEasy? {
        guard count > 0 else { return nil }
        count -= 1
        return slots[count].take()
    }

    /// Parks `easy` if fewer than `limit` are idle; otherwise hands it back to be cleaned up.
    mutating func push(_ easy: consuming CurlEasy, limit: Int) -> CurlEasy? {
        guard count < min(limit, slots.count) else { return consume easy }
        slots[count] = consume easy
        count += 1
        return nil
    }
}

/// Per-transfer state the C callbacks fill. Lives for one `perform`, which keeps it alive while
/// curl holds an unretained pointer to it; only the thread running that transfer touches it.
final class TransferSink {
    /// Most body bytes accepted.
    let limit: Int
    /// Where a streamed body goes, if the caller streams.
    let receiver: HTTPBodyReceiver?
    /// What the receiver chose at the first body byte; nil before.
    private(set) var disposition: HTTPBodyDisposition?
    /// True when the receiver stopped the transfer (not an error of the transport's own).
    private(set) var receiverAborted = false
    private var status = 0
    /// Most header bytes accepted in one response (curl itself bounds single lines only).
    static let headerLimit = 256 << 10

    /// The transport's stop and the caller's cancellations, which the progress callback checks.
    let stopping: CallCancellation
    let cancellation: CallCancellation.Scope?
    var isCancelled: Bool { stopping.isCancelled || cancellation?.isCancelled == true }

    private(set) var headers: [String: String] = [:]
    private(set) var body: [UInt8] = []
    private(set) var exceededLimit = false
    private(set) var headerBytes = 0

    init(limit: Int, receiver: HTTPBodyReceiver? = nil, stopping: CallCancellation, cancellation: CallCancellation.Scope?) {
        self.limit = limit
        self.receiver = receiver
        self.stopping = stopping
        self.cancellation = cancellation
    }

    /// Returns false to abort the transfer.
    func receiveBody(_ chunk: UnsafeRawBufferPointer) -> Bool {
        if let receiver {
            if disposition == nil { disposition = receiver.responseStarted(status: status, headers: headers) }
            switch disposition! {
            case .abort:
                receiverAborted = true
                return false
            case .stream:
                if !receiver.receive(chunk) { receiverAborted = true; return false }
                return true
            case .buffer:
                break
            }
        }
        guard body.count + chunk.count <= limit else {
            exceededLimit = true
            return false
        }
        // Typed as UInt8 so the append is one memcpy, not a byte loop.
        body.append(contentsOf: chunk.assumingMemoryBound(to: UInt8.self))
        return true
    }

    /// One header line as curl delivers it, CRLF included. A status line starts a new header
    /// block (after a `100 Continue`, say), so earlier headers are dropped.
    func receiveHeaderLine(_ line: UnsafeRawBufferPointer) -> Bool {
        headerBytes += line.count
        guard headerBytes <= Self.headerLimit else {
            exceededLimit = true
            return false
        }
        let text = String(decoding: line, as: UTF8.self)
        if text.hasPrefix("HTTP/") {
            headers = [:]
            // "HTTP/1.1 206 Partial Content": the receiver needs the status before the first body byte.
            // The reason phrase may be absent ("HTTP/1.1 206\r\n"), so the code is read up to
            // the first space or line end, not as the second of three fields.
            let fields = text.split(whereSeparator: { $0 == " " || $0.isNewline })
            status = fields.count >= 2 ? Int(fields[1]) ?? 0 : 0
            return true
        }
        guard let colon = text.firstIndex(of: ":") else { return true }  // the blank line ending the block
        let name = text[..<colon].lowercased()
        var value = text[text.index(after: colon)...]
        while let c = value.first, c == " " || c == "\t" { value = value.dropFirst() }
        // "\r\n" is one Character in Swift, so test for newlines by property, not by literal.
        while let c = value.last, c.isNewline || c == " " || c == "\t" { value = value.dropLast() }
        headers[name] = String(value)
        // One allocation for a large download instead of log2(n) regrowths; never beyond the cap.
        if name == "content-length", receiver == nil, let length = Int(value), length > 0, length <= limit {
            body.reserveCapacity(length)
        }
        return true
    }
}

/// The C callbacks, in a nonisolated type (STYLE.md). `userdata` is the transfer's `TransferSink`.
enum CurlCallbacks {
    /// `CURLOPT_WRITEFUNCTION`: returning fewer bytes than given makes curl abort with CURLE_WRITE_ERROR.
    static let body: dbx_curl_data_cb = { data, size, count, userdata in
        guard let userdata else { return 0 }
        let sink = Unmanaged<TransferSink>.fromOpaque(userdata).takeUnretainedValue()
        let n = size * count
        return sink.receiveBody(UnsafeRawBufferPointer(start: data, count: n)) ? n : 0
    }

    /// `CURLOPT_HEADERFUNCTION`: called once per header line.
    static let header: dbx_curl_data_cb = { data, size, count, userdata in
        guard let userdata else { return 0 }
        let sink = Unmanaged<TransferSink>.fromOpaque(userdata).takeUnretainedValue()
        let n = size * count
        return sink.receiveHeaderLine(UnsafeRawBufferPointer(start: data, count: n)) ? n : 0
    }

    /// `CURLOPT_XFERINFOFUNCTION`: non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK).
    static let progress: dbx_curl_progress_cb = { userdata, _, _, _, _ in
        guard let userdata else { return 0 }
        return Unmanaged<TransferSink>.fromOpaque(userdata).takeUnretainedValue().isCancelled ? 1 : 0
    }
}
