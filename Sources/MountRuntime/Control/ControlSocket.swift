// Where a mount's control socket lives, and the client side of its protocol (docs/CONTROL.md).
//
// One socket per mount, in a folder only the user can enter: `$XDG_RUNTIME_DIR/dbx-mount/`, else
// `/run/user/UID/dbx-mount/` when that exists, else `/tmp/dbx-mount-UID/`. The socket's name comes
// from the mount point's absolute path (a hash: a path may be longer than a socket address
// allows), so `dbx-mount status /mnt/x` finds it without any registry, and `status` with no
// mount point asks every socket in the folder. The protocol is JSON lines: one request object,
// one answer object, then the server closes the connection.

import CShims
import Foundation

#if canImport(Glibc)
import Glibc
#endif

public enum ControlSocket {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        /// Nobody listens there (the mount that made it is gone).
        public var stale = false

        public init(description: String, stale: Bool = false) {
            self.description = description
            self.stale = stale
        }
    }

    /// The folder of this user's control sockets.
    public static func directory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return runtime + "/dbx-mount"
        }
        let uid = geteuid()
        var info = stat()
        if stat("/run/user/\(uid)", &info) == 0, info.st_uid == uid {
            return "/run/user/\(uid)/dbx-mount"
        }
        return "/tmp/dbx-mount-\(uid)"
    }

    /// Every folder a mount of this user may have put its socket in, `directory(environment:)`'s
    /// first: each mount chose by its own environment, which may not be this one's (a mount
    /// started at boot without `XDG_RUNTIME_DIR`, looked at from a login that has it). Only
    /// folders that are this user's alone count: another user could otherwise fake a mount there.
    public static func directories(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let uid = geteuid()
        let candidates = [directory(environment: environment), "/run/user/\(uid)/dbx-mount", "/tmp/dbx-mount-\(uid)"]
        var found: [String] = []
        for folder in candidates where !found.contains(folder) && isPrivate(folder) { found.append(folder) }
        return found
    }

    /// A folder (not a symlink) owned by this user that no one else may enter.
    static func isPrivate(_ folder: String) -> Bool {
        var info = stat()
        return lstat(folder, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR && info.st_uid == geteuid()
            && info.st_mode & 0o077 == 0
    }

    /// The socket of the mount at `mountpoint` (already absolute and resolved) among `folders`, if
    /// one is there.
    public static func existingPath(forMountpoint mountpoint: String, in folders: [String]) -> String? {
        folders.lazy.map { path(forMountpoint: mountpoint, in: $0) }.first { access($0, F_OK) == 0 }
    }

    /// The socket of the mount at `mountpoint` (already absolute and resolved).
    public static func path(forMountpoint mountpoint: String, in directory: String) -> String {
        // FNV-1a, 64 bits: a name, not a secret (the folder is the user's alone).
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in mountpoint.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return directory + "/" + String(format: "%016llx", hash) + ".sock"
    }

    /// Makes `directory` (0700) if needed and checks that it is the user's alone: a folder someone
    /// else owns or can enter, as in a shared /tmp, would let them reach or fake the sockets.
    static func prepareDirectory(_ directory: String) throws(Failure) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw Failure(description: "cannot create the control socket folder \(directory): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            throw Failure(description: "cannot inspect \(directory): \(String(cString: strerror(errno)))")
        }
        guard isPrivate(directory) else {
            throw Failure(description: "\(directory) must be a folder of this user's only (mode 0700)")
        }
    }

    /// The sockets in `directory`.
    public static func all(in directory: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".sock") }.sorted().map { directory + "/" + $0 }
    }

    /// Sends one request and returns the answer's object, waiting at most `timeout` seconds for
    /// it. A socket nobody listens on is `stale`.
    public static func request(_ request: [String: Any], at path: String, timeout: Double = 5) throws(Failure) -> [String: Any] {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        setTimeout(fd, seconds: timeout)
        guard var address = unixAddress(path) else { throw Failure(description: "socket path too long: \(path)") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            throw Failure(description: "cannot connect to \(path): \(String(cString: strerror(code)))",
                          stale: code == ECONNREFUSED)
        }
        guard let body = try? JSONSerialization.data(withJSONObject: request) else {
            throw Failure(description: "cannot encode the request")
        }
        guard writeAll(fd, Array(body) + [0x0A]) else {
            throw Failure(description: "cannot send to \(path): \(String(cString: strerror(errno)))")
        }
        guard let line = readLine(fd, limit: 1 << 20, within: timeout) else {
            throw Failure(description: "no answer from \(path)")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
            throw Failure(description: "a malformed answer from \(path)")
        }
        return object
    }

    // MARK: - Shared with the servers (the control socket's and the metrics')

    /// Connections answered at once by one server; more wait to be accepted.
    static let concurrentConnections = 8

    /// Answers connections on `listener`, each on a thread of its own (at most
    /// `concurrentConnections` at once), until `running` turns false (the owner then shuts the
    /// listener down, which wakes the accept), then closes it. A slow or idle client holds only its
    /// own thread, and only until its deadline: a port scan or a client that trickles bytes must
    /// not make Prometheus's scrape or `status` wait. A failing accept (out of descriptors, say)
    /// is tried again rather than leaving the mount without its servers for good.
    static func acceptLoop(_ listener: Int32, while running: @escaping @Sendable () -> Bool,
                           _ answer: @escaping @Sendable (Int32) -> Void) {
        let slots = DispatchSemaphore(value: concurrentConnections)
        while running() {
            slots.wait()
            let client = accept(listener, nil, nil)
            if client < 0 {
                let code = errno
                slots.signal()
                if code == EINTR || code == ECONNABORTED { continue }
                if !running() { break }
                usleep(100_000)
                continue
            }
            let thread = Thread {
                answer(client)
                close(client)
                slots.signal()
            }
            thread.name = "dbx-connection"
            thread.start()
        }
        close(listener)
    }

    static func unixAddress(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    static func setTimeout(_ fd: Int32, seconds: Double) {
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Waits until `fd` has bytes (or end of stream) to read; false when `deadline` passes first.
    static func waitReadable(_ fd: Int32, until deadline: ContinuousClock.Instant) -> Bool {
        while true {
            let left = deadline - .now
            guard left > .zero else { return false }
            let (seconds, attoseconds) = left.components
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1, 60_000)))
            if ready < 0 && errno == EINTR { continue }
            if ready != 0 { return ready > 0 }
        }
    }

    /// Reads and drops what the client still sends, for up to `seconds`, so that closing after an
    /// answer does not reset the connection under a client still sending its request.
    static func drain(_ fd: Int32, within seconds: Double) {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        var sink = [UInt8](repeating: 0, count: 4096)
        while waitReadable(fd, until: deadline),
              sink.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, 0) }) > 0 {}
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    /// Bytes up to the first newline (not included); nil when `seconds` pass first (however the
    /// bytes trickle in), on error, or beyond `limit`.
    static func readLine(_ fd: Int32, limit: Int, within seconds: Double) -> [UInt8]? {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        var line: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while line.count <= limit {
            guard waitReadable(fd, until: deadline) else { return nil }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return line.isEmpty ? nil : line }
            if let newline = buffer[..<n].firstIndex(of: 0x0A) {
                return line + buffer[..<newline]
            }
            line += buffer[..<n]
        }
        return nil
    }
}
