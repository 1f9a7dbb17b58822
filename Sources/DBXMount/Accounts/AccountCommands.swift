// `dbx-mount auth`, `logout` and `whoami`: signing in with OAuth 2 (code flow, PKCE S256, offline
// access, the user's own app key and no secret), signing out by revoking, and showing who is
// signed in. The refresh token goes into the config (`AccountConfig`); no token is ever printed.

import ArgumentParser
import Crypto
import CurlTransport
import DropboxClient
import Foundation
import Logging

/// Options every account command shares.
struct AccountOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The account's name in the config (default: the config's default account).", valueName: "name"))
    var account: String?

    @Option(help: ArgumentHelp("The config file (default: $XDG_CONFIG_HOME/dbx-mount/config.json or ~/.config/dbx-mount/config.json).",
                               valueName: "path"))
    var config: String?

    @Option(help: ArgumentHelp("Base URL of the Dropbox API host, which also serves /oauth2/token (default: $DBX_API_URL or https://api.dropboxapi.com).",
                               valueName: "url"))
    var apiURL: String?

    @Option(help: ArgumentHelp("CA certificates to trust for https, in PEM.", valueName: "path"))
    var caBundle: String?

    var environment: [String: String] { ProcessInfo.processInfo.environment }

    var configPath: String { config ?? ConfigFile.defaultPath(environment: environment) }

    func endpoints() throws(UsageError) -> DropboxEndpoints {
        let api = apiURL ?? environment["DBX_API_URL"] ?? DropboxEndpoints.dropbox.api
        guard api.hasPrefix("https://") || api.hasPrefix("http://") else {
            throw UsageError("'\(api)' is not an http:// or https:// URL")
        }
        return DropboxEndpoints(api: api, content: DropboxEndpoints.dropbox.content, notify: DropboxEndpoints.dropbox.notify)
    }

    /// The transport for the account's calls; a CA bundle that cannot be one ends the command (64).
    func transport() -> CurlTransport {
        if let caBundle, let problem = CABundle.problem(at: caBundle) { exitWithMessage(problem, code: 64) }
        return CurlTransport(caBundlePath: caBundle)
    }

    /// Loads the config, exiting with its message if it is refused.
    func loadConfig() -> AccountConfig? {
        do { return try ConfigFile.load(configPath) } catch { exitWithMessage(error.description, code: 1) }
    }
}

/// Warnings (a refused refresh token, a failed refresh) on stderr, as the mount logs them.
private func commandLogger() -> Logger {
    Logger(label: "dbx-mount") { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = .warning
        return handler
    }
}

struct AuthCommand: ParsableCommand {
    enum Redirect: String, ExpressibleByArgument, CaseIterable { case none, loopback }

    static let configuration = CommandConfiguration(
        commandName: "auth",
        abstract: "Sign in to Dropbox and save the account's refresh token in the config.",
        discussion: """
            Uses OAuth 2 with PKCE and your own Dropbox app's key (no secret): create an app at https://www.dropbox.com/developers/apps with the scopes files.metadata.read, files.content.read, account_info.read and sharing.read (all four: dbx-mount asks for them, and Dropbox refuses to sign in an app that lacks one it asks for). dbx-mount prints the authorize URL; open it, allow access, and paste the code Dropbox shows (--redirect none, the default), or let the browser come back to 127.0.0.1 (--redirect loopback; register http://127.0.0.1:PORT/ as a redirect URI of the app). The first account saved becomes the default.
            """
    )

    @OptionGroup var options: AccountOptions

    @Option(help: ArgumentHelp("Your Dropbox app's key (default: $DBX_APP_KEY, else the key the account, or the default account, used).",
                               valueName: "key"))
    var appKey: String?

    @Option(help: "How the code comes back: pasted (none) or through a redirect to 127.0.0.1 (loopback).")
    var redirect: Redirect = .none

    @Option(help: ArgumentHelp("Port for --redirect loopback (0 picks a free one).", valueName: "port"))
    var redirectPort: UInt16 = 53683

    @Option(help: ArgumentHelp("Dropbox's authorize page (default: $DBX_AUTHORIZE_URL or https://www.dropbox.com/oauth2/authorize).",
                               valueName: "url"))
    var authorizeURL: String?

    @Flag(help: "Make this account the default.")
    var makeDefault = false

    /// Every scope a route dbx-mount calls needs (docs/dropbox-api.md §1): `sharing.read` is for
    /// mounting shared links.
    static let scopes = "account_info.read files.content.read files.metadata.read sharing.read"

    mutating func run() throws {
        let environment = options.environment
        let endpoints: DropboxEndpoints
        do { endpoints = try options.endpoints() } catch { exitWithMessage(error.description, code: 64) }
        let authorizeBase = authorizeURL ?? environment["DBX_AUTHORIZE_URL"] ?? "https://www.dropbox.com/oauth2/authorize"
        guard authorizeBase.hasPrefix("https://") || authorizeBase.hasPrefix("http://") else {
            exitWithMessage("'\(authorizeBase)' is not an http:// or https:// URL", code: 64)
        }
        let path = options.configPath
        var config = options.loadConfig() ?? AccountConfig()
        let name = options.account ?? config.defaultAccount ?? "default"
        guard !name.isEmpty, !name.contains(where: { $0.isWhitespace || $0 == "," || $0 == "=" }) else {
            exitWithMessage("account name '\(name)' cannot hold spaces, commas or '=' (it is used in -o account=NAME)", code: 64)
        }
        // One app usually serves every account, so a new account reuses the default account's key.
        let knownKey = config.accounts[name]?.appKey ?? config.defaultAccount.flatMap { config.accounts[$0]?.appKey }
        guard let key = appKey ?? environment["DBX_APP_KEY"] ?? knownKey, !key.isEmpty else {
            exitWithMessage("no app key: pass --app-key KEY or set DBX_APP_KEY (create an app at https://www.dropbox.com/developers/apps)",
                            code: 64)
        }

        let verifier = PKCE.makeVerifier()
        let state = PKCE.makeVerifier(length: 32)
        var receiver: LoopbackRedirect?
        if redirect == .loopback {
            do { receiver = try LoopbackRedirect(port: redirectPort) } catch { exitWithMessage(error.description, code: 1) }
        }
        let redirectURI = receiver?.redirectURI
        var query = [("client_id", key), ("response_type", "code"), ("code_challenge", PKCE.challenge(for: verifier)),
                     ("code_challenge_method", "S256"), ("token_access_type", "offline"), ("scope", Self.scopes)]
        if let redirectURI { query += [("redirect_uri", redirectURI), ("state", state)] }
        let url = authorizeBase + (authorizeBase.contains("?") ? "&" : "?")
            + query.map { "\($0.0)=\(FormEncoding.encode($0.1))" }.joined(separator: "&")

        // The URL alone on stdout (scripts and tests read it); instructions on stderr.
        let stderr = FileHandle.standardError
        stderr.write(Data("Open this URL in a browser, sign in to Dropbox and allow access:\n\n".utf8))
        FileHandle.standardOutput.write(Data((url + "\n").utf8))
        let code: String
        if let receiver {
            stderr.write(Data("\nWaiting for Dropbox to redirect to \(receiver.redirectURI) ...\n".utf8))
            do { code = try receiver.waitForCode(state: state, timeout: 300) } catch { exitWithMessage(error.description, code: 1) }
        } else {
            stderr.write(Data("\nThen paste the code Dropbox shows here and press Enter: ".utf8))
            let input = readLine()
            // A terminal echoes the user's Enter; a pipe does not, so end the prompt's line here.
            if isatty(STDIN_FILENO) == 0 { stderr.write(Data("\n".utf8)) }
            guard let line = input?.trimmingCharacters(in: .whitespacesAndNewlines), !line.isEmpty else {
                exitWithMessage("no code was entered", code: 1)
            }
            code = line
        }

        let transport = options.transport()
        let endpoint = OAuthTokenEndpoint(endpoints: endpoints, appKey: key, transport: transport)
        let grant: TokenGrant
        do {
            grant = try endpoint.exchange(code: code, verifier: verifier, redirectURI: redirectURI)
        } catch {
            if case .auth(let tag, let summary) = error {
                exitWithMessage("Dropbox did not accept the code (\(tag): \(summary)) at \(endpoint.tokenURL)", code: 1)
            }
            exitWithMessage("cannot exchange the code: \(error) (\(endpoint.tokenURL))", code: 1)
        }
        guard let refreshToken = grant.refreshToken else {
            exitWithMessage("Dropbox granted no refresh token (the app must allow offline access)", code: 1)
        }
        let client = DropboxHTTPClient(endpoints: endpoints, tokens: StaticAccessToken(grant.accessToken), transport: transport)
        let account: Account
        do { account = try client.currentAccount() } catch {
            exitWithMessage("signed in, but cannot read the account: \(error) (does the app have the scope account_info.read?)", code: 1)
        }
        let stored = StoredAccount(appKey: key, refreshToken: refreshToken, accountID: account.accountID,
                                   email: account.email, displayName: account.displayName)
        let makeDefault = self.makeDefault
        do {
            try ConfigFile.update(at: path) { fresh in
                fresh.accounts[name] = stored
                if makeDefault || fresh.defaultAccount == nil || fresh.accounts[fresh.defaultAccount!] == nil {
                    fresh.defaultAccount = name
                }
                config = fresh
            }
        } catch { exitWithMessage(error.description, code: 1) }
        let isDefault = config.defaultAccount == name ? " (the default)" : ""
        stderr.write(Data("\nSigned in as \(account.displayName) <\(account.email)>; saved as account '\(name)'\(isDefault) in \(path)\n".utf8))
    }

    /// A refused refresh token (the token endpoint's `invalid_grant`, ...) says so; any other error
    /// keeps its own description ("Dropbox rejected the access token (invalid_access_token)").
    static func explain(_ error: DropboxError) -> String {
        if case .auth(let tag, let summary) = error, ["invalid_grant", "invalid_client", "unauthorized_client"].contains(tag) {
            return "Dropbox refused the refresh token (\(tag): \(summary))"
        }
        return "\(error)"
    }
}

struct LogoutCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Revoke an account's token at Dropbox and remove the account from the config."
    )

    @OptionGroup var options: AccountOptions

    mutating func run() throws {
        let path = options.configPath
        guard let config = options.loadConfig(), !config.accounts.isEmpty else {
            exitWithMessage("no accounts in \(path)", code: 1)
        }
        let chosen: (name: String, account: StoredAccount)
        do { chosen = try config.account(named: options.account, path: path) } catch { exitWithMessage(error.description, code: 1) }
        let endpoints: DropboxEndpoints
        do { endpoints = try options.endpoints() } catch { exitWithMessage(error.description, code: 64) }

        // Revoking needs an access token; revoking it disables the refresh token and all its siblings.
        let transport = options.transport()
        let endpoint = OAuthTokenEndpoint(endpoints: endpoints, appKey: chosen.account.appKey, transport: transport)
        var note = "revoked its token at Dropbox"
        do {
            let access = try endpoint.refresh(refreshToken: chosen.account.refreshToken).accessToken
            try OAuthTokenEndpoint.revoke(accessToken: access, endpoints: endpoints, transport: transport)
        } catch {
            guard case .auth = error else {
                exitWithMessage("cannot revoke the token of account '\(chosen.name)': \(error); the account stays in \(path)", code: 1)
            }
            note = "its token was already revoked or invalid"
        }
        do {
            try ConfigFile.update(at: path) { fresh in
                fresh.accounts[chosen.name] = nil
                if fresh.defaultAccount == chosen.name { fresh.defaultAccount = fresh.accounts.keys.sorted().first }
            }
        } catch { exitWithMessage(error.description, code: 1) }
        let who = chosen.account.email.map { " (\($0))" } ?? ""
        print("Signed out of account '\(chosen.name)'\(who): \(note), and removed it from \(path).")
    }
}

struct WhoamiCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whoami",
        abstract: "Show the signed-in account: name, email and space used.",
        discussion: "Uses the account from the config, or DBX_ACCESS_TOKEN when no --account is given and it is set."
    )

    @OptionGroup var options: AccountOptions

    mutating func run() throws {
        let endpoints: DropboxEndpoints
        do { endpoints = try options.endpoints() } catch { exitWithMessage(error.description, code: 64) }
        let transport = options.transport()
        let credentials: Credentials
        do {
            credentials = try Credentials.resolve(tokenFile: nil, account: options.account, configPath: options.config,
                                                  environment: options.environment, endpoints: endpoints,
                                                  transport: transport, logger: commandLogger())
        } catch {
            exitWithMessage(error.description, code: error.exitCode)
        }
        let client = DropboxHTTPClient(endpoints: endpoints, tokens: credentials.tokens, transport: transport)
        let account: Account
        let usage: SpaceUsage
        do {
            account = try client.currentAccount()
            usage = try client.spaceUsage()
        } catch {
            if case .auth = error { exitWithMessage("\(AuthCommand.explain(error)); \(credentials.remedy)", code: 1) }
            exitWithMessage("\(error) (\(endpoints.api))", code: 1)
        }
        if let name = credentials.accountName { print("account:  \(name)") }
        print("name:     \(account.displayName)")
        print("email:    \(account.email)")
        let allocated = usage.allocated > 0 ? " of \(Self.size(usage.allocated))" : ""
        print("space:    \(Self.size(usage.used)) used\(allocated)")
        if account.rootNamespaceID != account.homeNamespaceID {
            print("team:     yes (mount the team space with --team-space)")
        }
    }

    /// Binary units, one decimal: "1.5 GiB".
    static func size(_ bytes: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f", value) + " " + units[unit]
    }
}

/// Proof Key for Code Exchange (RFC 7636) with S256.
enum PKCE {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")

    /// Random alphanumerics (Dropbox allows up to 128; RFC 7636 asks for at least 43).
    static func makeVerifier(length: Int = 64) -> String {
        var generator = SystemRandomNumberGenerator()
        return String((0..<length).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }

    /// `base64url(sha256(verifier))` without padding.
    static func challenge(for verifier: String) -> String {
        Data(SHA256.hash(data: Data(verifier.utf8))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
