// Where the client gets its bearer token. A protocol so that issue 7 can add a refreshing provider
// (OAuth2 offline access, docs/dropbox-api.md §1) without touching the client.

public protocol AccessTokenProvider: Sendable {
    /// The token to send now. May block (a refreshing provider may fetch a new one).
    func accessToken() throws(DropboxError) -> String
    /// The server answered 401 `expired_access_token` to a request that carried `token`. A
    /// refreshing provider refreshes (once, even if many threads report the same token); the client
    /// then asks `accessToken()` again and retries once if the token changed.
    func tokenExpired(_ token: String) throws(DropboxError)
}

/// A fixed token, as from `DBX_ACCESS_TOKEN` or `--token-file`. Never refreshes.
public struct StaticAccessToken: AccessTokenProvider, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    private let token: String

    public init(_ token: String) { self.token = token }

    public func accessToken() throws(DropboxError) -> String { token }

    /// Nothing to refresh: the client sees the same token and gives up with the 401.
    public func tokenExpired(_ token: String) throws(DropboxError) {}

    /// Never the token itself, so logging a provider cannot leak it.
    public var description: String { "StaticAccessToken(<redacted>)" }
    public var debugDescription: String { description }
    /// No children, so `dump` and debuggers cannot show the token either.
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
