// Errors keep the API's own taxonomy, as Dropbox's SDKs do (docs/dropbox-api.md §3): the filesystem core
// decides what each means for a file operation, and the FUSE adapter maps that to errno.

public enum DropboxError: Error, Sendable, Equatable {
    /// 409: a route error. `tags` is the tag path, e.g. `["path", "not_found"]` or `["reset"]`.
    case route(tags: [String], summary: String)
    /// 401: `invalid_access_token`, `expired_access_token`, `missing_scope`, ...
    case auth(tag: String, summary: String)
    /// 429: retry no sooner than `retryAfter` seconds.
    case rateLimited(retryAfter: Int)
    /// 400: the server rejected the request itself (plain-text body).
    case badInput(String)
    /// 5xx.
    case server(status: Int, body: String)
    /// Any other HTTP status we do not expect (403, 404, 416 where not handled, ...).
    case unexpectedStatus(Int, body: String)
    /// The transport failed: connection refused, timeout, TLS, body cut short. `code` is the
    /// transport's own code (curl's CURLcode for `CurlTransport`).
    case transport(code: Int, message: String)
    /// The server answered 2xx with a body or header we could not decode.
    case malformedResponse(String)
    /// The call was cancelled: dbx-mount is stopping (SIGTERM, SIGINT, an unmount), or the caller
    /// no longer waits for it (`CallCancellation`: a reader killed, a file closed). Never retried.
    case stopped

    /// True for a route error whose tag path starts with `prefix`, e.g. `["path", "not_found"]`.
    public func isRoute(_ prefix: String...) -> Bool {
        if case .route(let tags, _) = self { return tags.starts(with: prefix) }
        return false
    }
}

extension DropboxError: CustomStringConvertible {
    /// A one-line summary for logs and messages. Never includes a token.
    public var description: String {
        switch self {
        case .route(_, let summary): "Dropbox error: \(summary)"
        case .auth(let tag, _): "Dropbox rejected the access token (\(tag))"
        case .rateLimited(let s): "Dropbox rate limit: retry after \(s) s"
        case .badInput(let text): "Dropbox rejected the request: \(text.prefix(300))"
        case .server(let status, _): "Dropbox server error (HTTP \(status))"
        case .unexpectedStatus(let status, let body): "unexpected HTTP \(status) from Dropbox: \(body.prefix(200))"
        case .transport(_, let message): "cannot reach Dropbox: \(message)"
        case .malformedResponse(let what): "malformed answer from Dropbox: \(what)"
        case .stopped: "the call was cancelled (dbx-mount is stopping, or nobody waits for it any more)"
        }
    }
}

extension DropboxError {
    /// The error with every copy of `secret` in the server's text replaced by `<redacted>`: a
    /// server that echoes the request's token in an error body must not put it in a log line.
    func redacting(_ secret: String?) -> DropboxError {
        guard let secret, !secret.isEmpty else { return self }
        switch self {
        case .badInput(let text): return .badInput(text.replacingAll(secret, with: "<redacted>"))
        case .server(let status, let body): return .server(status: status, body: body.replacingAll(secret, with: "<redacted>"))
        case .unexpectedStatus(let status, let body):
            return .unexpectedStatus(status, body: body.replacingAll(secret, with: "<redacted>"))
        case .route(let tags, let summary): return .route(tags: tags, summary: summary.replacingAll(secret, with: "<redacted>"))
        case .auth(let tag, let summary): return .auth(tag: tag, summary: summary.replacingAll(secret, with: "<redacted>"))
        case .rateLimited, .transport, .malformedResponse, .stopped: return self
        }
    }
}

extension DropboxError {
    /// The one place a transport's failure becomes a Dropbox error. A request the transport would
    /// not send is bad input, like a 400; an answer too large to take is a malformed one; everything
    /// else is `.transport`, which the retry policy retries.
    public init(_ error: HTTPTransportError) {
        switch error {
        case .failed(let code, let message): self = .transport(code: code, message: message)
        case .invalidRequest(let message): self = .badInput(message)
        case .tooLarge(let message): self = .malformedResponse(message)
        // 23 is curl's CURLE_WRITE_ERROR, which a receiver's stop produces under libcurl.
        case .aborted: self = .transport(code: 23, message: "transfer aborted by the receiver")
        case .stopped: self = .stopped
        }
    }
}

extension HTTPTransport {
    /// One exchange, its failure in Dropbox terms (for the client's own callers of a transport).
    func exchange(_ request: HTTPRequest, streamingTo receiver: HTTPBodyReceiver? = nil) throws(DropboxError) -> HTTPResponse {
        do {
            if let receiver { return try send(request, streamingTo: receiver) }
            return try send(request)
        } catch {
            throw DropboxError(error)
        }
    }
}
