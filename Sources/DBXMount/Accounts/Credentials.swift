// Where a command's Dropbox token comes from. In order: a token file (--token-file, -o token_file),
// an account named on the command line (--account, -o account), DBX_ACCESS_TOKEN, and the config's
// default account. A token never comes from argv: only its file's path or an account's name does.

import Crypto
import CurlTransport
import DropboxClient
import Foundation
import Logging
import Synchronization

struct Credentials {
    let tokens: any AccessTokenProvider
    /// What to tell the user when Dropbox refuses the token.
    let remedy: String
    /// The account's name, when the token comes from the config.
    let accountName: String?
    /// Names these credentials without holding them (a hash of a token), so that a mount can find
    /// the account they reached last time when Dropbox cannot be asked (`KnownAccounts`).
    var identity: String = ""

    /// Thrown when the config exists but cannot be used (exit 1); a missing token is a `UsageError`.
    static func resolve(tokenFile: String?, account: String?, configPath: String?, environment: [String: String],
                        endpoints: DropboxEndpoints, transport: any HTTPTransport,
                        logger: Logger) throws(CredentialsError) -> Credentials {
        if let path = tokenFile {
            guard let data = FileManager.default.contents(atPath: path),
                  let text = String(data: data, encoding: .utf8) else {
                throw .usage(UsageError("cannot read token file \(path)"))
            }
            let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !token.isEmpty else { throw .usage(UsageError("token file \(path) is empty")) }
            guard StaticAccessToken.isWellFormed(token) else {
                throw .usage(UsageError("token file \(path) does not hold an access token alone (it has spaces, quotes or other characters no token has)"))
            }
            // Warned, not refused (as the config is): the token is the caller's, and a script's
            // file may be shared on purpose; but anyone who can read it reads the whole Dropbox.
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & 0o077 != 0 {
                logger.warning("the token file can be read by others (mode \(String(info.st_mode & 0o777, radix: 8))); fix it with: chmod 600 \(path)")
            }
            return Credentials(tokens: FixedToken(token, from: "the token file \(path)", logger: logger),
                               remedy: "check the token in \(path)", accountName: nil,
                               identity: "token:" + Self.digest(token))
        }
        let environmentToken = environment["DBX_ACCESS_TOKEN"]?.trimmingCharacters(in: .whitespacesAndNewlines)
        if account == nil, let token = environmentToken, !token.isEmpty {
            guard StaticAccessToken.isWellFormed(token) else {
                throw .usage(UsageError("DBX_ACCESS_TOKEN does not hold an access token alone (it has spaces, quotes or other characters no token has)"))
            }
            return Credentials(tokens: FixedToken(token, from: "DBX_ACCESS_TOKEN", logger: logger),
                               remedy: "check DBX_ACCESS_TOKEN", accountName: nil,
                               identity: "token:" + Self.digest(token))
        }
        let path = configPath ?? ConfigFile.defaultPath(environment: environment)
        let config: AccountConfig?
        do { config = try ConfigFile.load(path) } catch { throw .config(error) }
        guard let config, !config.accounts.isEmpty else {
            if let account {
                throw .config(ConfigError("no account '\(account)': \(path) has none; sign in with: dbx-mount auth --account \(account)"))
            }
            throw .usage(UsageError("no access token: sign in with 'dbx-mount auth', or set DBX_ACCESS_TOKEN, or pass --token-file FILE"))
        }
        let chosen: (name: String, account: StoredAccount)
        do { chosen = try config.account(named: account, path: path) } catch { throw .config(error) }
        let endpoint = OAuthTokenEndpoint(endpoints: endpoints, appKey: chosen.account.appKey, transport: transport)
        let provider = RefreshingAccessToken(refreshToken: chosen.account.refreshToken, endpoint: endpoint, logger: logger)
        return Credentials(tokens: provider, remedy: "sign in again with: dbx-mount auth --account \(chosen.name)",
                           accountName: chosen.name,
                           identity: "account:" + Self.digest(chosen.account.appKey + "\n" + chosen.account.refreshToken))
    }

    /// SHA-256, hex: a name for a secret that does not reveal it.
    static func digest(_ secret: String) -> String {
        SHA256.hash(data: Data(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

enum CredentialsError: Error, CustomStringConvertible {
    case usage(UsageError)
    case config(ConfigError)

    var description: String {
        switch self {
        case .usage(let error): error.description
        case .config(let error): error.description
        }
    }

    var exitCode: Int32 {
        if case .usage = self { return 64 }
        return 1
    }
}

/// Prints `dbx-mount: message` on stderr and exits.
func exitWithMessage(_ message: String, code: Int32) -> Never {
    FileHandle.standardError.write(Data("dbx-mount: \(message)\n".utf8))
    Foundation.exit(code)
}

/// A token given as it is (a file, `DBX_ACCESS_TOKEN`): never refreshed. When Dropbox refuses it
/// under a running mount (the App Console's tokens last four hours), one line says why every
/// operation now fails, and what lasts, instead of a warning per failed call saying only that.
final class FixedToken: AccessTokenProvider, CustomStringConvertible {
    private let token: StaticAccessToken
    private let source: String
    private let logger: Logger
    /// (accepted once, refusal told): a token refused before it ever worked is the mount's own
    /// one line of error (`remedy`), not this log line as well.
    private let seen = Mutex((accepted: false, told: false))

    init(_ token: String, from source: String, logger: Logger) {
        self.token = StaticAccessToken(token)
        self.source = source
        self.logger = logger
    }

    func accessToken() throws(DropboxError) -> String { try token.accessToken() }

    func tokenAccepted() { seen.withLock { $0.accepted = true } }

    func tokenExpired(_ refused: String) throws(DropboxError) {
        let tell = seen.withLock { seen in
            defer { if seen.accepted { seen.told = true } }
            return seen.accepted && !seen.told
        }
        guard tell else { return }
        logger.error("Dropbox refused the access token from \(source); every operation now fails with EACCES. Access tokens from the App Console expire after 4 hours: for a mount that lasts, sign in with 'dbx-mount auth', then remount")
    }

    var description: String { "FixedToken(<redacted>)" }
}
