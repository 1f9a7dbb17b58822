// Streamed downloads (issue 6): `download(path:range:into:)` hands bytes on as they arrive, checks
// each 206's Content-Range before any of its body, never hands on more than was promised, and
// resumes a body cut short from the byte where it stopped.

@testable import CurlTransport
@testable import DropboxClient
import Foundation
import Synchronization
import TestSupport
import Testing

/// Collects what a streamed download hands on.
final class Collected: @unchecked Sendable {
    // `@unchecked Sendable`: used by one thread at a time (the test's).
    var bytes: [UInt8] = []
    var chunks = 0
}

func streamed(_ client: DropboxHTTPClient, _ path: String, _ range: Range<UInt64>, stopAfter: Int = .max) throws(DropboxError)
    -> (returned: UInt64, bytes: [UInt8], chunks: Int)
{
    let out = Collected()
    let n = try client.download(path: path, range: range) { chunk in
        out.bytes += chunk
        out.chunks += 1
        return out.bytes.count < stopAfter
    }
    return (n, out.bytes, out.chunks)
}

@Suite("Streamed downloads")
struct StreamingDownloadTests {
    @Test func rangesThroughAFakeTransport() throws {
        let client = makeClient(DownloadTests.rangeServer())
        let file = DownloadTests.file
        #expect(try streamed(client, "/f", 100..<200).bytes == Array(file[100..<200]))
        #expect(try streamed(client, "/f", 990..<5000).bytes == Array(file[990...]), "short only at end of file")
        #expect(try streamed(client, "/f", 1000..<2000).returned == 0, "416 past the end is no bytes")
        #expect(try streamed(client, "/f", 7..<7).returned == 0)
    }

    @Test func wrongContentRangeHandsOnNothing() {
        let fake = FakeTransport { _, _ in bytesResponse(206, [1, 2, 3], headers: ["content-range": "bytes 5-7/100"]) }
        let out = Collected()
        let error = thrown { () throws(DropboxError) in
            try makeClient(fake).download(path: "/f", range: 0..<3) { out.bytes += $0; return true }
        }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(out.bytes.isEmpty)
    }

    @Test func aBodyLongerThanPromisedIsCutAtThePromise() {
        let fake = FakeTransport { _, _ in bytesResponse(206, [1, 2, 3, 4, 5], headers: ["content-range": "bytes 0-2/100"]) }
        let out = Collected()
        let error = thrown { () throws(DropboxError) in
            try makeClient(fake).download(path: "/f", range: 0..<3) { out.bytes += $0; return true }
        }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(out.bytes.count <= 3)
    }

    @Test func wholeFile200IsSlicedAndHandedOn() throws {
        let file = DownloadTests.file
        let fake = FakeTransport { _, _ in bytesResponse(200, file) }
        #expect(try streamed(makeClient(fake), "/f", 10..<20).bytes == Array(file[10..<20]))
    }

    @Test func againstTheEmulatorBytesArriveInSeveralChunks() throws {
        let content = randomBytes(3 << 20)
        let f = try EmulatorFixture(files: ["s.bin": content])
        let result = try streamed(f.client, "/s.bin", 1000..<(3 << 20))
        #expect(result.bytes == Array(content[1000...]))
        #expect(result.chunks > 1, "streamed, not buffered")
        let stopped = try streamed(f.client, "/s.bin", 0..<(3 << 20), stopAfter: 1)
        #expect(stopped.returned == UInt64(stopped.bytes.count) && stopped.bytes.count < 3 << 20,
                "a consumer that stops ends the transfer")
        #expect(stopped.bytes == Array(content[0..<stopped.bytes.count]))
    }

    @Test func truncatedBodiesResumeFromWhereTheyStopped() throws {
        let content = randomBytes(2 << 20)
        let f = try EmulatorFixture(files: ["t.bin": content], retry: RetryPolicy(maxAttempts: 20, baseDelay: 0.001,
                                                                                   maxDelay: 0.01, callDeadline: 60)) {
            $0.truncateRate = 0.5
            $0.seed = 7
        }
        for i in 0..<6 {
            let start = UInt64(i * 100_000)
            #expect(try streamed(f.client, "/t.bin", start..<(start + 1_500_000)).bytes
                    == Array(content[Int(start)..<Int(start + 1_500_000)]))
        }
        // Each retry asked only for the rest, so far fewer bytes went out than 6 downloads × attempts.
        let stats = try f.transport.send(HTTPRequest(method: .get, url: f.server.baseURL + "/__stats"))
        let json = try JSONSerialization.jsonObject(with: Data(stats.body)) as? [String: Any]
        let sent = (json?["download_bytes"] as? NSNumber)?.intValue ?? .max
        #expect(sent < 6 * 1_500_000 * 2, "sent \(sent)")
    }
}
