import DropboxClient
import Synchronization

/// An in-memory `HTTPTransport`: answers each request with `handler` and records every request it saw.
public final class FakeTransport: HTTPTransport {
    public typealias Handler = @Sendable (HTTPRequest, Int) throws(HTTPTransportError) -> HTTPResponse
    private let handler: Handler
    private let recorded = Mutex<[HTTPRequest]>([])

    /// `handler` gets the request and its 0-based index.
    public init(_ handler: @escaping Handler) { self.handler = handler }

    /// Answers the scripted results in order; the last one repeats.
    public convenience init(script: [Result<HTTPResponse, HTTPTransportError>]) {
        self.init { _, i throws(HTTPTransportError) in try script[min(i, script.count - 1)].get() }
    }

    public var requests: [HTTPRequest] { recorded.withLock { $0 } }

    public func send(_ request: HTTPRequest) throws(HTTPTransportError) -> HTTPResponse {
        let index = recorded.withLock { r in r.append(request); return r.count - 1 }
        return try handler(request, index)
    }
}
