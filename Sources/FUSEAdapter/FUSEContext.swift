import DropboxFS

/// What the process around a mount does at the two moments only the adapter sees: FUSE's `init`
/// (the first moment threads may start, after any daemonizing fork) and an open. `MountRuntime`
/// implements it; the adapter knows nothing of signals, systemd or sysfs.
public protocol MountHooks: Sendable {
    /// FUSE's `init` has arrived: start background work (change feed, invalidation thread, ...).
    func mountInitialized()
    /// A file was opened (tuning that only takes once the kernel has sent INIT's reply).
    func fileOpened()
    /// The kernel ended the connection (`fusermount3 -u`, `umount`): nothing waits for the
    /// answers to requests in progress any more.
    func kernelConnectionEnded()
}

/// Sees every FUSE request once answered: the operation (libfuse's name for it), how long it took,
/// and whether the answer was an error. The mount's metrics implement it.
public protocol FUSEOperationObserver: Sendable {
    func operationEnded(_ operation: StaticString, seconds: Double, failed: Bool)
}

/// Everything one mount's callbacks need, handed to libfuse as its userdata (never a global), so
/// two mounts in one process share nothing by accident.
public final class FUSEContext: Sendable {
    public let filesystem: DropboxFilesystem
    public let hooks: any MountHooks
    /// Every file is opened with `direct_io` (`--direct-io`): reads bypass the page cache.
    let directIO: Bool
    /// Times each answered request (`--metrics-addr`); nil times nothing.
    let operationObserver: (any FUSEOperationObserver)?

    public init(filesystem: DropboxFilesystem, hooks: any MountHooks, directIO: Bool = false,
                operationObserver: (any FUSEOperationObserver)? = nil) {
        self.filesystem = filesystem
        self.hooks = hooks
        self.directIO = directIO
        self.operationObserver = operationObserver
    }

    /// How long the kernel may trust entries and attributes it is given now.
    var timeouts: KernelCacheTimeouts {
        let seconds = filesystem.kernelCacheSeconds
        return KernelCacheTimeouts(entry: seconds, attributes: seconds, negativeEntry: seconds)
    }
}
