// A tiny HTTP/1.1 server on 127.0.0.1 that answers with raw bytes the test chooses: the way to
// make a transport see a lying Content-Length, a cut-off body or a stalled server.

import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class RawHTTPServer: Sendable {
    struct Answer: Sendable {
        var bytes: [UInt8]
        /// Close the connection after writing (otherwise keep it alive for the next request).
        var close = false
        /// Seconds to wait before answering.
        var delay: Double = 0
    }

    /// Gets the request head (request line and headers) and body.
    typealias Handler = @Sendable (_ head: String, _ body: [UInt8]) -> Answer

    let port: Int
    private let listener: Int32
    private let handler: Handler
    private let counters = Mutex<(connections: Int, heads: [String])>((0, []))

    var connectionsAccepted: Int { counters.withLock { $0.connections } }
    var requestHeads: [String] { counters.withLock { $0.heads } }

    init(_ handler: @escaping Handler) throws {
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = fd
        let listener = fd
        Thread.detachNewThread { [self] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else {
                    // Closed here, not in stop(): closing there could let a new socket reuse the
                    // number while this thread is about to accept on it.
                    close(listener)
                    return
                }
                counters.withLock { $0.connections += 1 }
                Thread.detachNewThread { [self] in serve(connection) }
            }
        }
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            // Read one request: head up to CRLFCRLF, then Content-Length bytes of body.
            var headEnd: Int?
            while headEnd == nil {
                if let end = Self.find([13, 10, 13, 10], in: buffer) { headEnd = end; break }
                let n = read(connection, &chunk, chunk.count)
                guard n > 0 else { return }
                buffer.append(contentsOf: chunk[..<n])
            }
            let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
            let length = head.split(separator: "\r\n").compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first ?? 0
            let bodyStart = headEnd! + 4
            while buffer.count < bodyStart + length {
                let n = read(connection, &chunk, chunk.count)
                guard n > 0 else { return }
                buffer.append(contentsOf: chunk[..<n])
            }
            let body = Array(buffer[bodyStart..<(bodyStart + length)])
            buffer.removeFirst(bodyStart + length)
            counters.withLock { $0.heads.append(head) }
            let answer = handler(head, body)
            if answer.delay > 0 { Thread.sleep(forTimeInterval: answer.delay) }
            var written = 0
            while written < answer.bytes.count {
                let n = answer.bytes[written...].withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
                guard n > 0 else { return }
                written += n
            }
            if answer.close { return }
        }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i..<(i + needle.count)].elementsEqual(needle) {
            return i
        }
        return nil
    }

    /// A complete HTTP/1.1 response.
    static func http(_ status: Int, _ body: [UInt8], headers: [(String, String)] = [],
                     contentLength: Int? = nil) -> [UInt8] {
        var text = "HTTP/1.1 \(status) Whatever\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "Content-Length: \(contentLength ?? body.count)\r\n\r\n"
        return Array(text.utf8) + body
    }
}

/// A listening socket that never accepts, its queue filled by connections of its own, so the
/// kernel drops every further SYN: a connect to it times out as to a host behind a dead route.
final class SilentListener: Sendable {
    let port: Int
    private let sockets: [Int32]

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ready = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ready else { _ = Glibc.close(fd); throw POSIXError(.EADDRINUSE) }
        var fillers: [Int32] = []
        for _ in 0..<4 {
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) }
            }
            fillers.append(filler)
        }
        Thread.sleep(forTimeInterval: 0.2)   // the fillers' handshakes complete into the queue
        port = Int(UInt16(bigEndian: address.sin_port))
        sockets = [fd] + fillers
    }

    func close() {
        for socket in sockets { _ = Glibc.close(socket) }
    }
}
