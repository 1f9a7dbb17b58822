// What the Dropbox client needs from an HTTP stack: one request in, one buffered response or a
// typed error out. `CurlTransport` implements it over libcurl; tests may implement it in memory.

public struct HTTPRequest: Sendable {
    public enum Method: String, Sendable { case get = "GET", post = "POST" }

    public var method: Method
    public var url: String
    /// Header name/value pairs, sent in order. May hold `Authorization`; transports never log it.
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Seconds before the whole exchange is abandoned with a `.transport` error.
    public var timeout: Double
    /// The most response-body bytes the transport accepts; a longer body (or a `Content-Length`
    /// announcing one) is a `.transport` error, so a hostile server cannot exhaust memory.
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

public protocol HTTPTransport: Sendable {
    /// Performs the request. Throws `DropboxError.transport` when no complete response arrived
    /// (including a body shorter than its `Content-Length`); any HTTP status is a response.
    func send(_ request: HTTPRequest) throws(DropboxError) -> HTTPResponse
}
