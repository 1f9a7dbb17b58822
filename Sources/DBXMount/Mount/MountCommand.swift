import ArgumentParser
import CurlTransport
import DropboxClient
import DropboxFS
import Foundation
import Logging
import MetadataCache
import MountRuntime
import ThumbnailCache

/// `dbx-mount [mount] [OPTIONS] [SOURCE] MOUNTPOINT`: the default subcommand, so mount.fuse3 and
/// fstab keep calling `dbx-mount SOURCE MOUNTPOINT -o ...` unchanged.
struct MountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount",
        abstract: "Mount a Dropbox account, or one folder of it, as a read-only filesystem (the default).",
        discussion: """
            SOURCE is a Dropbox folder such as /Photos; without it the whole account is mounted. SOURCE may also be a shared link (https://www.dropbox.com/scl/fo/...): the folder behind it is mounted, refreshed every --ttl seconds (a link has no change feed), its password read from the file --link-password-file names. The token comes from --token-file, else the account named by --account, else DBX_ACCESS_TOKEN, else the config's default account (see dbx-mount auth); never from the command line. An account's access tokens are refreshed automatically. Every write fails with EROFS. Listings and attributes are trusted for --ttl seconds (default 60). Unmount with: fusermount3 -u MOUNTPOINT

            -o takes dbx-mount's settings (uid=N, gid=N, umask=OCTAL, ttl=SECONDS, deadline=SECONDS, case_insensitive, token_file=PATH, account=NAME, config=PATH, team_space, api_url=URL, content_url=URL, notify_url=URL, ca_bundle=PATH, cache_dir=PATH, no_cache, thumbnails, thumbnail_dir=PATH, listing_concurrency=N, readahead_memory=MIB, direct_io, keep_page_cache, metrics_addr=HOST:PORT, pin=PATH, pin_bandwidth=MBPS, link_password_file=PATH, block_cache_dir=PATH, block_cache_size=MIB, foreground, debug) and the FUSE options allow_other, allow_root, auto_unmount, nosuid, nodev, noexec, noatime, max_read=N, fsname=NAME. Words for mount(8) (defaults, rw, ro, noauto, nofail, _netdev, user, x-systemd.*) and default_permissions, kernel_cache and auto_cache are ignored: the mount is always read-only. From fstab: dropbox:/Photos /mnt/photos fuse.dbx-mount noauto,allow_other,account=NAME 0 0

            Exit status: 0 mounted (or unmounted cleanly), 1 the mount failed, 64 bad usage.
            """
    )

    @Argument(help: ArgumentHelp("[SOURCE] MOUNTPOINT: the Dropbox folder or shared link to show (default: the whole account) and where.",
                                 valueName: "source-and-mountpoint"))
    var locations: [String] = []

    @Flag(name: .customShort("f"), help: "Stay in the foreground instead of daemonizing.")
    var foreground = false

    @Flag(name: .customShort("d"), help: "Debug output: trace every FUSE request and Dropbox call (implies -f).")
    var debug = false

    @Option(name: .customShort("o"), help: ArgumentHelp("Mount options, comma-separated (see below).", valueName: "opt,..."))
    var mountOptions: [String] = []

    @Option(help: ArgumentHelp("Read the access token from this file (default: $DBX_ACCESS_TOKEN).", valueName: "path"))
    var tokenFile: String?

    @Option(help: ArgumentHelp("Mount this signed-in account (see dbx-mount auth; default: the config's default).", valueName: "name"))
    var account: String?

    @Option(help: ArgumentHelp("The accounts config (default: $XDG_CONFIG_HOME/dbx-mount/config.json or ~/.config/dbx-mount/config.json).",
                               valueName: "path"))
    var config: String?

    @Flag(help: "Mount the team space (the team's root namespace) instead of the member's home folder.")
    var teamSpace = false

    @Option(help: ArgumentHelp("Base URL of the Dropbox API host (default: $DBX_API_URL or https://api.dropboxapi.com).", valueName: "url"))
    var apiURL: String?

    @Option(help: ArgumentHelp("Base URL of the content host (default: $DBX_CONTENT_URL or https://content.dropboxapi.com).", valueName: "url"))
    var contentURL: String?

    @Option(help: ArgumentHelp("Base URL of the notify host (default: $DBX_NOTIFY_URL or https://notify.dropboxapi.com).", valueName: "url"))
    var notifyURL: String?

    @Option(help: ArgumentHelp("CA certificates to trust for https, in PEM (TLS is always verified).", valueName: "path"))
    var caBundle: String?

    @Option(help: ArgumentHelp("Seconds a listing and the attributes it gave are trusted (default 60).", valueName: "seconds"))
    var ttl: Int?

    @Option(help: ArgumentHelp("Seconds one Dropbox call may take, retries included (default 120): past it a read fails with EIO and a listed folder keeps its cached answer.", valueName: "seconds"))
    var deadline: Int?

    @Flag(help: "Match names case-insensitively, as Dropbox does (names still show as Dropbox has them).")
    var caseInsensitive = false

    @Flag(help: "Leave out documents Dropbox cannot download (Paper and other cloud docs) instead of showing them as their exports.")
    var hideExports = false

    @Option(help: ArgumentHelp("Where the persistent metadata cache lives (default: $XDG_CACHE_HOME/dbx-mount or ~/.cache/dbx-mount).",
                               valueName: "path"))
    var cacheDir: String?

    @Flag(help: "Keep no persistent metadata cache: every mount lists the whole folder again.")
    var noCache = false

    @Option(help: ArgumentHelp("Listings the first full listing runs at once, one per subtree of the mounted folder (default 8; 1 lists it as one chain of pages).", valueName: "n"))
    var listingConcurrency: Int?

    @Flag(help: "Put Dropbox's thumbnails of a folder's images in the freedesktop thumbnail cache when the folder is listed, so file managers show previews without downloading the photos (recommended for desktop use; a few calls per folder of images).")
    var thumbnails = false

    @Option(help: ArgumentHelp("The thumbnail cache to fill (default: $XDG_CACHE_HOME/thumbnails or ~/.cache/thumbnails of the user the files are shown to).",
                               valueName: "path"))
    var thumbnailDir: String?

    @OptionGroup(title: "Shared links") var linkOptions: LinkOptions
    @OptionGroup(title: "Reading") var readOptions: ReadOptions
    @OptionGroup(title: "Metrics") var metricsOptions: MetricsOptions

    @OptionGroup(title: "Logging") var logOptions: LogOptions

    /// Every option that names a local file or folder, as a flag and as its `-o` setting. Both are
    /// taken against the directory dbx-mount starts in, before libfuse leaves it
    /// (`MountOptionList.absolute`).
    private static var localPaths: [(flag: WritableKeyPath<MountCommand, String?>, setting: String)] {
        [(\.tokenFile, "token_file"), (\.config, "config"), (\.caBundle, "ca_bundle"), (\.cacheDir, "cache_dir"),
         (\.thumbnailDir, "thumbnail_dir"), (\.readOptions.blockCacheDir, "block_cache_dir"),
         (\.logOptions.logFile, "log_file"), (\.linkOptions.linkPasswordFile, "link_password_file")]
    }

    mutating func run() throws {
        for (flag, _) in Self.localPaths { self[keyPath: flag] = self[keyPath: flag].map(MountOptionList.absolute) }
        do throws(UsageError) {
            try mount()
        } catch {
            fail(error.description, code: 64)
        }
    }

    private func fail(_ message: String, code: Int32) -> Never {
        FileHandle.standardError.write(Data("dbx-mount: \(message)\n".utf8))
        Foundation.exit(code)
    }

    private func mount() throws(UsageError) {
        var options = try MountOptionList(mountOptions)
        options.makeAbsolute(Self.localPaths.map(\.setting))
        let (source, mountpoint) = try sourceAndMountpoint()
        let environment = ProcessInfo.processInfo.environment
        let link = try linkOptions.link(source: source, options: options)
        if link != nil { Self.hideLinkKeysFromProcessList() }

        var info = stat()
        guard stat(mountpoint, &info) == 0 else {
            let code = errno
            if code == ENOENT { fail("mount point \(mountpoint) does not exist", code: 1) }
            // As fusermount3 says it; a mount point whose daemon was killed fails with ENOTCONN.
            let hint = code == ENOTCONN ? " (a mount whose dbx-mount was killed is still there: run fusermount3 -u \(mountpoint))" : ""
            fail("cannot access mount point \(mountpoint): \(String(cString: strerror(code)))\(hint)", code: 1)
        }
        if let resolved = realpath(mountpoint, nil) {
            defer { free(resolved) }
            if MountTable.fileSystemType(mountedAt: String(cString: resolved)) == "fuse.dbx-mount" {
                // statvfs always reaches the daemon (stat may not): ENOTCONN means it is gone.
                var fs = statvfs()
                let dead = statvfs(mountpoint, &fs) != 0 && errno == ENOTCONN
                fail(dead ? "a mount whose dbx-mount was killed is still at \(mountpoint): run fusermount3 -u \(mountpoint) first"
                          : "\(mountpoint) is a dbx-mount mount point already: unmount it first (fusermount3 -u \(mountpoint))",
                     code: 1)
            }
        }
        let isDirectory = info.st_mode & S_IFMT == S_IFDIR
        // A shared link to a file mounts on a file; everything else on a folder (checked below,
        // once Dropbox has said what the link is).
        guard isDirectory || link != nil else { fail("mount point \(mountpoint) is not a directory", code: 1) }
        let mountsOnAFile = !isDirectory

        let endpoints = DropboxEndpoints(
            api: apiURL ?? options.settings["api_url"] ?? environment["DBX_API_URL"] ?? DropboxEndpoints.dropbox.api,
            content: contentURL ?? options.settings["content_url"] ?? environment["DBX_CONTENT_URL"] ?? DropboxEndpoints.dropbox.content,
            notify: notifyURL ?? options.settings["notify_url"] ?? environment["DBX_NOTIFY_URL"] ?? DropboxEndpoints.dropbox.notify)
        for url in [endpoints.api, endpoints.content, endpoints.notify]
        where !(url.hasPrefix("https://") || url.hasPrefix("http://")) {
            throw UsageError("'\(url)' is not an http:// or https:// URL")
        }

        let debug = self.debug || options.settings["debug"] != nil
        // Under a systemd `Type=notify` service (`$NOTIFY_SOCKET` set) the process systemd started
        // must be the one that serves and says READY=1: a fork's parent exits before the mount is
        // ready, and systemd ignores readiness from any other process (NotifyAccess=main).
        let foreground = self.foreground || options.settings["foreground"] != nil || debug
            || ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] != nil
        try logOptions.bootstrap(options, foreground: foreground, debug: debug)
        let logger = Logger(label: "dbx-mount")
        if !options.ignored.isEmpty {
            logger.debug("ignoring mount options that concern mount(8), not dbx-mount",
                         metadata: ["options": "\(options.ignored.joined(separator: ","))"])
        }
        // Every setting is checked before Dropbox is asked anything: a bad value is a usage error
        // whether or not the token or the network is good.
        let deadlineSeconds: UInt32
        if let deadline {
            guard let seconds = UInt32(exactly: deadline), seconds > 0 else {
                throw UsageError("--deadline needs a positive number of seconds, not \(deadline)")
            }
            deadlineSeconds = seconds
        } else {
            deadlineSeconds = try options.number("deadline") ?? 120
            guard deadlineSeconds > 0 else { throw UsageError("deadline needs a positive number of seconds") }
        }
        let ttlSeconds: UInt32
        if let ttl {
            guard let seconds = UInt32(exactly: ttl) else { throw UsageError("--ttl needs a number of seconds, not \(ttl)") }
            ttlSeconds = seconds
        } else {
            ttlSeconds = try options.number("ttl") ?? 60
        }
        var filesystemOptions = FilesystemOptions(
            rootPath: link == nil ? source : "", metadataTTL: .seconds(Int(ttlSeconds)),
            uid: try options.number("uid") ?? getuid(), gid: try options.number("gid") ?? getgid(),
            umask: try options.number("umask", radix: 8),
            caseInsensitive: caseInsensitive || options.settings["case_insensitive"] != nil)
        filesystemOptions.readAhead = try readOptions.readAhead(options)
        filesystemOptions.pinBandwidth = try readOptions.pinBandwidth(options)
        filesystemOptions.showExports = !(hideExports || options.settings["hide_exports"] != nil)
        if let listingConcurrency {
            guard (1...64).contains(listingConcurrency) else {
                throw UsageError("--listing-concurrency needs a number from 1 to 64, not \(listingConcurrency)")
            }
            filesystemOptions.listingConcurrency = listingConcurrency
        } else if let value = try options.number("listing_concurrency") {
            guard (1...64).contains(value) else { throw UsageError("listing_concurrency needs a number from 1 to 64, not \(value)") }
            filesystemOptions.listingConcurrency = Int(value)
        }
        let caBundlePath = caBundle ?? options.settings["ca_bundle"]
        if let caBundlePath, let problem = CABundle.problem(at: caBundlePath) { throw UsageError(problem) }
        // Idle handles keep their TLS connections: as many as the read engine's parallel requests,
        // so a stream's next parts never pay a new handshake.
        let transport = CurlTransport(caBundlePath: caBundlePath, maxIdleHandles: CurlTransport.poolCapacity)
        let credentials = try self.credentials(options: options, environment: environment, endpoints: endpoints,
                                               transport: transport, logger: logger)
        let client = DropboxHTTPClient(endpoints: endpoints, tokens: credentials.tokens, transport: transport)

        // Check the token and the folder before mounting, so a bad one fails here, loudly. If
        // Dropbox cannot be reached at all but this account's saved tree is here, mount offline.
        let cacheDirectory = cacheDir ?? options.settings["cache_dir"] ?? SQLiteMetadataStore.defaultDirectory
        let caching = !(noCache || options.settings["no_cache"] != nil)
        let knownAccounts = KnownAccounts(cacheDirectory: cacheDirectory)
        let account: Account
        var unreachable: DropboxError?
        do {
            account = try client.currentAccount()
            credentials.tokens.tokenAccepted()
            if caching { knownAccounts.remember(account, for: credentials.identity) }
        } catch {
            if case .auth = error { fail("\(AuthCommand.explain(error)); \(credentials.remedy)", code: 1) }
            guard caching, Self.isUnreachable(error), let known = knownAccounts.account(for: credentials.identity) else {
                fail("\(error) (\(endpoints.api))", code: 1)
            }
            account = known
            unreachable = error
        }
        // A team member's home is one namespace of the team's; the team space is the root namespace,
        // reached by naming it in Dropbox-API-Path-Root (docs/dropbox-api.md §6).
        var namespace = ""
        if teamSpace || options.settings["team_space"] != nil {
            guard account.rootNamespaceID != account.homeNamespaceID else {
                fail("\(account.email) has no team space (its root is its home folder); mount without --team-space", code: 1)
            }
            namespace = account.rootNamespaceID
        }
        // Once mounted, each failed call logs one line (with Dropbox's request id); before, the
        // command's own one-line message says it.
        let pathRoot = namespace.isEmpty ? nil : #"{".tag":"root","root":"\#(namespace)"}"#
        var mountedPolicy = RetryPolicy.standard
        mountedPolicy.callDeadline = Double(deadlineSeconds)
        guard let resolved = realpath(mountpoint, nil) else {
            fail("cannot resolve mount point \(mountpoint): \(String(cString: strerror(errno)))", code: 1)
        }
        let absoluteMountpoint = String(cString: resolved)
        free(resolved)
        let metricsAddress = metricsOptions.address(options)
        let metrics = metricsAddress.map { _ in MountMetrics(mountpoint: absoluteMountpoint) }
        let meter = APIMeter(observer: metrics)
        let mountedClient = DropboxHTTPClient(endpoints: endpoints, tokens: credentials.tokens, transport: transport,
                                              pathRoot: pathRoot, retryPolicy: mountedPolicy, failureLogLevel: .warning,
                                              onRateLimited: { meter.addRateLimited() })
        // A shared link is the mounted folder, read through the link's routes (LinkOptions.swift).
        var api: any DropboxAPI = mountedClient
        if let link {
            if let unreachable {
                fail("\(Self.unreachableSummary(unreachable)) (\(endpoints.api)); a shared link is not kept for offline use", code: 1)
            }
            let checkingClient = DropboxHTTPClient(endpoints: endpoints, tokens: credentials.tokens, transport: transport)
            let target = LinkOptions.target(of: link, client: checkingClient) { fail($0, code: 1) }
            switch target {
            case .file(let file):
                guard mountsOnAFile else {
                    fail("the shared link is to a file (\(file.name)), not a folder: mount it on a file (touch PATH, then dbx-mount URL PATH)", code: 1)
                }
                filesystemOptions.rootFileName = file.name
            case .folder:
                guard !mountsOnAFile else { fail("mount point \(mountpoint) is not a directory, as a folder link needs", code: 1) }
            }
            api = SharedLinkDropbox(client: mountedClient, link: link, target: target)
            // Through a link there is no change feed: folders are listed again once their TTL ends.
            filesystemOptions.followsChanges = false
        } else if !source.isEmpty, unreachable == nil {
            let checkingClient = DropboxHTTPClient(endpoints: endpoints, tokens: credentials.tokens, transport: transport,
                                                   pathRoot: pathRoot)
            do {
                guard case .folder(let folder) = try checkingClient.metadata(path: source) else {
                    fail("\(source) is not a folder in Dropbox", code: 1)
                }
                // Entries are placed by their path_lower below the mounted folder's, so the mounted
                // path is taken as Dropbox spells it: SOURCE typed in another case, or another
                // Unicode normalization, would otherwise match none of them.
                if let display = folder.pathDisplay, display.hasPrefix("/"),
                   display.split(separator: "/").count == source.split(separator: "/").count {
                    filesystemOptions.rootPath = display
                }
            } catch {
                if error.isRoute("path", "not_found") { fail("\(source): no such folder in Dropbox", code: 1) }
                fail("cannot check \(source): \(error)", code: 1)
            }
        }

        // One saved tree per account, server and mounted folder (Dropbox paths ignore case).
        // A link has no cursor to catch up from, so no saved tree either.
        let store: DeferredStore? = !caching || link != nil ? nil : DeferredStore(
            directory: cacheDirectory,
            key: [account.accountID, endpoints.api, source.lowercased()].joined(separator: "\n")
                + (namespace.isEmpty ? "" : "\nroot:" + namespace), logger: logger)
        if let unreachable {
            guard let store, store.holdsASavedTree else {
                fail("\(Self.unreachableSummary(unreachable)) (\(endpoints.api)); no saved tree of \(source.isEmpty ? "the account" : source) to mount offline", code: 1)
            }
            filesystemOptions.startsOffline = true
            logger.warning("Dropbox cannot be reached; mounted offline from the saved tree, following changes once it answers",
                           metadata: ["error": "\(unreachable)"])
        }
        // One mount per cache: a second mount of the same saved tree or block cache fails here.
        var locks: [Int32] = []
        do throws(CacheLock.Busy) {
            if let store, let fd = try CacheLock.acquire(store.directory + "/" + SQLiteMetadataStore.fileName(key: store.key) + ".lock") {
                locks.append(fd)
            }
            if let blocks = filesystemOptions.readAhead.blockCacheDirectory, let fd = try CacheLock.acquire(blocks + "/.lock") {
                locks.append(fd)
            }
        } catch {
            fail("the cache \(error); give this mount its own --cache-dir or --block-cache-dir, or --no-cache", code: 1)
        }
        let thumbnailStore = thumbnails || options.settings["thumbnails"] != nil
            ? try thumbnailCache(mountpoint: absoluteMountpoint, namedAs: mountpoint, uid: filesystemOptions.uid, gid: filesystemOptions.gid,
                                 options: options, environment: environment, logger: logger)
            : nil
        let filesystem = DropboxFilesystem(api: MeteredDropboxAPI(api, meter: meter), options: filesystemOptions,
                                   folderModified: Int64(time(nil)), logger: logger, store: store,
                                   thumbnails: thumbnailStore)
        let mount = Mount(filesystem: filesystem, logger: logger, meter: meter, cancelCalls: { transport.stop() })
        let shownSource = link?.redactedURL ?? (source.isEmpty ? "/" : source)
        for path in readOptions.pins(options) {
            do throws(PinError) { try filesystem.keepPinned(path) } catch { fail("--pin \(path): \(error)", code: 64) }
        }
        // The metrics address and the control socket for `dbx-mount status`, bound before mounting:
        // an address the user asked for and cannot have is a usage error in one line; a socket
        // that cannot be made is only a warning (below).
        if let metrics, let metricsAddress {
            do throws(MetricsServer.Failure) {
                mount.attachMetrics(metrics, server: try MetricsServer(address: metricsAddress))
            } catch {
                fail(error.description, code: 64)
            }
        }
        do throws(ControlSocket.Failure) {
            let server = try ControlServer(mountpoint: absoluteMountpoint, directory: ControlSocket.directory(environment: environment))
            mount.attachControl(server, identity: MountIdentity(
                mountpoint: absoluteMountpoint, account: "\(account.displayName) <\(account.email)>",
                source: shownSource))
        } catch {
            // Status and pins are a window into the mount, not the mount: it goes on without them.
            logger.warning("no control socket; dbx-mount status and pin will not reach this mount",
                           metadata: ["error": "\(error)"])
        }

        var fuseOptions = ["ro", "default_permissions", "subtype=dbx-mount"]
        if !options.fuseOptions.contains(where: { $0.hasPrefix("fsname=") }) {
            // /proc/mounts is world-readable: a link shows without its secret part.
            fuseOptions.append("fsname=" + MountOptionList.escape("dropbox:" + shownSource))
        }
        fuseOptions += options.fuseOptions.filter { !$0.hasPrefix("subtype=") }

        // The absolute path: libfuse moves the process to / as it serves, and unmounts (on SIGTERM)
        // and the read-ahead raise (at the first open) name the mount by this path from there.
        let exitCode = serve(mount: mount, locks: locks, mountpoint: absoluteMountpoint, fuseOptions: fuseOptions,
                             directIO: readOptions.directIO(options), foreground: foreground,
                             debug: debug)
        Foundation.exit(exitCode)
    }

    /// Mounts, daemonizes unless asked not to, and serves until unmounted. The session (and with it
    /// the mount) is torn down before this returns.
    private func serve(mount: Mount, locks: [Int32], mountpoint: String, fuseOptions: [String], directIO: Bool, foreground: Bool,
                       debug: Bool) -> Int32 {
        let session: MountSession
        do {
            session = try MountSession(mount: mount, mountpoint: mountpoint, mountOptions: fuseOptions, directIO: directIO,
                                       debug: debug, cacheLocks: locks)
        } catch {
            mount.stopControl()
            fail(error.description, code: 1)
        }
        session.daemonize(foreground: foreground)
        for fd in locks { CacheLock.recordOwner(fd) }   // the daemon's pid, for the next mount's message
        return session.run() ? 0 : 1
    }

    /// The freedesktop thumbnail cache of the user the files are shown to: the mounting user's, or,
    /// when root mounts with `-o uid=` for someone else, that user's (and the files are theirs).
    /// `mountpoint` is absolute: the thumbnails are filed under the files' absolute URIs, and also
    /// under the mount point as the user named it when that path goes through a symlink (a file
    /// manager browsing there files thumbnails under the path as browsed).
    private func thumbnailCache(mountpoint: String, namedAs given: String, uid: UInt32, gid: UInt32,
                                options: MountOptionList, environment: [String: String],
                                logger: Logger) throws(UsageError) -> FreedesktopThumbnailStore {
        var named: [String] = []
        if let cwd = getcwd(nil, 0) {
            named.append(FreedesktopThumbnailStore.absolute(given, in: String(cString: cwd)))
            free(cwd)
        }
        let forAnotherUser = uid != getuid()
        var directory = thumbnailDir ?? options.settings["thumbnail_dir"]
        if directory == nil {
            if forAnotherUser, let entry = getpwuid(uid) {
                directory = String(cString: entry.pointee.pw_dir) + "/.cache/thumbnails"
            } else if let home = environment["HOME"], home.hasPrefix("/") {
                directory = FreedesktopThumbnailStore.defaultDirectory(environment: environment, home: home)
            } else if let entry = getpwuid(getuid()) {
                directory = FreedesktopThumbnailStore.defaultDirectory(environment: environment,
                                                                      home: String(cString: entry.pointee.pw_dir))
            }
        }
        guard let directory, directory.hasPrefix("/") else {
            throw UsageError("--thumbnails needs a thumbnail directory: pass --thumbnail-dir (or -o thumbnail_dir=)")
        }
        return FreedesktopThumbnailStore(directory: directory, mountPoint: mountpoint, alsoReachedAs: named,
                                         owner: forAnotherUser && getuid() == 0 ? (uid, gid) : nil, logger: logger)
    }

    /// Dropbox could not be reached (a connection that failed, or a server that answered only
    /// 5xx): a mount with a saved tree may start offline. A refused token never is.
    static func isUnreachable(_ error: DropboxError) -> Bool {
        switch error {
        case .transport, .server: true
        default: false
        }
    }

    /// "cannot reach Dropbox: ..." said once: a transport failure's own summary already says it.
    static func unreachableSummary(_ error: DropboxError) -> String {
        if case .transport = error { return error.description }
        return "cannot reach Dropbox: \(error)"
    }

    /// Blanks the query of every link among the process's arguments (in place, so the daemon forked
    /// later has none either): a link's `rlkey` opens it to anyone, and `/proc/PID/cmdline` is
    /// readable by every local user. `/proc/mounts`, `status` and the log show the link without it.
    static func hideLinkKeysFromProcessList() {
        for index in 1..<Int(CommandLine.argc) {
            guard let argument = CommandLine.unsafeArgv[index] else { continue }
            let length = strlen(argument)
            // The source as given: a link, or fstab's `dropbox:` before one.
            var source = String(cString: argument)
            if source.hasPrefix("dropbox:") { source.removeFirst("dropbox:".count) }
            guard SharedLink.looksLikeLink(source), let question = memchr(argument, Int32(UInt8(ascii: "?")), length)
            else { continue }
            let start = UnsafeMutableRawPointer(question).assumingMemoryBound(to: CChar.self)
            memset(start, 0, length - (start - argument))
        }
    }

    /// `[SOURCE] MOUNTPOINT`, with SOURCE normalised to Dropbox's form ("" or "/a/b").
    private func sourceAndMountpoint() throws(UsageError) -> (String, String) {
        switch locations.count {
        case 1: return ("", locations[0])
        case 2:
            var source = locations[0]
            // mount.fuse3 passes fstab's first field; "dropbox:" prefixes and "/" mean the whole account.
            if source.hasPrefix("dropbox:") { source.removeFirst("dropbox:".count) }
            if SharedLink.looksLikeLink(source) { return (source, locations[1]) }
            while source.hasSuffix("/") { source.removeLast() }
            if !source.isEmpty && !source.hasPrefix("/") { source = "/" + source }
            return (source, locations[1])
        case 0: throw UsageError("missing MOUNTPOINT (usage: dbx-mount [OPTIONS] [SOURCE] MOUNTPOINT)")
        default: throw UsageError("too many arguments (usage: dbx-mount [OPTIONS] [SOURCE] MOUNTPOINT)")
        }
    }

    /// The token source (see `Credentials`); a loose or broken config fails the mount (exit 1).
    private func credentials(options: MountOptionList, environment: [String: String], endpoints: DropboxEndpoints,
                             transport: CurlTransport, logger: Logger) throws(UsageError) -> Credentials {
        do {
            return try Credentials.resolve(
                tokenFile: tokenFile ?? options.settings["token_file"], account: account ?? options.settings["account"],
                configPath: config ?? options.settings["config"], environment: environment, endpoints: endpoints,
                transport: transport, logger: logger)
        } catch {
            if case .usage(let usage) = error { throw usage }
            fail(error.description, code: error.exitCode)
        }
    }
}
