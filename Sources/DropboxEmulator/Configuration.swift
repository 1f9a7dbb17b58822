/// What a range starting past the end of a file answers; Dropbox's own evidence conflicts
/// (see docs/dropbox-api.md §1, "A range beyond EOF is undocumented").
public enum RangePastEnd: String, Sendable, CaseIterable {
    /// 416 with `Content-Range: bytes */<size>` (what dbxfs treats as EOF).
    case status416 = "416"
    /// 409 with `range/not_satisfiable` (what Dropbox's 2026 transfer helpers expect).
    case route409 = "409"
}

public struct EmulatorConfiguration: Sendable {
    /// The directory served as the account's root (in team mode, the team root).
    public var root: String
    public var host: String = "127.0.0.1"
    /// 0 picks a free port; read the chosen one from `DropboxEmulatorServer.baseURL`.
    public var port: Int = 0
    /// Access tokens that are always valid (until revoked).
    public var accessTokens: [String] = ["emulator-token"]
    /// Added before each API request is answered.
    public var latency: Duration = .zero
    /// Global cap on response body bytes per second, shared by all connections.
    public var bandwidthBytesPerSecond: Int? = nil
    /// Cap on response body bytes per second of each connection: a far server, whose every TCP
    /// connection carries less than the link could.
    public var connectionBandwidthBytesPerSecond: Int? = nil
    /// Fraction of API requests answered 500, 503 or 429 (with Retry-After), drawn from `seed`.
    public var failureRate: Double = 0
    /// Fraction of download bodies cut short partway (the connection is closed), drawn from `seed`.
    public var truncateRate: Double = 0
    public var seed: UInt64 = 1
    /// API requests per second across all clients; beyond it, 429 with Retry-After.
    public var requestsPerSecond: Int? = nil
    /// Maximum entries per list_folder page. Dropbox honours `limit` up to 2000, so that is the
    /// default; a test lowers it to exercise paging.
    public var pageSizeCap: Int = 2000
    /// Hash files when first listed instead of at startup (startup is then instant, but the first
    /// listing of a large tree is slow).
    public var lazyContentHashes: Bool = false
    /// Entries per page when the request gives no `limit` (Dropbox leaves it unspecified).
    public static let defaultPageSize = 500
    /// A refresh token accepted by /oauth2/token together with `appKey` as client_id.
    public var refreshToken: String? = nil
    public var appKey: String? = nil
    /// Lifetime of access tokens issued by /oauth2/token.
    public var accessTokenLifetime: Duration = .seconds(14400)
    /// Serve a team account: root namespace (the served dir) differs from the home namespace.
    public var teamMode: Bool = false
    /// In team mode, the member's home folder: a folder of this name directly under `root`.
    public var teamHomeFolder: String = "Home"
    public var tlsCertificatePath: String? = nil
    public var tlsKeyPath: String? = nil
    public var rangePastEnd: RangePastEnd = .status416
    /// Served paths published as shared links at start, each with an optional password.
    public var sharedLinks: [(path: String, password: String?)] = []
    /// Whether sharing/get_shared_link_file honours Range (the `link_range` knob).
    public var sharedLinkRange: Bool = true
    /// When set, every longpoll answer carries `backoff` with this many seconds.
    public var longpollBackoff: Int? = nil
    /// Upper bound for longpoll's wait, in seconds; the API's minimum timeout is 30 s, which
    /// tests may want to shorten.
    public var longpollMaxWait: Int? = nil

    public init(root: String) {
        self.root = root
    }
}
