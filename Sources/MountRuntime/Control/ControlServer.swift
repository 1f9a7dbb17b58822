// The server side of a mount's control socket (docs/CONTROL.md). Bound before libfuse daemonizes,
// so that a problem (a folder someone else can enter, a live mount already answering there) is one
// clear line at mount time; the socket descriptor survives the fork. Served by one thread started
// from FUSE's `init`, each connection on a short-lived thread of its own: each request is a line of
// JSON, each answer a line of JSON, and a client that has not sent its line within a few seconds
// is dropped, so neither it nor a slow answer (a pin waiting for the first listing) holds up the
// next `status`. Only the mounting user (or root) is answered: the folder is 0700, the socket 0600,
// and the peer's uid is checked as well.

import CShims
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

public final class ControlServer: Sendable {
    public let path: String
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)
    /// Answers one request object with one answer object.
    public typealias Handler = @Sendable ([String: Any]) -> [String: Any]

    /// Binds the socket for the mount at `mountpoint` (absolute, resolved). A socket left by a
    /// mount that was killed is replaced; one that still answers is an error.
    public init(mountpoint: String, directory: String) throws(ControlSocket.Failure) {
        try ControlSocket.prepareDirectory(directory)
        let path = ControlSocket.path(forMountpoint: mountpoint, in: directory)
        if access(path, F_OK) == 0 {
            if (try? ControlSocket.request(["command": "status"], at: path, timeout: 2)) != nil {
                throw ControlSocket.Failure(description: "a dbx-mount already answers for \(mountpoint) at \(path)")
            }
            unlink(path)   // left by a mount that was killed
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ControlSocket.Failure(description: "socket: \(String(cString: strerror(errno)))") }
        guard var address = ControlSocket.unixAddress(path) else {
            close(fd)
            throw ControlSocket.Failure(description: "control socket path too long: \(path)")
        }
        // No thread runs yet (this is before daemonizing), so the process-wide umask may change
        // for the bind: the socket is created 0600, never briefly open to others.
        let previous = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(previous)
        guard bound == 0, listen(fd, 8) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw ControlSocket.Failure(description: "cannot listen on \(path): \(message)")
        }
        self.path = path
        listener = fd
    }

    /// Serves on a thread of its own until `stop`.
    public func start(_ handler: @escaping Handler) {
        let thread = Thread { [self] in serve(handler) }
        thread.name = "dbx-control"
        thread.start()
    }

    /// Stops answering and removes the socket (at unmount).
    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        unlink(path)
        // Wakes the accept below, which then sees `stopped`.
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func serve(_ handler: @escaping Handler) {
        ControlSocket.acceptLoop(listener, while: { [self] in !stopped.load(ordering: .relaxed) }) { [self] in
            answer($0, handler)
        }
    }

    private func answer(_ client: Int32, _ handler: Handler) {
        ControlSocket.setTimeout(client, seconds: 3)
        let peer = dbx_socket_peer_uid(client)
        guard peer == Int(geteuid()) || peer == 0 else { return }
        let reply: [String: Any]
        if let line = ControlSocket.readLine(client, limit: 64 << 10, within: 3),
           let request = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] {
            reply = handler(request)
        } else {
            reply = ["ok": false, "error": "expected one line holding a JSON object"]
        }
        guard let body = try? JSONSerialization.data(withJSONObject: reply, options: [.sortedKeys]) else { return }
        _ = ControlSocket.writeAll(client, Array(body) + [0x0A])
    }
}
