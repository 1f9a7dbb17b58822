// CurlTransport against a raw local server: options, header parsing, limits, failures, reuse.

import CurlTransport
@testable import DropboxClient
import Foundation
import Synchronization
import TestSupport
import Testing

@Suite("CurlTransport")
struct CurlTransportTests {
    let transport = CurlTransport(caBundlePath: nil)

    @Test func parsesStatusHeadersAndBody() throws {
        let server = try RawHTTPServer { _, _ in
            .init(bytes: RawHTTPServer.http(201, Array("hello".utf8),
                                            headers: [("X-Mixed-Case", "  Value with: colon  "), ("Dropbox-API-Result", "{\"a\":1}")]))
        }
        defer { server.stop() }
        let r = try transport.send(HTTPRequest(method: .get, url: server.baseURL + "/x"))
        #expect(r.status == 201)
        #expect(r.body == Array("hello".utf8))
        #expect(r.headers["x-mixed-case"] == "Value with: colon")
        #expect(r.headers["dropbox-api-result"] == "{\"a\":1}")
        #expect(r.headers["content-length"] == "5")
    }

    @Test func sendsMethodHeadersAndBody() throws {
        let received = Mutex<[UInt8]>([])
        let server = try RawHTTPServer { _, body in
            received.withLock { $0 = body }
            return .init(bytes: RawHTTPServer.http(200, []))
        }
        defer { server.stop() }
        let payload = Array(String(repeating: "{\"k\":\"ü\"}", count: 500).utf8)  // > 1 KiB: no Expect: 100-continue
        _ = try transport.send(HTTPRequest(method: .post, url: server.baseURL + "/2/r",
                                           headers: [("Authorization", "Bearer abc"), ("Content-Type", "application/json"),
                                                     ("X-Empty", "")],
                                           body: payload))
        let head = try #require(server.requestHeads.first)
        #expect(head.hasPrefix("POST /2/r HTTP/1.1"))
        #expect(head.contains("Authorization: Bearer abc"))
        #expect(head.contains("Content-Type: application/json"))
        #expect(head.contains("X-Empty:"))
        #expect(!head.lowercased().contains("expect:"))
        #expect(received.withLock { $0 } == payload)

        _ = try transport.send(HTTPRequest(method: .post, url: server.baseURL + "/2/empty"))
        let second = server.requestHeads[1]
        #expect(second.contains("Content-Length: 0"))
        #expect(!second.lowercased().contains("content-type"))

        _ = try transport.send(HTTPRequest(method: .get, url: server.baseURL + "/2/get", headers: [("Range", "bytes=1-2")]))
        #expect(server.requestHeads[2].hasPrefix("GET /2/get HTTP/1.1"))
        #expect(server.requestHeads[2].contains("Range: bytes=1-2"))
    }

    @Test func reusesOneConnectionForSequentialRequests() throws {
        let server = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, Array("ok".utf8))) }
        defer { server.stop() }
        let transport = CurlTransport(caBundlePath: nil)
        for _ in 0..<20 {
            #expect(try transport.send(HTTPRequest(method: .get, url: server.baseURL)).status == 200)
        }
        #expect(transport.connectionsOpened == 1)
        #expect(server.connectionsAccepted == 1)
        #expect(transport.handlesOpened == 1)
    }

    @Test func concurrentRequestsUseABoundedNumberOfConnections() throws {
        let server = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, Array("ok".utf8)), delay: 0.01) }
        defer { server.stop() }
        let transport = CurlTransport(caBundlePath: nil)
        let failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10 {
                if (try? transport.send(HTTPRequest(method: .get, url: server.baseURL)))?.status != 200 {
                    failures.add(1, ordering: .relaxed)
                }
            }
        }
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(transport.handlesOpened <= 8)
        #expect(transport.connectionsOpened <= 8)
        #expect(server.connectionsAccepted == transport.connectionsOpened)
    }

    @Test func shortBodyIsATransportError() throws {
        let server = try RawHTTPServer { _, _ in
            .init(bytes: RawHTTPServer.http(200, Array("0123456789".utf8), contentLength: 100), close: true)
        }
        defer { server.stop() }
        let error = thrown { () throws(HTTPTransportError) in try transport.send(HTTPRequest(method: .get, url: server.baseURL)) }
        guard case .failed(let code, _)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(code == 18)  // CURLE_PARTIAL_FILE
    }

    @Test func aStatusLineWithoutAReasonPhraseStillStreams() throws {
        // RFC 9112 §4: the reason phrase may be empty, and the space before it absent in practice.
        let server = try RawHTTPServer { _, _ in
            .init(bytes: Array("HTTP/1.1 206\r\nContent-Range: bytes 0-9/10\r\nContent-Length: 10\r\n\r\n0123456789".utf8),
                  close: true)
        }
        defer { server.stop() }
        final class Collector: HTTPBodyReceiver {
            var status = 0
            var bytes: [UInt8] = []
            func responseStarted(status: Int, headers: [String: String]) -> HTTPBodyDisposition {
                self.status = status
                return status == 206 ? .stream : .buffer
            }
            func receive(_ chunk: UnsafeRawBufferPointer) -> Bool { bytes += chunk; return true }
        }
        let collector = Collector()
        _ = try transport.send(HTTPRequest(method: .get, url: server.baseURL), streamingTo: collector)
        #expect(collector.status == 206)
        #expect(collector.bytes == Array("0123456789".utf8))
    }

    @Test func announcedOversizedBodyIsRefused() throws {
        let server = try RawHTTPServer { _, _ in
            .init(bytes: RawHTTPServer.http(200, [UInt8](repeating: 65, count: 5000)))
        }
        defer { server.stop() }
        let error = thrown { () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: server.baseURL, maxResponseBytes: 1000))
        }
        guard case .tooLarge(let message)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(message.contains("1000-byte limit"))
        // Exactly at the limit is fine.
        #expect(try transport.send(HTTPRequest(method: .get, url: server.baseURL, maxResponseBytes: 5000)).body.count == 5000)
    }

    @Test func chunkedOversizedBodyIsStopped() throws {
        let server = try RawHTTPServer { _, _ in
            var text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            for _ in 0..<100 { text += "400\r\n" + String(repeating: "x", count: 0x400) + "\r\n" }
            text += "0\r\n\r\n"
            return .init(bytes: Array(text.utf8), close: true)
        }
        defer { server.stop() }
        let error = thrown { () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: server.baseURL, maxResponseBytes: 10_000))
        }
        guard case .tooLarge(let message)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(message.contains("limit"))
        #expect(try transport.send(HTTPRequest(method: .get, url: server.baseURL)).body.count == 102_400)
    }

    @Test func manyHeadersAreStopped() throws {
        let server = try RawHTTPServer { _, _ in
            let headers = (0..<5000).map { ("X-Filler-\($0)", String(repeating: "y", count: 100)) }
            return .init(bytes: RawHTTPServer.http(200, [], headers: headers), close: true)
        }
        defer { server.stop() }
        let error = thrown { () throws(HTTPTransportError) in try transport.send(HTTPRequest(method: .get, url: server.baseURL)) }
        guard case .tooLarge(let message)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(message.contains("headers"))
    }

    @Test func stalledServerTimesOut() throws {
        let server = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, []), delay: 3) }
        defer { server.stop() }
        let start = ContinuousClock.now
        let error = thrown { () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: server.baseURL, timeout: 0.5))
        }
        guard case .failed(let code, _)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(code == 28)  // CURLE_OPERATION_TIMEDOUT
        #expect(ContinuousClock.now - start < .seconds(2.5))
    }

    /// Sends to `url` (a server that does not answer for 10 s) from another thread under `token`,
    /// runs `giveUp` once the request waits, and returns how the send ended: nil if it did not
    /// end within 8 s.
    static func outcomeOfAWaitingSend(on transport: CurlTransport, to url: String, obeying token: CallCancellation?,
                                      giveUp: () -> Void) -> HTTPTransportError?? {
        let outcome = Mutex<HTTPTransportError??>(nil)
        Thread.detachNewThread {
            let error = thrown { () throws(HTTPTransportError) in
                try CallCancellation.obeying(token) { () throws(HTTPTransportError) in
                    try transport.send(HTTPRequest(method: .get, url: url, timeout: 30))
                }
            }
            outcome.withLock { $0 = .some(error) }
        }
        Thread.sleep(forTimeInterval: 0.3)   // the request is waiting for the silent server
        giveUp()
        _ = eventually(within: 8) { outcome.withLock { $0 } != nil }   // not the server's 10 s
        return outcome.withLock { $0 }
    }

    @Test func stopEndsATransferInFlightAndRefusesNewOnes() throws {
        let server = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, []), delay: 10) }
        defer { server.stop() }
        let stopping = CurlTransport(caBundlePath: nil)
        let url = server.baseURL
        let start = ContinuousClock.now
        #expect(Self.outcomeOfAWaitingSend(on: stopping, to: url, obeying: nil) { stopping.stop() } == .stopped)
        #expect(ContinuousClock.now - start < .seconds(8))
        let later = thrown { () throws(HTTPTransportError) in try stopping.send(HTTPRequest(method: .get, url: url)) }
        #expect(later == .stopped)
        #expect(DropboxError(HTTPTransportError.stopped) == .stopped)
        #expect(RetryPolicy.standard.delay(after: .stopped, attempt: 1, remaining: 100) == nil)
    }

    @Test func aCancelledCallEndsInFlightAndLeavesTheTransportServingOthers() throws {
        let silent = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, []), delay: 10) }
        defer { silent.stop() }
        let answering = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, Array("ok".utf8))) }
        defer { answering.stop() }
        let token = CallCancellation()
        #expect(Self.outcomeOfAWaitingSend(on: transport, to: silent.baseURL, obeying: token) { token.cancel() } == .stopped)
        // Only the calls under the token: this thread's, and the transport, go on.
        #expect(try transport.send(HTTPRequest(method: .get, url: answering.baseURL)).body == Array("ok".utf8))
    }

    @Test func aBackoffEndsWhenItsCallIsCancelled() {
        let token = CallCancellation()
        let start = ContinuousClock.now
        CallCancellation.obeying(token) {
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { token.cancel() }
            RetryPolicy.threadSleep(20)
        }
        #expect(ContinuousClock.now - start < .seconds(10), "woke within a slice of the cancel, not after 20 s")
        #expect(!CallCancellation.isCurrentCallCancelled, "the token is no longer in force")
    }

    @Test func refusedConnectionIsATransportError() throws {
        let server = try RawHTTPServer { _, _ in .init(bytes: []) }
        let url = server.baseURL
        server.stop()
        let error = thrown { () throws(HTTPTransportError) in try transport.send(HTTPRequest(method: .get, url: url)) }
        guard case .failed(let code, _)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(code == 7)  // CURLE_COULDNT_CONNECT
    }

    @Test func aConnectThatTimesOutIsAFailureToConnect() throws {
        let listener = try SilentListener()
        defer { listener.close() }
        let quick = CurlTransport(caBundlePath: nil, connectTimeout: 0.5)
        let start = ContinuousClock.now
        let error = thrown { () throws(HTTPTransportError) in
            try quick.send(HTTPRequest(method: .get, url: "http://127.0.0.1:\(listener.port)/", timeout: 5))
        }
        guard case .failed(let code, let message)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(code == 7)   // what the mount's reachability reads as offline
        #expect(message.contains("connect timeout"))
        #expect(ContinuousClock.now - start < .seconds(3))
    }

    @Test func aTimeoutOnAReusedConnectionStaysATimeout() throws {
        let answered = Atomic<Int>(0)
        let server = try RawHTTPServer { _, _ in
            answered.add(1, ordering: .relaxed).oldValue == 0
                ? .init(bytes: RawHTTPServer.http(200, Array("ok".utf8)))
                : .init(bytes: RawHTTPServer.http(200, []), delay: 3)
        }
        defer { server.stop() }
        let transport = CurlTransport(caBundlePath: nil)
        #expect(try transport.send(HTTPRequest(method: .get, url: server.baseURL)).status == 200)
        let error = thrown { () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: server.baseURL, timeout: 0.5))
        }
        guard case .failed(let code, _)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(code == 28)
        #expect(server.connectionsAccepted == 1)
    }

    @Test func tlsToAPlainServerFails() throws {
        let server = try RawHTTPServer { _, _ in .init(bytes: RawHTTPServer.http(200, Array("plain".utf8)), close: true) }
        defer { server.stop() }
        let error = thrown { () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: "https://127.0.0.1:\(server.port)/", timeout: 5))
        }
        guard case .failed? = error else { Issue.record("\(String(describing: error))"); return }
    }

    @Test func rejectsOtherSchemesAndHeaderInjection() {
        #expect({ if case .failed? = thrown({ () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: "file:///etc/passwd")) }) { true } else { false } }())
        let error = thrown { () throws(HTTPTransportError) in
            try transport.send(HTTPRequest(method: .get, url: "http://127.0.0.1:9/",
                                           headers: [("Authorization", "Bearer secret\r\nX-Evil: 1")]))
        }
        guard case .invalidRequest(let message)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(!message.contains("secret"))
    }

    @Test func tokenNeverAppearsInErrors() throws {
        let server = try RawHTTPServer { _, _ in
            .init(bytes: RawHTTPServer.http(200, Array("0123".utf8), contentLength: 50), close: true)
        }
        let url = server.baseURL
        defer { server.stop() }
        let token = "sl.VERY-SECRET-TOKEN"
        for (target, timeout) in [(url, 5.0), ("http://127.0.0.1:1/", 5.0), ("https://127.0.0.1:\(server.port)/", 5.0)] {
            let error = thrown { () throws(HTTPTransportError) in
                try transport.send(HTTPRequest(method: .get, url: target, headers: [("Authorization", "Bearer \(token)")],
                                               timeout: timeout))
            }
            #expect(error != nil)
            #expect(!"\(String(describing: error))".contains(token))
        }
    }

    @Test func clientOverCurlAgainstRawServer() throws {
        // The whole stack once without the emulator: an RPC and a ranged download.
        let server = try RawHTTPServer { head, _ in
            if head.hasPrefix("POST /2/users/get_space_usage") {
                return .init(bytes: RawHTTPServer.http(200, Array(#"{"used":1,"allocation":{".tag":"individual","allocated":2}}"#.utf8),
                                                       headers: [("Content-Type", "application/json")]))
            }
            return .init(bytes: RawHTTPServer.http(206, Array("bcd".utf8), headers: [("Content-Range", "bytes 1-3/10")]))
        }
        defer { server.stop() }
        let client = DropboxHTTPClient(endpoints: DropboxEndpoints(baseURL: server.baseURL),
                                       tokens: StaticAccessToken("t"), transport: transport)
        #expect(try client.spaceUsage() == SpaceUsage(used: 1, allocated: 2))
        #expect(try client.download(path: "/f", range: 1..<4) == Array("bcd".utf8))
        #expect(server.requestHeads[1].contains("Range: bytes=1-3"))
    }
}
