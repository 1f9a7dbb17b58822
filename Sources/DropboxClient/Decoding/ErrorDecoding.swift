// An HTTP answer that is not the route's success, turned into the API's error taxonomy
// (docs/dropbox-api.md §3). What each error means for a file operation is the filesystem core's business.

enum ErrorDecoding {
    /// Bytes of a server's error body kept in an error value: enough to diagnose, bounded for logs.
    static let maxBodyText = 1000

    /// py's default when a 429 gives no wait at all.
    static let defaultRetryAfter = 5

    static func error(for response: HTTPResponse) -> DropboxError {
        let status = response.status
        switch status {
        case 409: return routeError(response)
        case 401: return authError(response)
        case 400: return .badInput(text(response.body))
        case 429: return .rateLimited(retryAfter: retryAfter(response))
        case 500...599:
            // A 503 that says when to come back is a request to wait, as the Java SDK reads it
            // (`DbxRequestUtil.unexpectedStatus`): backing off half a second would ask again
            // many times inside the wait.
            if status == 503, let seconds = retryAfterHeader(response) { return .rateLimited(retryAfter: seconds) }
            return .server(status: status, body: text(response.body))
        default: return .unexpectedStatus(status, body: text(response.body))
        }
    }

    /// The body as text for an error message: lossy UTF-8, bounded, and without an echoed
    /// Authorization value.
    static func text(_ body: [UInt8]) -> String {
        let head = body.prefix(maxBodyText * 4)
        var s = withoutEchoedAuthorization(String(decoding: head, as: UTF8.self))
        if s.count > maxBodyText { s = String(s.prefix(maxBodyText)) + "…" }
        return s
    }

    /// Dropbox answers an Authorization header it cannot parse with a 400 that quotes the whole
    /// value (`Invalid authorization value in HTTP header "Authorization": "Bearer …".  Expecting
    /// "Bearer <oauth2-access-token>".`, docs/dropbox-api.md §3), token and all. The quoted value
    /// becomes `<redacted>`; it may itself hold quotes, so it runs to the `Expecting` that follows.
    static func withoutEchoedAuthorization(_ text: String) -> String {
        guard let start = text.firstRange(of: #""Authorization": ""#)?.upperBound else { return text }
        let rest = text[start...]
        let end = rest.firstRange(of: #"". Expecting"#)?.lowerBound ?? rest.firstRange(of: #"".  Expecting"#)?.lowerBound
            ?? text.endIndex
        return String(text[..<start]) + "<redacted>" + String(text[end...])
    }

    /// The tag path of a nested union value: `{".tag":"path","path":{".tag":"not_found"}}` is
    /// `["path", "not_found"]`. A flattened struct member (`{".tag":"individual","allocated":1}`)
    /// or a primitive member ends the path.
    static func tagPath(_ value: JSONValue) -> [String] {
        var tags: [String] = []
        var node = value
        while tags.count < 32, case .string(let tag)? = node[".tag"] {
            tags.append(tag)
            guard let next = node[tag] else { break }
            node = next
        }
        return tags
    }

    /// `error_summary` without its trailing `/..` padding ("path/not_found/..." → "path/not_found").
    static func summary(_ json: JSONValue?) -> String? {
        guard case .string(var s)? = json?["error_summary"] else { return nil }
        while let last = s.last, last == "." || last == "/" { s.removeLast() }
        return s
    }

    private static func parsed(_ response: HTTPResponse) -> JSONValue? {
        guard !response.body.isEmpty else { return nil }
        return try? JSONReader.parse(response.body)
    }

    private static func routeError(_ response: HTTPResponse) -> DropboxError {
        guard let json = parsed(response), let errorValue = json["error"] else {
            return .unexpectedStatus(409, body: text(response.body))
        }
        var tags = tagPath(errorValue)
        let summary = summary(json)
        if tags.isEmpty, let summary {
            // No usable `.tag`s but a summary: it is the same path joined with "/".
            tags = summary.split(separator: "/").map(String.init)
        }
        return .route(tags: tags, summary: summary ?? tags.joined(separator: "/"))
    }

    private static func authError(_ response: HTTPResponse) -> DropboxError {
        guard let json = parsed(response) else {
            return .auth(tag: "unknown", summary: text(response.body))
        }
        let tags = json["error"].map(tagPath) ?? []
        let summary = summary(json)
        let tag = tags.first ?? summary?.split(separator: "/").first.map(String.init) ?? "unknown"
        return .auth(tag: tag, summary: summary ?? tags.joined(separator: "/"))
    }

    /// `Retry-After` (integer seconds) first, then the JSON `error.retry_after`, else 5 s (py).
    static func retryAfter(_ response: HTTPResponse) -> Int {
        if let seconds = retryAfterHeader(response) { return seconds }
        if case .number(let text)? = parsed(response)?["error"]?["retry_after"], let seconds = Int(text) {
            return clampRetryAfter(seconds)
        }
        return defaultRetryAfter
    }

    /// `Retry-After` in seconds (whole or not), clamped; nil when absent or an HTTP date.
    static func retryAfterHeader(_ response: HTTPResponse) -> Int? {
        guard let header = response.headers["retry-after"] else { return nil }
        let trimmed = header.trimmingSpaces
        if let seconds = Int(trimmed) { return clampRetryAfter(seconds) }
        if let seconds = Double(trimmed), seconds.isFinite {
            // Clamped as a Double first: Int(1e20) traps, and a header must not crash the mount.
            return clampRetryAfter(Int(min(max(seconds, 0), 86_400).rounded(.up)))
        }
        return nil
    }

    /// A day at most: a hostile or broken value must not park a thread for years.
    private static func clampRetryAfter(_ seconds: Int) -> Int { min(max(seconds, 0), 86_400) }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\r" || c == "\n" { s = s.dropLast() }
        return String(s)
    }
}
