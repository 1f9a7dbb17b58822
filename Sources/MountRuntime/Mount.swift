// The process around one mount: what happens at FUSE's `init` and at the first open, the stats
// line, and the pieces a session hands it (the invalidation queue, the mount point). The FUSE
// adapter calls in through `MountHooks`; nothing here answers a kernel request.

import DropboxClient
import DropboxFS
import FUSEAdapter
import Foundation
import Logging
import Synchronization

public final class Mount: MountHooks {
    public let filesystem: DropboxFilesystem
    let logger: Logger
    /// Set by MountSession once the session exists; started from `init`, after any daemonizing fork.
    let invalidator = Mutex<KernelInvalidator?>(nil)
    /// Where the session mounted; set by MountSession.
    let mountpoint = Mutex<String?>(nil)
    private let readaheadRaised = Atomic<Bool>(false)
    /// Counts the filesystem's Dropbox calls, for the stats line (nil: not counted).
    let meter: APIMeter?
    /// The control socket (`dbx-mount status`), bound before daemonizing and served from `init`.
    private let control = Mutex<(server: ControlServer, identity: MountIdentity)?>(nil)
    /// Prometheus metrics (`--metrics-addr`): what they count, and where they are served.
    private let metrics = Mutex<(metrics: MountMetrics, server: MetricsServer)?>(nil)

    /// Times FUSE requests for the metrics; nil without them.
    var operationObserver: (any FUSEOperationObserver)? { metrics.withLock { $0?.metrics } }

    /// Cancels the Dropbox calls in flight and any later ones (the transport's stop).
    private let cancelCalls: @Sendable () -> Void

    public init(filesystem: DropboxFilesystem, logger: Logger, meter: APIMeter? = nil,
                cancelCalls: @escaping @Sendable () -> Void = {}) {
        self.filesystem = filesystem
        self.logger = logger
        self.meter = meter
        self.cancelCalls = cancelCalls
    }

    /// SIGTERM or SIGINT: libfuse ends the session, but waits for every request being answered;
    /// cancelling the calls they wait on ends those at once (EIO) instead of at their deadline.
    func stopCalls(reason: String = "stopping") {
        logger.notice("\(reason): cancelling the Dropbox calls in flight")
        filesystem.stopChangeFeed()
        cancelCalls()
    }

    /// The cache locks this mount holds (`CacheLock`); set by MountSession.
    let cacheLocks = Mutex<[Int32]>([])
    private let connectionEnded = Atomic<Bool>(false)

    /// Unmounted by the kernel (every worker sees it; the first acts): the Dropbox calls in flight
    /// are cancelled as on SIGTERM, and the cache locks say the mount point is released, so a
    /// mount of the same caches started now waits for this process's save instead of failing.
    public func kernelConnectionEnded() {
        guard !connectionEnded.exchange(true, ordering: .relaxed) else { return }
        stopCalls(reason: "unmounted")
        markCacheLocksUnmounted()
    }

    /// Says in the cache locks that the mount point is released and this process only saves now.
    func markCacheLocksUnmounted() {
        for fd in cacheLocks.withLock({ $0 }) { CacheLock.markUnmounted(fd) }
    }

    /// FUSE's `init`: the first moment threads may start (libfuse has forked by now, if it will).
    public func mountInitialized() {
        if let (server, identity) = control.withLock({ $0 }) {
            server.start { [self] request in answer(request, identity: identity) }
        }
        if let (metrics, server) = metrics.withLock({ $0 }) {
            server.start { [self] in metrics.exposition(of: self) }
            logger.info("serving Prometheus metrics", metadata: ["address": "http://\(server.address)/metrics"])
        }
        if let invalidator = invalidator.withLock({ $0 }) {
            invalidator.start()
            filesystem.onInvalidation { invalidator.enqueue($0) }
        }
        // glibc keeps freed heap mapped; a full listing frees tens of MiB at once.
        filesystem.onBulkWorkDone { ProcessMemory.returnFreedHeap() }
        // The sync and pin threads (a shared link, which follows no changes, starts only the pins').
        filesystem.startChangeFeed()
        SignalWatcher(mount: self).start()
        let reporter = SystemdReporter.start { [self] in
            MountStatus(of: self, identity: MountIdentity(mountpoint: mountpoint.withLock { $0 } ?? "", account: "",
                                                          source: "")).summary
        }
        systemdReporter.withLock { $0 = reporter }
    }

    /// Reports the mount's status to systemd, when it listens.
    private let systemdReporter = Mutex<SystemdReporter?>(nil)

    /// The session has ended: the status goes from here on with `STOPPING=1`.
    func stopSystemdReports() { systemdReporter.withLock { $0 }?.stop() }

    /// Raises the kernel's read-ahead for this mount, once. Done at the first open rather than
    /// at `init`: INIT's reply would lower it again if it came after.
    public func fileOpened() {
        guard !readaheadRaised.exchange(true, ordering: .relaxed), let mountpoint = mountpoint.withLock({ $0 }) else { return }
        KernelReadahead.raise(mountpoint: mountpoint, logger: logger)
    }

    /// Serves `dbx-mount status` and the other control commands through `server` once mounted.
    public func attachControl(_ server: ControlServer, identity: MountIdentity) {
        control.withLock { $0 = (server, identity) }
    }

    /// Serves `metrics` at `server` once mounted (the server is bound already).
    public func attachMetrics(_ metrics: MountMetrics, server: MetricsServer) {
        self.metrics.withLock { $0 = (metrics, server) }
    }

    /// Stops answering on the control socket (and removes it) and on the metrics address: at
    /// unmount, or when mounting failed.
    public func stopControl() {
        control.withLock { $0 }?.server.stop()
        metrics.withLock { $0 }?.server.stop()
    }

    /// One control request (docs/CONTROL.md).
    private func answer(_ request: [String: Any], identity: MountIdentity) -> [String: Any] {
        switch request["command"] as? String {
        case "status":
            guard let status = MountStatus(of: self, identity: identity).jsonObject() else {
                return ["ok": false, "error": "cannot encode the status"]
            }
            return ["ok": true, "status": status]
        case "pin", "unpin":
            guard let path = request["path"] as? String, path.hasPrefix("/") else {
                return ["ok": false, "error": "the request names no path (a folder inside the mount, such as /Photos)"]
            }
            do throws(PinError) {
                if request["command"] as? String == "pin" {
                    let pinned = try filesystem.pin(path)
                    logger.notice("pinned a folder", metadata: ["path": "\(pinned.path)", "bytes": "\(pinned.bytesTotal)"])
                    return ["ok": true, "pin": MountStatus.Pin(pinned).jsonObject() ?? [:]]
                }
                try filesystem.unpin(path)
                logger.notice("unpinned a folder", metadata: ["path": "\(path)"])
                return ["ok": true]
            } catch {
                return ["ok": false, "error": error.description]
            }
        case let command?:
            return ["ok": false, "error": "unknown command \(command)"]
        case nil:
            return ["ok": false, "error": "the request names no command"]
        }
    }

    /// One line saying what the mount holds and has done (SIGUSR1). Logged at notice, so it shows
    /// at the default level.
    func logStats() {
        let usage = filesystem.usage
        var metadata: Logger.Metadata = [
            "entries": "\(usage.entries)", "tree_bytes": "\(usage.treeBytes)",
            "rss_bytes": "\(ProcessMemory.residentBytes())", "readahead_bytes": "\(usage.readAheadBytes)",
            "open_files": "\(usage.openFiles)", "open_dirs": "\(usage.openDirectories)",
            "direct_reads": "\(usage.directReads)", "direct_read_bytes": "\(usage.directReadBytes)",
            "dropped_page_bytes": "\(usage.droppedPageBytes)",
        ]
        if let latency = usage.linkLatency { metadata["link_latency_ms"] = "\(Int((latency * 1000).rounded()))" }
        if let rate = usage.linkRate { metadata["link_mb_per_s"] = "\(Int((rate / 1e6).rounded()))" }
        if let meter {
            metadata["api_calls"] = "\(meter.calls)"
            metadata["api_failures"] = "\(meter.failures)"
            metadata["bytes_downloaded"] = "\(meter.bytesDownloaded)"
            metadata["api_rate_limited"] = "\(meter.rateLimited)"
        }
        logger.notice("stats", metadata: metadata)
    }
}
