// One FUSE session from mount to unmount: the process's side of libfuse (creating and mounting the
// session, daemonizing, the worker loop, the orderly teardown). The requests themselves are the
// adapter's (`FUSEAdapter.Callbacks`).

import CShims
import DropboxFS
import FUSEAdapter

public struct MountError: Error, CustomStringConvertible {
    public let description: String
}

/// The corresponding C calls are `fuse_session_new`, `fuse_session_mount`, `fuse_daemonize`,
/// `fuse_session_loop_mt`, `fuse_session_unmount`.
public final class MountSession {
    private let session: OpaquePointer
    private let mount: Mount
    private let context: Unmanaged<FUSEContext>
    private var mounted = false

    /// Creates the session and mounts it at `mountpoint`. `mountOptions` are the `-o` options
    /// libfuse understands (already checked by the caller); `directIO` opens files past the page
    /// cache; `debug` makes libfuse trace every request.
    public init(mount: Mount, mountpoint: String, mountOptions: [String], directIO: Bool = false, debug: Bool,
                cacheLocks: [Int32] = []) throws(MountError) {
        mount.cacheLocks.withLock { $0 = cacheLocks }
        ProcessMemory.useFixedMmapThreshold()
        ProcessMemory.limitArenasToCores()
        var arguments = ["dbx-mount", "-o", mountOptions.joined(separator: ",")]
        if debug { arguments.append("-d") }
        var args = fuse_args()
        for argument in arguments { fuse_opt_add_arg(&args, argument) }
        defer { fuse_opt_free_args(&args) }

        let retained = Unmanaged.passRetained(FUSEContext(filesystem: mount.filesystem, hooks: mount, directIO: directIO,
                                                             operationObserver: mount.operationObserver))
        var ops = Callbacks.operations()
        guard let session = dbx_fuse_session_new(&args, &ops, retained.toOpaque()) else {
            retained.release()
            throw MountError(description: "libfuse refused the mount options \(mountOptions.joined(separator: ","))")
        }
        self.session = session
        self.mount = mount
        self.context = retained
        mount.invalidator.withLock { $0 = KernelInvalidator(session: session) }
        guard fuse_set_signal_handlers(session) == 0 else {
            throw MountError(description: "cannot install signal handlers")
        }
        // After libfuse's: its SIGHUP handler would end the session; here SIGHUP drops caches.
        SignalPipe.install()
        guard fuse_session_mount(session, mountpoint) == 0 else {
            // libfuse or fusermount3 has printed why on the line before (an option fuse.conf does
            // not allow, a mount point not the user's); the guess covers a machine without FUSE.
            throw MountError(description: "cannot mount at \(mountpoint): the line above says why (or is /dev/fuse missing, or fusermount3 not installed?)")
        }
        mounted = true
        // Only to ask for mmap of direct_io files (see KernelChannel); without it, all else works.
        _ = KernelChannel.install(on: session)
        mount.mountpoint.withLock { $0 = mountpoint }
    }

    /// Detaches into the background unless `foreground`. libfuse forks here; the parent exits once
    /// the child is ready, so no thread may have been started before this call.
    public func daemonize(foreground: Bool) {
        _ = fuse_daemonize(foreground ? 1 : 0)
        // systemd learns the mount is in place. The kernel holds requests until the loop reads
        // them, so readiness need not wait for it. (Under systemd the process never forks: see
        // MountCommand.)
        SystemdNotify.send("READY=1")
    }

    /// Worker threads libfuse may run, and keep idle. A request that waits on Dropbox holds its
    /// worker until the call ends (a stalled download: up to `--deadline`), and with every worker
    /// busy nobody reads /dev/fuse: not even `stat` of a listed file, nor the interrupt that would
    /// let a killed reader go. So the cap is far above what waits on Dropbox at once in practice;
    /// workers start only when all others are busy, and memory stays bounded by the read engine
    /// (`ReadEngine.directReadsAtOnce`), not by this count.
    static let maxWorkerThreads: UInt32 = 256
    static let maxIdleWorkerThreads: UInt32 = 16

    /// Serves requests on libfuse's worker threads until unmounted or signalled (SIGINT,
    /// SIGTERM). Returns true for a clean exit, which includes one by signal: libfuse then
    /// reports the signal's number, and the unmount that follows is orderly.
    public func run() -> Bool {
        let result = dbx_fuse_session_loop_mt(session, 0, Self.maxWorkerThreads, Self.maxIdleWorkerThreads)
        mount.stopSystemdReports()
        SystemdNotify.send("STOPPING=1\nSTATUS=unmounted: saving the tree for the next mount")
        return result == 0 || [SIGINT, SIGTERM, SIGHUP].contains(result)
    }

    deinit {
        mount.stopControl()
        mount.filesystem.stopChangeFeed()
        mount.filesystem.stopReading()
        mount.invalidator.withLock { $0 }?.stop()
        SignalPipe.uninstall()
        fuse_remove_signal_handlers(session)
        // Unmounted before the save: nobody reads /dev/fuse any more, so until the mount point is
        // released every access to it would wait (a large tree takes seconds to save).
        if mounted { fuse_session_unmount(session) }
        // A mount of the same caches started now waits for this save rather than failing.
        mount.markCacheLocksUnmounted()
        mount.filesystem.persist()   // the next mount starts from this tree and catches up
        fuse_session_destroy(session)
        context.release()
    }
}
