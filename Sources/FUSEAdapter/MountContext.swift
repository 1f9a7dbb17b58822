import DropboxFS
import Logging

/// Everything one mount's callbacks need, handed to libfuse as its userdata (never a global), so
/// two mounts in one process share nothing by accident.
public final class MountContext: Sendable {
    public let filesystem: DropboxFS
    public let timeouts: KernelCacheTimeouts
    let logger: Logger
    /// Runs once from FUSE's `init` callback, after any daemonizing fork: the place to start
    /// background work such as a change feed.
    let onInit: @Sendable () -> Void

    public init(filesystem: DropboxFS, timeouts: KernelCacheTimeouts, logger: Logger,
                onInit: @escaping @Sendable () -> Void = {}) {
        self.filesystem = filesystem
        self.timeouts = timeouts
        self.logger = logger
        self.onInit = onInit
    }
}
