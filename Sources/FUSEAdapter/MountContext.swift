import CShims
import DropboxClient
import DropboxFS
import Foundation
import Logging
import Synchronization

/// Everything one mount's callbacks need, handed to libfuse as its userdata (never a global), so
/// two mounts in one process share nothing by accident.
public final class MountContext: Sendable {
    public let filesystem: DropboxFS
    let logger: Logger
    /// Follow Dropbox's change feed (and keep the tree in step) from FUSE's `init` on.
    let followChanges: Bool
    /// Set by FUSESession once the session exists; started from `init`, after any daemonizing fork.
    let invalidator = Mutex<KernelInvalidator?>(nil)
    /// Where the session mounted; set by FUSESession.
    let mountpoint = Mutex<String?>(nil)
    private let readaheadRaised = Atomic<Bool>(false)
    /// Counts the filesystem's Dropbox calls, for the stats line (nil: not counted).
    let meter: APIMeter?

    public init(filesystem: DropboxFS, logger: Logger, followChanges: Bool = true, meter: APIMeter? = nil) {
        self.filesystem = filesystem
        self.logger = logger
        self.followChanges = followChanges
        self.meter = meter
    }

    /// How long the kernel may trust entries and attributes it is given now.
    var timeouts: KernelCacheTimeouts {
        let seconds = filesystem.kernelCacheSeconds
        return KernelCacheTimeouts(entry: seconds, attributes: seconds, negativeEntry: seconds)
    }

    /// Raises the kernel's read-ahead for this mount, once. Called at the first open rather than
    /// at `init`: INIT's reply would lower it again if it came after.
    func raiseKernelReadahead() {
        guard !readaheadRaised.exchange(true, ordering: .relaxed), let mountpoint = mountpoint.withLock({ $0 }) else { return }
        KernelReadahead.raise(mountpoint: mountpoint, logger: logger)
    }

    /// FUSE's `init`: the first moment threads may start (libfuse has forked by now, if it will).
    func startBackgroundWork() {
        if let invalidator = invalidator.withLock({ $0 }) {
            invalidator.start()
            filesystem.onInvalidation { invalidator.enqueue($0) }
        }
        // glibc keeps freed heap mapped; a full listing frees tens of MiB at once.
        filesystem.onBulkWorkDone { _ = malloc_trim(0) }
        if followChanges { filesystem.startChangeFeed() }
        SignalWatcher(context: self).start()
    }

    /// One line saying what the mount holds and has done (SIGUSR1). Logged at notice, so it shows
    /// at the default level.
    func logStats() {
        let usage = filesystem.usage
        var metadata: Logger.Metadata = [
            "entries": "\(usage.entries)", "tree_bytes": "\(usage.treeBytes)",
            "rss_bytes": "\(Self.residentBytes())", "readahead_bytes": "\(usage.readAheadBytes)",
            "open_files": "\(usage.openFiles)", "open_dirs": "\(usage.openDirectories)",
            "direct_reads": "\(usage.directReads)", "direct_read_bytes": "\(usage.directReadBytes)",
        ]
        if let meter {
            metadata["api_calls"] = "\(meter.calls)"
            metadata["api_failures"] = "\(meter.failures)"
            metadata["bytes_downloaded"] = "\(meter.bytesDownloaded)"
        }
        logger.notice("stats", metadata: metadata)
    }

    /// Resident memory, from /proc/self/statm (its second field, in pages).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
