// The loopback half of `dbx-mount auth --redirect loopback` (RFC 8252 §7.3): a one-shot HTTP
// listener on 127.0.0.1 that receives the browser's redirect `GET /?code=...&state=...`, answers a
// short page, and hands the code back. Only a request carrying our `state` counts, so a stray
// request (a favicon, another local program) cannot inject a code.

import DropboxClient
import Foundation

struct LoopbackRedirect: ~Copyable {
    private let socket: Int32
    let port: UInt16

    var redirectURI: String { "http://127.0.0.1:\(port)/" }

    /// Listens on 127.0.0.1:`port` (0 picks a free one).
    init(port: UInt16) throws(ConfigError) {
        let fd = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ConfigError("cannot open a socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw ConfigError("cannot listen on 127.0.0.1:\(port) for the redirect: \(reason)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        socket = fd
        self.port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(socket) }

    /// Waits up to `timeout` seconds for the redirect carrying `state`; returns its code.
    func waitForCode(state: String, timeout: Double) throws(ConfigError) -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw ConfigError("no redirect arrived within \(Int(timeout)) s") }
            var poller = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(remaining, 1) * 1000))
            if ready < 0 && errno != EINTR { throw ConfigError("waiting for the redirect: \(String(cString: strerror(errno)))") }
            guard ready > 0 else { continue }
            let client = accept(socket, nil, nil)
            guard client >= 0 else { continue }
            defer { close(client) }
            // A slow or silent client must not stall the flow.
            var readTimeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &readTimeout, socklen_t(MemoryLayout<timeval>.size))
            guard let target = Self.readRequestTarget(client) else { continue }
            let query = Self.query(of: target)
            guard query["state"] == state else {
                Self.reply(client, status: "404 Not Found", text: "Not the dbx-mount sign-in redirect.")
                continue
            }
            if let error = query["error"] {
                let detail = query["error_description"] ?? error
                Self.reply(client, status: "200 OK", text: "Sign-in was not completed: \(detail). You can close this window.")
                throw ConfigError("Dropbox did not authorize dbx-mount: \(detail)")
            }
            guard let code = query["code"], !code.isEmpty else {
                Self.reply(client, status: "400 Bad Request", text: "The redirect carried no code.")
                continue
            }
            Self.reply(client, status: "200 OK", text: "dbx-mount is signed in. You can close this window.")
            return code
        }
    }

    /// The request target of `GET <target> HTTP/1.1`, from at most 16 KiB of headers.
    private static func readRequestTarget(_ fd: Int32) -> String? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while received.count < 16 << 10 {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received += buffer[0..<n]
            if received.firstRange(of: Array("\r\n".utf8)) != nil { break }
        }
        guard let line = String(decoding: received, as: UTF8.self).split(separator: "\r\n").first else { return nil }
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0] == "GET" else { return nil }
        return String(parts[1])
    }

    private static func query(of target: String) -> [String: String] {
        guard let mark = target.firstIndex(of: "?") else { return [:] }
        var fields: [String: String] = [:]
        for pair in target[target.index(after: mark)...].split(separator: "&") {
            let halves = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = FormEncoding.decode(halves[0]) else { continue }
            fields[name] = halves.count > 1 ? FormEncoding.decode(halves[1]) : ""
        }
        return fields
    }

    private static func reply(_ fd: Int32, status: String, text: String) {
        let escaped = text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
        let body = "<!doctype html><title>dbx-mount</title><p>\(escaped)</p>\n"
        let response = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n\(body)"
        _ = Array(response.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}
