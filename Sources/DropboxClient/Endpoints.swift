// The three Dropbox hosts (docs/dropbox-api.md §0): RPC on `api`, downloads on `content`, longpoll on
// `notify`. Tests and the demo point all three at the emulator, e.g. `http://127.0.0.1:8080`.

public struct DropboxEndpoints: Sendable, Equatable {
    /// Base URL for RPC routes, without a trailing slash.
    public var api: String
    /// Base URL for download-style routes.
    public var content: String
    /// Base URL for `files/list_folder/longpoll`.
    public var notify: String

    /// A trailing `/` on any base URL is dropped, so `http://127.0.0.1:8080/` works too.
    public init(api: String, content: String, notify: String) {
        self.api = Self.trimmed(api); self.content = Self.trimmed(content); self.notify = Self.trimmed(notify)
    }

    /// All three routes on one server (the emulator serves every host on one port).
    public init(baseURL: String) {
        self.init(api: baseURL, content: baseURL, notify: baseURL)
    }

    public static let dropbox = DropboxEndpoints(
        api: "https://api.dropboxapi.com",
        content: "https://content.dropboxapi.com",
        notify: "https://notify.dropboxapi.com")

    private static func trimmed(_ url: String) -> String {
        var url = Substring(url)
        while url.hasSuffix("/") { url = url.dropLast() }
        return String(url)
    }

    /// `https://{host}/2/{route}` (py `_get_route_url`).
    func url(_ base: String, route: String) -> String { "\(base)/2/\(route)" }
}
