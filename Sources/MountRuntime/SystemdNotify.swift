import CShims
import Foundation
import Glibc
import Synchronization

/// systemd's readiness protocol (`sd_notify(3)`) without libsystemd: one datagram of
/// `KEY=VALUE` lines to the unix socket named by `$NOTIFY_SOCKET`. A name starting with `@` is in
/// the abstract namespace. Without the variable (not started by systemd) nothing is sent.
public enum SystemdNotify {
    /// Sends `state` (such as `READY=1`); true if a datagram went out.
    @discardableResult
    public static func send(_ state: String) -> Bool {
        guard let name = getenv("NOTIFY_SOCKET").map({ String(cString: $0) }) else { return false }
        return send(state, to: name)
    }

    /// Sends `state` to the socket `name` (a path, or `@` and an abstract name).
    static func send(_ state: String, to name: String) -> Bool {
        guard name.count > 1, name.hasPrefix("/") || name.hasPrefix("@") else { return false }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(name.utf8)
        // An abstract name has a NUL where "@" is and no terminating NUL: its length is exact.
        if path[0] == UInt8(ascii: "@") { path[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + path.count + (path[0] == 0 ? 0 : 1))

        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddrPointer in
                message.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sockaddrPointer, length) }
            }
        }
        return sent == message.count
    }
}

/// What systemd hears from a mount while it runs, besides readiness: the `STATUS=` line that
/// `systemctl status` shows (the first listing's progress, the change feed's state), sent when it
/// changes, and `WATCHDOG=1` when the unit sets `WatchdogSec=`. Both come from the mount's state,
/// read under its locks: a mount whose core is stuck stops pinging, and systemd restarts it.
final class SystemdReporter: Sendable {
    /// Held while a report goes out, so that none goes out once `stop` has returned.
    private let stopped = Mutex<Bool>(false)

    /// How often the status is looked at; the watchdog may ask for more often.
    static let statusPeriod: Duration = .seconds(2)

    /// Starts reporting `status()` if systemd listens (`$NOTIFY_SOCKET`); nil otherwise.
    static func start(_ status: @escaping @Sendable () -> String) -> SystemdReporter? {
        guard getenv("NOTIFY_SOCKET") != nil else { return nil }
        let reporter = SystemdReporter()
        let watchdog = watchdogInterval()
        let period = watchdog.map { min($0 / 2, statusPeriod) } ?? statusPeriod
        let thread = Thread { [reporter] in
            var last = ""
            while !reporter.isStopped {
                let line = status()
                var message: [String] = []
                if line != last { message.append("STATUS=\(line)") }
                if watchdog != nil { message.append("WATCHDOG=1") }
                let sent = reporter.stopped.withLock { stopped in
                    !stopped && !message.isEmpty && SystemdNotify.send(message.joined(separator: "\n"))
                }
                if sent { last = line }
                reporter.sleep(period)
            }
        }
        thread.name = "systemd-status"
        thread.start()
        return reporter
    }

    /// No more reports from here on (the next `STOPPING=1` and status come from the session's end).
    func stop() { stopped.withLock { $0 = true } }

    private var isStopped: Bool { stopped.withLock { $0 } }

    private func sleep(_ period: Duration) {
        let end = ContinuousClock.now + period
        while !isStopped {
            let left = end - ContinuousClock.now
            guard left > .zero else { return }
            // In slices, so that `stop` is noticed; never past `end` (a short watchdog interval).
            Thread.sleep(forTimeInterval: min(0.1, left / .seconds(1)))
        }
    }

    /// `WatchdogSec=` as systemd passes it (`$WATCHDOG_USEC`, for `$WATCHDOG_PID` if set); nil
    /// when the unit has no watchdog, or it is another process's.
    static func watchdogInterval(environment: [String: String] = ProcessInfo.processInfo.environment,
                                 pid: Int32 = getpid()) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let micros = UInt64(text), micros > 0 else { return nil }
        if let owner = environment["WATCHDOG_PID"], Int32(owner) != pid { return nil }
        return .microseconds(Int64(min(micros, UInt64(Int64.max))))
    }
}
