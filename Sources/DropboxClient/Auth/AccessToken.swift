// Where the client gets its bearer token. A protocol so that issue 7 can add a refreshing provider
// (OAuth2 offline access, docs/dropbox-api.md §1) without touching the client.

public protocol AccessTokenProvider: Sendable {
    /// The token to send now. May block (a refreshing provider may fetch a new one).
    func accessToken() throws(DropboxError) -> String
    /// The server answered 401 `expired_access_token` (or `invalid_access_token`, which a token
    /// revoked with its refresh token gets) to a request that carried `token`. A refreshing
    /// provider refreshes (once, even if many threads report the same token); the client then
    /// asks `accessToken()` again and retries once if the token changed.
    func tokenExpired(_ token: String) throws(DropboxError)
    /// Dropbox answered a call made with the current token (the mount's check of the account):
    /// a provider that tells of a refusal later can tell it from a token that never worked.
    func tokenAccepted()
}

extension AccessTokenProvider {
    public func tokenAccepted() {}
}

/// A fixed token, as from `DBX_ACCESS_TOKEN` or `--token-file`. Never refreshes.
public struct StaticAccessToken: AccessTokenProvider, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    private let token: String

    public init(_ token: String) { self.token = token }

    /// Whether `token` can be a bearer token at all: RFC 6750's `b64token` (letters, digits and
    /// `-._~+/`, then `=` padding). Dropbox quotes a header value outside it in its 400 answer,
    /// so a token file holding `Bearer sl.…` or a JSON blob is refused before anything is sent.
    public static func isWellFormed(_ token: String) -> Bool {
        var padding = false
        for byte in token.utf8 {
            switch byte {
            case UInt8(ascii: "="): padding = true
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"), UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding { return false }
            default: return false
            }
        }
        return !token.isEmpty && token.first != "="
    }

    public func accessToken() throws(DropboxError) -> String { token }

    /// Nothing to refresh: the client sees the same token and gives up with the 401.
    public func tokenExpired(_ token: String) throws(DropboxError) {}

    /// Never the token itself, so logging a provider cannot leak it.
    public var description: String { "StaticAccessToken(<redacted>)" }
    public var debugDescription: String { description }
    /// No children, so `dump` and debuggers cannot show the token either.
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
