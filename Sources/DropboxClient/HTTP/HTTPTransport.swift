// What the Dropbox client needs from an HTTP stack: one request in, one buffered response or a
// typed error out. `CurlTransport` implements it over libcurl; tests may implement it in memory.
// The transport speaks HTTP only: its errors are `HTTPTransportError`, which the Dropbox client
// turns into `DropboxError` in one place (`DropboxError.init(_:)` in DropboxError.swift).

public struct HTTPRequest: Sendable {
    public enum Method: String, Sendable { case get = "GET", post = "POST" }

    public var method: Method
    public var url: String
    /// Header name/value pairs, sent in order. May hold `Authorization`; transports never log it.
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Seconds before the whole exchange is abandoned with a `.failed` error.
    public var timeout: Double
    /// The most response-body bytes the transport accepts; a longer body (or a `Content-Length`
    /// announcing one) is a `.failed` error, so a hostile server cannot exhaust memory.
    public var maxResponseBytes: Int

    public static let defaultMaxResponseBytes = 64 << 20

    public init(method: Method, url: String, headers: [(String, String)] = [], body: [UInt8] = [],
                timeout: Double = 100, maxResponseBytes: Int = HTTPRequest.defaultMaxResponseBytes) {
        self.method = method; self.url = url; self.headers = headers; self.body = body; self.timeout = timeout
        self.maxResponseBytes = maxResponseBytes
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    /// Header names lowercased; a repeated header keeps its last value.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String], body: [UInt8]) {
        self.status = status; self.headers = headers; self.body = body
    }
}

/// Why a transport has no response to give.
public enum HTTPTransportError: Error, Sendable, Equatable {
    /// No complete response arrived: connection refused, timeout, TLS, a body cut short. `code`
    /// is the transport's own code (curl's CURLcode for `CurlTransport`).
    case failed(code: Int, message: String)
    /// The answer's headers or body were larger than the request allows: the server answered,
    /// so this is not a failure to reach it, and asking again would get the same.
    case tooLarge(String)
    /// The request cannot be sent as it stands (a header with a control character in it).
    case invalidRequest(String)
    /// The body's receiver stopped the transfer (`HTTPBodyDisposition.abort`, or `receive` false).
    case aborted
    /// The transport was stopped (the process is shutting down), or the call was cancelled
    /// (`CallCancellation`: its caller no longer waits for it).
    case stopped
}

public protocol HTTPTransport: Sendable {
    /// Performs the request. Throws when no complete response arrived (including a body shorter
    /// than its `Content-Length`); any HTTP status is a response.
    func send(_ request: HTTPRequest) throws(HTTPTransportError) -> HTTPResponse
    /// Performs the request, handing the body to `receiver` as it arrives when it asks for that
    /// (see `HTTPBodyReceiver`). The default buffers, then hands the body over in one piece.
    func send(_ request: HTTPRequest, streamingTo receiver: HTTPBodyReceiver) throws(HTTPTransportError) -> HTTPResponse
    /// Cancelled when the transport stops, so that a caller's backoff between attempts ends then
    /// too; nil for a transport that never stops.
    var stopSignal: CallCancellation? { get }
}

// MARK: - Streaming bodies (issue 6)

/// What a transport does with a response body, decided once the status and headers are known.
public enum HTTPBodyDisposition: Sendable {
    /// Collect it into `HTTPResponse.body` (error answers, small whole files).
    case buffer
    /// Hand it to the receiver chunk by chunk as it arrives; `HTTPResponse.body` stays empty.
    case stream
    /// Stop the transfer now (the headers already show the answer is unusable).
    case abort
}

/// Takes a response body as it arrives, so a download need not be buffered whole. Used by one
/// thread, the one running the transfer; never shared.
public protocol HTTPBodyReceiver: AnyObject {
    /// Called exactly once per response, before any body byte (or after the exchange when the
    /// body is empty).
    func responseStarted(status: Int, headers: [String: String]) -> HTTPBodyDisposition
    /// Body bytes in order, in `.stream` mode. Returning false aborts the transfer.
    func receive(_ chunk: UnsafeRawBufferPointer) -> Bool
}

extension HTTPTransport {
    public var stopSignal: CallCancellation? { nil }

    /// Performs `request`, streaming the body to `receiver` when it asks for that. A transport that
    /// cannot stream buffers the body and hands it over in one piece, which is correct, only slower.
    public func send(_ request: HTTPRequest, streamingTo receiver: HTTPBodyReceiver) throws(HTTPTransportError) -> HTTPResponse {
        var response = try send(request)
        switch receiver.responseStarted(status: response.status, headers: response.headers) {
        case .buffer:
            return response
        case .abort:
            throw .aborted
        case .stream:
            let body = response.body
            response.body = []
            if !body.isEmpty {
                let accepted = body.withUnsafeBytes { receiver.receive($0) }
                if !accepted { throw .aborted }
            }
            return response
        }
    }
}
