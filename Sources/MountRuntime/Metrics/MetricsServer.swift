// `/metrics` over HTTP for Prometheus (`--metrics-addr HOST:PORT`). Bound before libfuse
// daemonizes, so that an address in use or a bad one is one clear line at mount time; served from
// a thread started from FUSE's `init`, each connection on a short-lived thread of its own, and a
// client that has not sent its request line within a few seconds is dropped, so no client can
// hold up Prometheus's scrape. It answers
// `GET /metrics` (and `/`) with the text exposition and anything else with 404: a read-only view,
// with no way to change the mount.

import CShims
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

public final class MetricsServer: Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// `HOST:PORT` as bound, for the log.
    public let address: String
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)

    /// Parses `HOST:PORT` (`:PORT` is loopback; `[v6]:PORT` for IPv6) and binds it.
    public init(address text: String) throws(Failure) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]), port > 0 else {
            throw Failure(description: "--metrics-addr needs HOST:PORT (such as 127.0.0.1:9101), not '\(text)'")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.isEmpty { host = "127.0.0.1" }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let info = found else {
            throw Failure(description: "--metrics-addr: cannot resolve '\(host)'")
        }
        defer { freeaddrinfo(found) }
        let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "--metrics-addr: socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0, listen(fd, 16) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "--metrics-addr: cannot listen on \(text): \(message)")
        }
        listener = fd
        address = "\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// Serves `exposition()` on a thread of its own until `stop`.
    public func start(_ exposition: @escaping @Sendable () -> [UInt8]) {
        let thread = Thread { [self] in serve(exposition) }
        thread.name = "dbx-metrics"
        thread.start()
    }

    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func serve(_ exposition: @escaping @Sendable () -> [UInt8]) {
        ControlSocket.acceptLoop(listener, while: { [self] in !stopped.load(ordering: .relaxed) }) { [self] in
            answer($0, exposition)
        }
    }

    private func answer(_ client: Int32, _ exposition: @Sendable () -> [UInt8]) {
        // Bounds the answer's writes; the request's read has its own overall deadline.
        ControlSocket.setTimeout(client, seconds: 5)
        // The request line is all that matters; headers and any body are ignored.
        guard let line = ControlSocket.readLine(client, limit: 8 << 10, within: 5) else { return }
        let fields = String(decoding: line, as: UTF8.self).split(separator: " ")
        let path = fields.count >= 2 ? fields[1].split(separator: "?").first.map(String.init) ?? "" : ""
        let response: [UInt8]
        if fields.first == "GET" || fields.first == "HEAD", path == "/metrics" || path == "/" {
            let body = exposition()
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            response = Array(head.utf8) + (fields.first == "HEAD" ? [] : body)
        } else {
            let body = "not found: dbx-mount serves /metrics\n"
            response = Array("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)".utf8)
        }
        // Let the rest of the request arrive before closing, so the client sees the answer
        // rather than a reset.
        _ = ControlSocket.writeAll(client, response)
        shutdown(client, Int32(SHUT_WR))
        ControlSocket.drain(client, within: 1)
    }
}
