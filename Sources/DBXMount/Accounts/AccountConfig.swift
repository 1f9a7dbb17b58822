// The accounts `dbx-mount auth` signs in, kept in `$XDG_CONFIG_HOME/dbx-mount/config.json`
// (else `~/.config/dbx-mount/config.json`):
//
//     {"default": "work",
//      "accounts": {"work": {"app_key": "...", "refresh_token": "...", "account_id": "dbid:...",
//                            "email": "...", "display_name": "..."}}}
//
// A refresh token is as good as a password for as long as it is not revoked, so the file is
// written 0600 in a 0700 directory, and a file others could read (or a directory others could write,
// where they could swap the file) is refused rather than used, as ssh refuses a loose key.

import DropboxFS
import Foundation

struct StoredAccount: Codable, Equatable {
    var appKey: String
    var refreshToken: String
    var accountID: String?
    var email: String?
    var displayName: String?

    enum CodingKeys: String, CodingKey {
        case appKey = "app_key", refreshToken = "refresh_token", accountID = "account_id", email
        case displayName = "display_name"
    }
}

extension StoredAccount: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Never the refresh token.
    var description: String { "StoredAccount(\(email ?? accountID ?? "?"), <redacted>)" }
    var debugDescription: String { description }
    var customMirror: Mirror { Mirror(self, children: [:]) }
}

struct AccountConfig: Codable, Equatable {
    var defaultAccount: String?
    var accounts: [String: StoredAccount] = [:]

    enum CodingKeys: String, CodingKey { case defaultAccount = "default", accounts }

    /// The account called `name`, else the default one. Throws a message naming what exists.
    func account(named name: String?, path: String) throws(ConfigError) -> (name: String, account: StoredAccount) {
        guard let chosen = name ?? defaultAccount ?? (accounts.count == 1 ? accounts.keys.first : nil) else {
            throw ConfigError("no default account in \(path); pick one with --account NAME (\(listing))")
        }
        guard let account = accounts[chosen] else {
            throw ConfigError("no account '\(chosen)' in \(path) (\(listing)); sign in with: dbx-mount auth --account \(chosen)")
        }
        return (chosen, account)
    }

    private var listing: String {
        accounts.isEmpty ? "no accounts" : "accounts: " + accounts.keys.sorted().joined(separator: ", ")
    }
}

struct ConfigError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Reads and writes the config file, enforcing its permissions.
enum ConfigFile {
    /// `$XDG_CONFIG_HOME/dbx-mount/config.json`, else `~/.config/dbx-mount/config.json`. The XDG
    /// spec says a relative `XDG_CONFIG_HOME` is invalid and must be ignored.
    static func defaultPath(environment: [String: String]) -> String {
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") {
            return xdg + "/dbx-mount/config.json"
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.config/dbx-mount/config.json"
    }

    /// The config at `path`, or nil if there is none. Refuses a file or directory with loose
    /// permissions, naming the command that fixes it.
    static func load(_ path: String) throws(ConfigError) -> AccountConfig? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw ConfigError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw ConfigError("\(path) is not a regular file") }
        try checkDirectory(of: path)
        let uid = geteuid()
        // Root may read a user's config (a system fstab entry with -o config=PATH); nobody else may
        // use a file another user controls.
        if info.st_uid != uid && uid != 0 {
            throw ConfigError("\(path) belongs to another user (uid \(info.st_uid)); it must be your own file")
        }
        let mode = info.st_mode & 0o777
        if mode & 0o077 != 0 {
            throw ConfigError("\(path) can be read by others (mode \(String(mode, radix: 8))); it holds sign-in secrets. Fix it with: chmod 600 \(path)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        do {
            return try JSONDecoder().decode(AccountConfig.self, from: data)
        } catch {
            throw ConfigError("\(path) is not a valid dbx-mount config (\(Self.reason(error)))")
        }
    }

    /// Reads the config again, applies `change` and writes it, holding `path.lock` (`flock`)
    /// throughout: `auth` waits minutes for the user's code, and a second `auth` or a `logout`
    /// finished meanwhile must not be undone by saving the copy read before.
    static func update(at path: String, _ change: (inout AccountConfig) -> Void) throws(ConfigError) {
        let directory = (path as NSString).deletingLastPathComponent
        try makeDirectory(directory)
        let lock = open(path + ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw ConfigError("cannot lock \(path): \(String(cString: strerror(errno)))") }
        defer { close(lock) }
        while flock(lock, LOCK_EX) != 0 {
            guard errno == EINTR else { throw ConfigError("cannot lock \(path): \(String(cString: strerror(errno)))") }
        }
        var config = try load(path) ?? AccountConfig()
        change(&config)
        try save(config, to: path)
    }

    /// Writes `config` atomically (a 0600 temporary file renamed over the old one), creating the
    /// directory 0700 if needed.
    static func save(_ config: AccountConfig, to path: String) throws(ConfigError) {
        let directory = (path as NSString).deletingLastPathComponent
        try makeDirectory(directory)
        try checkDirectory(of: path)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data: Data
        do { data = try encoder.encode(config) + Data("\n".utf8) } catch {
            throw ConfigError("cannot encode the config: \(error)")
        }
        let failure = data.withUnsafeBytes {
            WholeFileWrite.write($0, to: path, through: path + WholeFileWrite.temporarySuffix, synced: true)
        }
        guard failure == 0 else { throw ConfigError("cannot write \(path): \(String(cString: strerror(failure)))") }
    }

    /// `mkdir -p`, with 0700 for every directory it creates (the XDG base directories included).
    private static func makeDirectory(_ directory: String) throws(ConfigError) {
        var info = stat()
        if stat(directory, &info) == 0 { return }
        let parent = (directory as NSString).deletingLastPathComponent
        if !parent.isEmpty && parent != directory { try makeDirectory(parent) }
        guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
            throw ConfigError("cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        chmod(directory, 0o700)   // mkdir's mode is masked by the umask
    }

    /// A directory others can write lets them replace the config with their own.
    private static func checkDirectory(of path: String) throws(ConfigError) {
        let directory = (path as NSString).deletingLastPathComponent
        var info = stat()
        guard stat(directory.isEmpty ? "." : directory, &info) == 0 else {
            throw ConfigError("cannot examine \(directory): \(String(cString: strerror(errno)))")
        }
        let mode = info.st_mode & 0o777
        if mode & 0o022 != 0 {
            throw ConfigError("\(directory) can be written by others (mode \(String(mode, radix: 8))), so they could replace the config. Fix it with: chmod 700 \(directory)")
        }
    }

    private static func reason(_ error: Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, let context):
            // Named with its place (`accounts.carol.app_key`): with several accounts, which one.
            "missing \"\((context.codingPath.map(\.stringValue) + [key.stringValue]).joined(separator: "."))\""
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            "wrong type at \(context.codingPath.map(\.stringValue).joined(separator: "."))"
        case DecodingError.dataCorrupted: "not JSON"
        default: "unreadable"
        }
    }
}
