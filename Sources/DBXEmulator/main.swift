// dbx-emulator: serves a local directory as a Dropbox account over HTTP(S) on loopback.

import ArgumentParser
import DropboxEmulator

#if canImport(Glibc)
import Glibc
#endif

struct DBXEmulatorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dbx-emulator",
        abstract: "Serve a local directory as a Dropbox account (API v2 read-only subset).",
        discussion: "Without a subcommand, serves: `dbx-emulator --root DIR` is `dbx-emulator serve --root DIR`.",
        subcommands: [Serve.self, MakePhotos.self],
        defaultSubcommand: Serve.self
    )
}

struct MakePhotos: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-photos",
        abstract: "Write sample photos (real JPEG and PNG images) into a directory.",
        discussion: """
            Writes IMG_0001.jpg, IMG_0002.png, ...: landscape and portrait, 640x480 to 3000x2000, \
            each with its number drawn large. The same seed gives the same files.
            """
    )

    @Argument(help: "Directory to write into; created if missing.") var directory: String
    @Option(help: "How many photos.") var count: Int = 12
    @Option(help: "Seed for sizes, formats and drawings.") var seed: UInt64 = 1

    func validate() throws {
        guard (0...9999).contains(count) else { throw ValidationError("--count must be 0-9999") }
    }

    func run() throws {
        do {
            let names = try SamplePhotos.write(count: count, seed: seed, into: directory)
            print("wrote \(names.count) photos to \(directory)")
        } catch {
            throw ValidationError(error.description)
        }
    }
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve a local directory as a Dropbox account.",
        discussion: """
            Prints one line, "dbx-emulator listening on URL", once it accepts connections, and \
            stops cleanly on SIGINT or SIGTERM. Admin routes: GET /__stats, POST /__stats/reset, \
            POST /__admin/expire_cursors, GET|POST /__admin/knobs.
            """
    )

    @Option(help: "Directory to serve as the account root.") var root: String
    @Option(help: "Address to listen on.") var host: String = "127.0.0.1"
    @Option(help: "Port to listen on; 0 picks a free one.") var port: Int = 0
    @Option(name: .customLong("token"), help: "An always-valid access token (repeatable). Default: emulator-token.") var tokens: [String] = []
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain; serves HTTPS with --tls-key.") var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key for --tls-cert.") var tlsKey: String?
    @Option(name: .customLong("latency-ms"), help: "Delay added to each API request, in milliseconds.") var latencyMs: Int = 0
    @Option(help: "Global cap on response body bytes per second.") var bandwidth: Int?
    @Option(name: .customLong("connection-bandwidth"), help: "Cap on each connection's response body bytes per second (a far server).") var connectionBandwidth: Int?
    @Option(name: .customLong("fail-rate"), help: "Fraction (0-1) of API requests answered 500, 503 or 429.") var failRate: Double = 0
    @Option(name: .customLong("truncate-rate"), help: "Fraction (0-1) of download bodies cut short.") var truncateRate: Double = 0
    @Option(help: "Seed for the failure and truncation dice.") var seed: UInt64 = 1
    @Option(name: .customLong("rate-limit"), help: "API requests per second before 429 with Retry-After.") var rateLimit: Int?
    @Flag(name: .customLong("lazy-hashes"), help: "Hash files when first listed, not before listening (faster start, slow first listing).") var lazyHashes = false
    @Option(name: .customLong("page-size"), help: "Maximum entries per list_folder page (a request's limit is honoured up to it; 500 without one).") var pageSize: Int = 2000
    @Option(name: .customLong("refresh-token"), help: "Refresh token accepted by /oauth2/token (needs --app-key).") var refreshToken: String?
    @Option(name: .customLong("app-key"), help: "client_id that goes with --refresh-token.") var appKey: String?
    @Option(name: .customLong("token-lifetime"), help: "Lifetime in seconds of access tokens issued by /oauth2/token.") var tokenLifetime: Int = 14400
    @Flag(help: "Serve a team account: the root namespace differs from the home namespace.") var team = false
    @Option(name: .customLong("team-home"), help: "Team mode: the home folder under --root.") var teamHome: String = "Home"
    @Option(name: .customLong("range-past-end"), help: "Answer for a range past the end: 416 or 409.") var rangePastEnd: String = "416"
    @Option(name: .customLong("longpoll-backoff"), help: "Seconds of backoff sent with every longpoll answer.") var longpollBackoff: Int?
    @Option(name: .customLong("shared-link"), help: ArgumentHelp("Publish a served folder or file as a shared link, with a password after a colon (repeatable); the URLs are printed at start.", valueName: "path[:password]")) var sharedLinks: [String] = []
    @Flag(name: .customLong("link-ignores-range"), help: "sharing/get_shared_link_file answers a whole 200 whatever Range asks (knob link_range).") var linkIgnoresRange = false
    @Option(name: .customLong("longpoll-max-wait"), help: "Cap, in seconds, on how long longpoll waits.") var longpollMaxWait: Int?

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0-65535") }
        guard (0...1).contains(failRate) else { throw ValidationError("--fail-rate must be between 0 and 1") }
        guard (0...1).contains(truncateRate) else { throw ValidationError("--truncate-rate must be between 0 and 1") }
        guard latencyMs >= 0 else { throw ValidationError("--latency-ms must not be negative") }
        guard pageSize >= 1 else { throw ValidationError("--page-size must be at least 1") }
        guard tokenLifetime >= 1 else { throw ValidationError("--token-lifetime must be at least 1") }
        if let bandwidth, bandwidth < 1 { throw ValidationError("--bandwidth must be positive") }
        if let connectionBandwidth, connectionBandwidth < 1 { throw ValidationError("--connection-bandwidth must be positive") }
        if let rateLimit, rateLimit < 1 { throw ValidationError("--rate-limit must be positive") }
        guard RangePastEnd(rawValue: rangePastEnd) != nil else { throw ValidationError("--range-past-end must be 416 or 409") }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard (refreshToken == nil) == (appKey == nil) else { throw ValidationError("--refresh-token and --app-key go together") }
        var st = stat()
        guard stat(root, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { throw ValidationError("--root \(root) is not a directory") }
    }

    func run() throws {
        var c = EmulatorConfiguration(root: root)
        c.host = host
        c.port = port
        if !tokens.isEmpty { c.accessTokens = tokens }
        c.tlsCertificatePath = tlsCert
        c.tlsKeyPath = tlsKey
        c.latency = .milliseconds(latencyMs)
        c.bandwidthBytesPerSecond = bandwidth
        c.connectionBandwidthBytesPerSecond = connectionBandwidth
        c.failureRate = failRate
        c.truncateRate = truncateRate
        c.seed = seed
        c.requestsPerSecond = rateLimit
        c.pageSizeCap = pageSize
        c.lazyContentHashes = lazyHashes
        c.refreshToken = refreshToken
        c.appKey = appKey
        c.accessTokenLifetime = .seconds(tokenLifetime)
        c.teamMode = team
        c.teamHomeFolder = teamHome
        c.rangePastEnd = RangePastEnd(rawValue: rangePastEnd) ?? .status416
        c.longpollBackoff = longpollBackoff
        c.longpollMaxWait = longpollMaxWait
        c.sharedLinkRange = !linkIgnoresRange
        c.sharedLinks = sharedLinks.map { spec in
            guard let colon = spec.firstIndex(of: ":") else { return (spec, nil) }
            return (String(spec[..<colon]), String(spec[spec.index(after: colon)...]))
        }

        // Block the signals in every thread (the server's threads inherit this mask) and take
        // them synchronously below, so shutdown runs on this thread and nothing is async-unsafe.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)

        let server: DropboxEmulatorServer
        do {
            server = try DropboxEmulatorServer.start(c)
        } catch {
            throw ValidationError("cannot start: \(error)")
        }
        print("dbx-emulator listening on \(server.baseURL)")
        for (spec, url) in zip(c.sharedLinks, server.sharedLinkURLs) { print("shared link \(spec.path): \(url)") }
        fflush(nil)  // all streams; naming `stdout` is a shared-mutable-state error in Swift 6
        var received: Int32 = 0
        sigwait(&signals, &received)
        server.stop()
    }
}

DBXEmulatorCommand.main()
