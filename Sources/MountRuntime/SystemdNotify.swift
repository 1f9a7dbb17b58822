import CShims
import Glibc

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
