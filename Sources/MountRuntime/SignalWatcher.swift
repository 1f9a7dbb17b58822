import DropboxFS
import Foundation
import Glibc
import Logging

/// SIGHUP drops the mount's caches; SIGUSR1 logs one stats line; SIGTERM and SIGINT, besides
/// libfuse's own handling (it ends the session, then the mount is unmounted), cancel the Dropbox
/// calls in flight: libfuse waits for every request being answered before it unmounts, and a
/// read waiting on a dead link would otherwise hold the exit for its whole deadline (2 minutes).
///
/// A signal handler may only do async-signal-safe things, so it writes one byte naming the signal
/// to a pipe (the self-pipe trick), and a thread started from FUSE's `init` (after the daemonizing
/// fork) reads the pipe and does the work. Signals belong to the process, not to a mount, so the
/// pipe is process-wide: the only global here, and it carries no mount state.
enum SignalPipe {
    /// Written by `install` before any handler can run and never changed after, so the handler's
    /// read needs no lock (and the one-time initialisation of the global has happened by then).
    nonisolated(unsafe) static var fds: (read: Int32, write: Int32) = (-1, -1)

    static let dropCaches: UInt8 = 1
    static let logStats: UInt8 = 2
    static let stop: UInt8 = 3

    /// libfuse's handlers for SIGTERM and SIGINT, which ours call after writing to the pipe. Set
    /// before our handlers are installed, like `fds`.
    nonisolated(unsafe) static var libfuseTerminate: (@convention(c) (Int32) -> Void)?
    nonisolated(unsafe) static var libfuseInterrupt: (@convention(c) (Int32) -> Void)?

    /// Installs the handlers, replacing libfuse's SIGHUP handler (which would end the session).
    /// Call after `fuse_set_signal_handlers`. No thread is started here.
    static func install() {
        if fds.read < 0 {
            var pair: [Int32] = [-1, -1]
            guard pipe(&pair) == 0 else { return }
            for fd in pair { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            // The reader blocks; only the handler's end must never block.
            _ = fcntl(pair[1], F_SETFL, O_NONBLOCK)
            fds = (pair[0], pair[1])
        }
        for signal in [SIGHUP, SIGUSR1] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { signal in
                SignalPipe.send(signal == SIGHUP ? SignalPipe.dropCaches : SignalPipe.logStats)
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(signal, &action, nil)
        }
        libfuseTerminate = handler(of: SIGTERM)
        libfuseInterrupt = handler(of: SIGINT)
        // Only where libfuse handles the signal: it leaves one alone that the process was started
        // ignoring (SIGINT in a job a script put in the background), and so do we.
        for signal in [SIGTERM, SIGINT] where libfuseHandler(signal) != nil {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { signal in
                SignalPipe.send(SignalPipe.stop)
                SignalPipe.libfuseHandler(signal)?(signal)
            }
            sigemptyset(&action.sa_mask)
            // No SA_RESTART, as libfuse's own: the interrupted wait of its main loop must return
            // to see that the session has ended.
            action.sa_flags = 0
            sigaction(signal, &action, nil)
        }
    }

    /// libfuse's handler for SIGTERM or SIGINT, as found at `install`. Async-signal-safe.
    private static func libfuseHandler(_ signal: Int32) -> (@convention(c) (Int32) -> Void)? {
        signal == SIGTERM ? libfuseTerminate : libfuseInterrupt
    }

    /// Async-signal-safe: one `write`, errno kept.
    private static func send(_ request: UInt8) {
        var byte = request
        let saved = errno
        _ = write(fds.write, &byte, 1)   // a full pipe just drops the request
        errno = saved
    }

    /// The function handling `signal` now; nil for the default action or ignore.
    private static func handler(of signal: Int32) -> (@convention(c) (Int32) -> Void)? {
        var current = sigaction()
        guard sigaction(signal, nil, &current) == 0, current.sa_flags & SA_SIGINFO == 0,
              let function = current.__sigaction_handler.sa_handler else { return nil }
        let address = unsafeBitCast(function, to: Int.self)
        return address == 0 || address == 1 ? nil : function   // SIG_DFL, SIG_IGN
    }

    /// Puts SIGHUP and SIGUSR1 back to their defaults and SIGTERM and SIGINT to libfuse's (at
    /// unmount; libfuse then removes its own).
    static func uninstall() {
        signal(SIGHUP, SIG_DFL)
        signal(SIGUSR1, SIG_DFL)
        if let libfuseTerminate { signal(SIGTERM, libfuseTerminate) }
        if let libfuseInterrupt { signal(SIGINT, libfuseInterrupt) }
    }
}

/// The thread that acts on signals for one mount.
final class SignalWatcher: Sendable {
    private let mount: Mount

    init(mount: Mount) { self.mount = mount }

    /// Started from FUSE's `init`. It lives as long as the process: a blocked `read` has nothing
    /// to clean up, and at unmount the process exits.
    func start() {
        guard SignalPipe.fds.read >= 0 else { return }
        let thread = Thread { [self] in run() }
        thread.name = "dbx-signals"
        thread.start()
    }

    private func run() {
        var byte: UInt8 = 0
        while true {
            let count = read(SignalPipe.fds.read, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            guard count == 1 else { return }
            switch byte {
            case SignalPipe.dropCaches: mount.filesystem.dropCaches()
            case SignalPipe.logStats: mount.logStats()
            case SignalPipe.stop: mount.stopCalls()
            default: break
            }
        }
    }
}
