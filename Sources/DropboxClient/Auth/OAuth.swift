// The OAuth 2 token endpoint (docs/dropbox-api.md §1, "OAuth2"): exchanging an authorization code for a
// refresh token (PKCE, no client secret), refreshing an access token, and revoking a token.
//
// dbx-mount is a public client: it carries the user's own app key and never a secret, so the code
// exchange proves itself with the PKCE `code_verifier`, and a refresh sends only `client_id`.
// Every call goes through the same `HTTPTransport` as the API, so tests drive it against the
// emulator's `/oauth2/token`.
//
// Tokens never enter an error value or a description: the endpoint's own error text is kept only
// after every token this client knows has been cut out of it.

/// What `/oauth2/token` grants. Its descriptions never show a token.
public struct TokenGrant: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var accessToken: String
    /// Present after a code exchange with `token_access_type=offline`; a refresh grants none.
    public var refreshToken: String?
    /// Seconds the access token lives (`expires_in`); nil if the server sent none.
    public var expiresIn: Int?
    public var accountID: String?

    public init(accessToken: String, refreshToken: String?, expiresIn: Int?, accountID: String?) {
        self.accessToken = accessToken; self.refreshToken = refreshToken
        self.expiresIn = expiresIn; self.accountID = accountID
    }

    public var description: String {
        "TokenGrant(<redacted>, expiresIn: \(expiresIn.map(String.init) ?? "nil"))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

public struct OAuthTokenEndpoint: Sendable {
    /// `https://api.dropboxapi.com/oauth2/token`, or the emulator's.
    public let tokenURL: String
    /// The app's key (`client_id`).
    public let appKey: String
    private let transport: any HTTPTransport
    private let timeout: Double

    /// The token endpoint lives on the API host (py: `https://{API_HOST}/oauth2/token`).
    public init(endpoints: DropboxEndpoints, appKey: String, transport: any HTTPTransport, timeout: Double = 30) {
        self.init(tokenURL: endpoints.api + "/oauth2/token", appKey: appKey, transport: transport, timeout: timeout)
    }

    public init(tokenURL: String, appKey: String, transport: any HTTPTransport, timeout: Double = 30) {
        self.tokenURL = tokenURL; self.appKey = appKey; self.transport = transport; self.timeout = timeout
    }

    /// `grant_type=authorization_code` with the PKCE verifier. `redirectURI` must be the one the
    /// authorize URL carried (nil for the no-redirect flow).
    public func exchange(code: String, verifier: String, redirectURI: String?) throws(DropboxError) -> TokenGrant {
        var form = [("grant_type", "authorization_code"), ("code", code), ("client_id", appKey),
                    ("code_verifier", verifier)]
        if let redirectURI { form.append(("redirect_uri", redirectURI)) }
        return try post(form, secrets: [code, verifier])
    }

    /// `grant_type=refresh_token`. A revoked or unknown refresh token is `.auth(tag: "invalid_grant")`.
    public func refresh(refreshToken: String) throws(DropboxError) -> TokenGrant {
        try post([("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", appKey)],
                 secrets: [refreshToken])
    }

    private func post(_ form: [(String, String)], secrets: [String]) throws(DropboxError) -> TokenGrant {
        let body = form.map { "\(FormEncoding.encode($0.0))=\(FormEncoding.encode($0.1))" }.joined(separator: "&")
        let request = HTTPRequest(method: .post, url: tokenURL,
                                  headers: [("Content-Type", "application/x-www-form-urlencoded")],
                                  body: Array(body.utf8), timeout: timeout, maxResponseBytes: 64 << 10)
        let response = try transport.exchange(request)
        let json = try? JSONReader.parse(response.body)
        guard response.status == 200 else {
            throw Self.error(status: response.status, json: json, body: response.body, secrets: secrets)
        }
        guard case .string(let access)? = json?["access_token"], !access.isEmpty else {
            throw .malformedResponse("oauth2/token: no access_token in the answer")
        }
        var expiresIn: Int?
        if case .number(let text)? = json?["expires_in"] { expiresIn = Self.lifetime(text) }
        var refresh: String?
        if case .string(let r)? = json?["refresh_token"], !r.isEmpty { refresh = r }
        var accountID: String?
        if case .string(let a)? = json?["account_id"] { accountID = a }
        return TokenGrant(accessToken: access, refreshToken: refresh, expiresIn: expiresIn, accountID: accountID)
    }

    /// `expires_in` as whole seconds within zero and a year. RFC 6749 says only that it is a
    /// number: `1e19`, `1e400` or a fraction must neither trap a conversion nor overflow the
    /// clock arithmetic the lifetime goes into; a token that outlives a year is refreshed yearly.
    static func lifetime(_ text: String) -> Int? {
        guard let seconds = Double(text), seconds.isFinite else { return nil }
        return Int(min(max(seconds, 0), 365 * 86_400))
    }

    /// The endpoint's 400 `{"error":"invalid_grant","error_description":...}` becomes an auth error
    /// (as py maps it), so the filesystem answers EACCES; any other status keeps the usual taxonomy.
    static func error(status: Int, json: JSONValue?, body: [UInt8], secrets: [String]) -> DropboxError {
        var text = ErrorDecoding.text(body)
        var description: String?
        if case .string(let d)? = json?["error_description"] { description = d }
        for secret in secrets where !secret.isEmpty {
            text = text.replacingAll(secret, with: "<redacted>")
            description = description?.replacingAll(secret, with: "<redacted>")
        }
        if status == 400 || status == 401, case .string(let tag)? = json?["error"] {
            switch tag {
            case "invalid_grant", "invalid_client", "unauthorized_client":
                return .auth(tag: tag, summary: description ?? tag)
            default:
                return .badInput("oauth2/token: \(tag)" + (description.map { ": \($0)" } ?? ""))
            }
        }
        return ErrorDecoding.error(for: HTTPResponse(status: status, headers: [:], body: Array(text.utf8)))
    }
}

extension OAuthTokenEndpoint {
    /// `auth/token/revoke`: disables `accessToken`, its refresh token and every sibling access token
    /// (spec `auth.stone`). An RPC on the API host with a Void argument.
    public static func revoke(accessToken: String, endpoints: DropboxEndpoints, transport: any HTTPTransport,
                              timeout: Double = 30) throws(DropboxError) {
        let request = HTTPRequest(method: .post, url: endpoints.url(endpoints.api, route: "auth/token/revoke"),
                                  headers: [("Authorization", "Bearer \(accessToken)"),
                                            ("Content-Type", "application/json")],
                                  body: Array("null".utf8), timeout: timeout, maxResponseBytes: 64 << 10)
        let response = try transport.exchange(request)
        guard response.status == 200 else { throw ErrorDecoding.error(for: response).redacting(accessToken) }
    }
}

/// `application/x-www-form-urlencoded` and URL query values: everything but RFC 3986's unreserved
/// characters is percent-encoded (so `+`, `/` and `=` in a token survive).
public enum FormEncoding {
    public static func encode(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(hex[Int(byte >> 4)])
                out.unicodeScalars.append(hex[Int(byte & 15)])
            }
        }
        return out
    }

    /// Decodes a query value (`%XX`, and `+` as a space); nil if an escape is malformed.
    public static func decode(_ value: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(value.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "+") {
                bytes.append(0x20)
            } else if byte == UInt8(ascii: "%") {
                guard iterator.count >= 2, let high = hexValue(iterator.removeFirst()),
                      let low = hexValue(iterator.removeFirst()) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - 48
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - 87
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - 55
        default: nil
        }
    }
}

extension String {
    /// Every occurrence of `target` replaced (no Foundation in this module).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = ""
        var rest = self[...]
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound]
            out += replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }
}
