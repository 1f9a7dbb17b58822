// The real stack: DropboxHTTPClient over CurlTransport against the Dropbox emulator on 127.0.0.1.

@testable import CurlTransport
import DropboxClient
import DropboxEmulator
import Foundation
import Synchronization
import TestSupport
import Testing

/// An emulator serving a fresh temporary directory, and a client wired to it.
final class EmulatorFixture: Sendable {
    let dir: String
    let server: DropboxEmulatorServer
    let transport: CurlTransport
    let client: DropboxHTTPClient

    init(files: [String: [UInt8]] = [:], token: String = "emulator-token", retry: RetryPolicy = .fast,
         _ configure: (inout EmulatorConfiguration) -> Void = { _ in }) throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-client-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (path, content) in files { try Self.write(dir + "/" + path, content) }
        var c = EmulatorConfiguration(root: dir)
        configure(&c)
        server = try DropboxEmulatorServer.start(c)
        transport = CurlTransport(caBundlePath: nil)
        client = DropboxHTTPClient(endpoints: DropboxEndpoints(baseURL: server.baseURL), tokens: StaticAccessToken(token),
                                   transport: transport, retryPolicy: retry)
    }

    static func write(_ path: String, _ content: [UInt8]) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try Data(content).write(to: URL(fileURLWithPath: path))
    }

    func write(_ rel: String, _ content: [UInt8]) throws { try Self.write(dir + "/" + rel, content) }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Every entry of `path`, following `continue`; also the number of pages.
    func listAll(_ path: String, limit: Int? = nil) throws(DropboxError) -> (entries: [Metadata], pages: Int, cursor: String) {
        var page = try client.listFolder(path: path, recursive: false, limit: limit)
        var entries = page.entries
        var pages = 1
        while page.hasMore {
            page = try client.listFolderContinue(cursor: page.cursor)
            entries += page.entries
            pages += 1
        }
        return (entries, pages, page.cursor)
    }
}

extension RetryPolicy {
    /// Quick backoff so fault-injection tests finish fast.
    static let fast = RetryPolicy(maxAttempts: 4, baseDelay: 0.02, maxDelay: 0.2, callDeadline: 60)
}

func randomBytes(_ count: Int, seed: UInt64 = 42) -> [UInt8] {
    var state = seed
    return (0..<count).map { _ in
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return UInt8(truncatingIfNeeded: state >> 33)
    }
}

@Suite("Client against the emulator", .serialized)
struct EmulatorTests {
    @Test func accountAndSpaceUsage() throws {
        let f = try EmulatorFixture(files: ["a.bin": randomBytes(1000)])
        let account = try f.client.currentAccount()
        #expect(account.accountID.count == 40)
        #expect(!account.displayName.isEmpty && !account.rootNamespaceID.isEmpty)
        let usage = try f.client.spaceUsage()
        #expect(usage.used >= 1000)
        #expect(usage.allocated >= usage.used)
    }

    @Test func badTokenIsAuth() throws {
        let f = try EmulatorFixture(token: "not-the-token")
        let error = thrown { () throws(DropboxError) in try f.client.currentAccount() }
        guard case .auth(let tag, _)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(tag == "invalid_access_token")
        #expect(!"\(error!)".contains("not-the-token"))
    }

    @Test func listsALargeFolderInPagesOverOneConnection() throws {
        var files: [String: [UInt8]] = [:]
        for i in 0..<3000 { files["big/file \(i).txt"] = Array("\(i)".utf8) }
        let f = try EmulatorFixture(files: files) { $0.pageSizeCap = 100 }
        let (entries, pages, _) = try f.listAll("/big")
        #expect(entries.count == 3000)
        #expect(Set(entries.map(\.name)) == Set((0..<3000).map { "file \($0).txt" }))
        #expect(pages >= 30)
        #expect(f.transport.connectionsOpened == 1)
        let limited = try f.client.listFolder(path: "/big", recursive: false, limit: 10)
        #expect(limited.entries.count <= 12 && limited.hasMore)
    }

    @Test func namesAndMetadataArriveExactly() throws {
        let names = ["space name.txt", "Grüße 日本 😀.txt", "quote'\"s.txt", "-leading-dash", String(repeating: "n", count: 255)]
        var files: [String: [UInt8]] = ["Dir/empty": []]
        for name in names { files["Dir/" + name] = Array(name.utf8) }
        let f = try EmulatorFixture(files: files)
        try FileManager.default.createDirectory(atPath: f.dir + "/Dir/Empty Folder", withIntermediateDirectories: true)
        let listed = try f.listAll("/dir").entries  // lookups are case-insensitive
        #expect(Set(listed.map(\.name)) == Set(names + ["empty", "Empty Folder"]))
        for name in names {
            guard case .file(let md) = try f.client.metadata(path: "/Dir/" + name) else {
                Issue.record("\(name) is not a file"); continue
            }
            #expect(md.name == name)
            #expect(md.size == UInt64(name.utf8.count))
            let mtime = try FileManager.default.attributesOfItem(atPath: f.dir + "/Dir/" + name)[.modificationDate] as! Date
            #expect(md.clientModified == Int64(mtime.timeIntervalSince1970.rounded(.down)))
            #expect(md.rev.count >= 9)
        }
        guard case .folder(let folder) = try f.client.metadata(path: "/dir/empty folder") else {
            Issue.record("not a folder"); return
        }
        #expect(folder.name == "Empty Folder")
        #expect(try f.listAll("/Dir/Empty Folder").entries.isEmpty)
    }

    @Test func missingPathsAndWrongKinds() throws {
        let f = try EmulatorFixture(files: ["d/x": [1]])
        #expect(thrown { () throws(DropboxError) in try f.client.metadata(path: "/nope") }?.isRoute("path", "not_found") == true)
        #expect(thrown { () throws(DropboxError) in try f.client.listFolder(path: "/nope", recursive: false, limit: nil) }?
            .isRoute("path", "not_found") == true)
        #expect(thrown { () throws(DropboxError) in try f.client.download(path: "/nope", range: 0..<1) }?
            .isRoute("path", "not_found") == true)
        #expect(thrown { () throws(DropboxError) in try f.client.download(path: "/d", range: 0..<1) }?
            .isRoute("path", "not_file") == true)
        #expect(thrown { () throws(DropboxError) in try f.client.listFolder(path: "/d/x", recursive: false, limit: nil) }?
            .isRoute("path", "not_folder") == true)
        let rootError = thrown { () throws(DropboxError) in try f.client.metadata(path: "") }
        guard case .badInput? = rootError else { Issue.record("root: \(String(describing: rootError))"); return }
    }

    @Test func downloadRanges() throws {
        let content = randomBytes(300_000)
        let f = try EmulatorFixture(files: ["r.bin": content, "empty": []])
        let c = f.client
        #expect(try c.download(path: "/r.bin", range: 0..<300_000) == content)
        #expect(try c.download(path: "/r.bin", range: 12_345..<54_321) == Array(content[12_345..<54_321]))
        #expect(try c.download(path: "/r.bin", range: 299_990..<400_000) == Array(content[299_990...]))
        #expect(try c.download(path: "/r.bin", range: 299_999..<300_000) == [content[299_999]])
        #expect(try c.download(path: "/r.bin", range: 300_000..<300_001) == [])
        #expect(try c.download(path: "/r.bin", range: 1_000_000..<2_000_000) == [])
        #expect(try c.download(path: "/empty", range: 0..<10) == [])
        guard case .file(let md) = try c.metadata(path: "/r.bin") else { Issue.record("not a file"); return }
        #expect(try c.download(path: "rev:" + md.rev, range: 100..<200) == Array(content[100..<200]))
        #expect(try c.download(path: md.id, range: 100..<200) == Array(content[100..<200]))
        // A replaced file: a read pinned to the old rev fails (the emulator keeps no old revs)
        // rather than returning the new bytes.
        try f.write("r.bin", randomBytes(1000, seed: 7))
        #expect(thrown { () throws(DropboxError) in try c.download(path: "rev:" + md.rev, range: 0..<10) }?
            .isRoute("path", "not_found") == true)
        #expect(try c.download(path: "/r.bin", range: 0..<1000) == randomBytes(1000, seed: 7))
        #expect(f.transport.connectionsOpened == 1)
    }

    @Test func pastEndAs409() throws {
        let f = try EmulatorFixture(files: ["r.bin": randomBytes(100), "empty": []]) { $0.rangePastEnd = .route409 }
        #expect(try f.client.download(path: "/r.bin", range: 100..<200) == [])
        #expect(try f.client.download(path: "/empty", range: 0..<1) == [])
        #expect(try f.client.download(path: "/r.bin", range: 90..<200) == randomBytes(100)[90...].map { $0 })
    }

    @Test func concurrentReadsShareAFewConnections() throws {
        let content = randomBytes(1 << 20)
        let f = try EmulatorFixture(files: ["big.bin": content])
        let mismatches = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<16 {
                let start = UInt64((t * 16 + i) * 8192)
                let got = try? f.client.download(path: "/big.bin", range: start..<(start + 8192))
                if got != Array(content[Int(start)..<Int(start + 8192)]) { mismatches.add(1, ordering: .relaxed) }
            }
        }
        #expect(mismatches.load(ordering: .relaxed) == 0)
        #expect(f.transport.connectionsOpened <= 8)
    }

    @Test func longpollWakesOnAChange() throws {
        let f = try EmulatorFixture(files: ["w/a": [1]])
        let cursor = try f.client.latestCursor(path: "/w", recursive: true)
        let result = Mutex<Result<LongpollResult, DropboxError>?>(nil)
        let start = ContinuousClock.now
        let poller = Thread {
            let r = Result { () throws(DropboxError) in try f.client.longpoll(cursor: cursor, timeout: 30) }
            result.withLock { $0 = r }
        }
        poller.start()
        Thread.sleep(forTimeInterval: 0.5)
        #expect(result.withLock { $0 } == nil)  // still waiting
        try f.write("w/b", [2])
        while result.withLock({ $0 }) == nil && ContinuousClock.now - start < .seconds(20) {
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(try result.withLock { $0 }?.get().changes == true)
        #expect(ContinuousClock.now - start < .seconds(10))
        let changes = try f.client.listFolderContinue(cursor: cursor)
        #expect(changes.entries.map(\.name) == ["b"])
    }

    @Test func longpollWithoutChangesReturnsFalse() throws {
        let f = try EmulatorFixture(files: ["a": [1]]) { $0.longpollMaxWait = 1; $0.longpollBackoff = 2 }
        let cursor = try f.client.latestCursor(path: "", recursive: true)
        #expect(try f.client.longpoll(cursor: cursor, timeout: 30) == LongpollResult(changes: false, backoff: 2))
    }

    @Test func retriesSucceedUnderInjectedFailures() throws {
        let content = randomBytes(50_000)
        let f = try EmulatorFixture(files: ["dir/f.bin": content], retry: RetryPolicy(maxAttempts: 8, baseDelay: 0.01,
                                                                                      maxDelay: 0.1, callDeadline: 60)) {
            $0.failureRate = 0.3
            $0.seed = 1234
        }
        for i in 0..<30 {
            _ = try f.client.metadata(path: "/dir/f.bin")
            let start = UInt64(i * 1000)
            #expect(try f.client.download(path: "/dir/f.bin", range: start..<(start + 1000)) == Array(content[Int(start)..<Int(start + 1000)]))
        }
    }

    @Test func truncatedDownloadsAreRetriedNeverPassedOn() throws {
        let content = randomBytes(200_000)
        let f = try EmulatorFixture(files: ["t.bin": content], retry: RetryPolicy(maxAttempts: 10, baseDelay: 0.01,
                                                                                   maxDelay: 0.05, callDeadline: 60)) {
            $0.truncateRate = 0.5
            $0.seed = 99
        }
        for i in 0..<10 {
            let start = UInt64(i * 15_000)
            #expect(try f.client.download(path: "/t.bin", range: start..<(start + 50_000))
                    == Array(content[Int(start)..<Int(start + 50_000)]))
        }
    }

    @Test func truncationWithoutRetriesIsATransportError() throws {
        let f = try EmulatorFixture(files: ["t.bin": randomBytes(200_000)], retry: .never) {
            $0.truncateRate = 1
        }
        let error = thrown { () throws(DropboxError) in try f.client.download(path: "/t.bin", range: 0..<200_000) }
        guard case .transport(let code, _)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(code == 18)
    }
}

@Suite("CurlTransport helpers")
struct CurlHelperTests {
    @Test func loopbackDetection() {
        #expect(CurlTransport.isLoopback("http://127.0.0.1:8080/2/x"))
        #expect(CurlTransport.isLoopback("https://localhost/"))
        #expect(CurlTransport.isLoopback("http://[::1]:99/"))
        #expect(CurlTransport.isLoopback("http://user@127.1.2.3"))
        #expect(!CurlTransport.isLoopback("https://api.dropboxapi.com/2/x"))
        #expect(!CurlTransport.isLoopback("https://127.evil.example/"))
        #expect(!CurlTransport.isLoopback("http://example.com/?u=http://127.0.0.1"))
    }
}

@Suite("Client over TLS against the emulator", .serialized)
struct EmulatorTLSTests {
    /// A self-signed certificate for 127.0.0.1 (IP SAN only), made with openssl.
    static func makeCertificate() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem",
                       "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        try #require(p.terminationStatus == 0)
        return dir
    }

    @Test func verifiesAgainstTheGivenCABundleAndReusesTheConnection() throws {
        let certs = try Self.makeCertificate()
        defer { try? FileManager.default.removeItem(atPath: certs) }
        let content = randomBytes(100_000)
        let f = try EmulatorFixture(files: ["a.bin": content]) {
            $0.tlsCertificatePath = certs + "/cert.pem"; $0.tlsKeyPath = certs + "/key.pem"
        }
        #expect(f.server.baseURL.hasPrefix("https://127.0.0.1:"))
        let endpoints = DropboxEndpoints(baseURL: f.server.baseURL)
        let trusted = CurlTransport(caBundlePath: certs + "/cert.pem")
        let client = DropboxHTTPClient(endpoints: endpoints, tokens: StaticAccessToken("emulator-token"), transport: trusted)
        _ = try client.currentAccount()
        #expect(try client.download(path: "/a.bin", range: 500..<90_000) == Array(content[500..<90_000]))
        _ = try client.spaceUsage()
        #expect(trusted.connectionsOpened == 1)

        // Without the CA the peer is not trusted; under another name the host does not match.
        let untrusted = DropboxHTTPClient(endpoints: endpoints, tokens: StaticAccessToken("emulator-token"),
                                          transport: CurlTransport(caBundlePath: nil), retryPolicy: .never)
        guard case .transport(let code, _)? = thrown({ () throws(DropboxError) in try untrusted.currentAccount() }) else {
            Issue.record("an untrusted certificate was accepted"); return
        }
        #expect(code == 60)  // CURLE_PEER_FAILED_VERIFICATION
        let byName = DropboxHTTPClient(endpoints: DropboxEndpoints(baseURL: "https://localhost:\(f.server.port)"),
                                       tokens: StaticAccessToken("emulator-token"), transport: trusted, retryPolicy: .never)
        guard case .transport(let nameCode, _)? = thrown({ () throws(DropboxError) in try byName.currentAccount() }) else {
            Issue.record("a certificate for another host was accepted"); return
        }
        #expect(nameCode == 60)  // VERIFYHOST: the certificate names 127.0.0.1 only
    }
}

@Suite("Client throughput against the emulator")
struct EmulatorThroughputTests {
    @Test func largeFileInBigRanges() throws {
        let size = 64 << 20, chunk = 8 << 20
        let content = randomBytes(size, seed: 3)
        let f = try EmulatorFixture(files: ["big.bin": content])
        var elapsed = Duration.zero
        var offset = 0
        while offset < size + chunk {
            let start = ContinuousClock.now
            let got = try f.client.download(path: "/big.bin", range: UInt64(offset)..<UInt64(offset + chunk))
            elapsed += ContinuousClock.now - start
            #expect(got == Array(content[min(offset, size)..<min(offset + chunk, size)]))
            offset += chunk
        }
        print("64 MiB in 8 MiB ranges: \(elapsed)")
        #expect(elapsed < .seconds(30))
        #expect(f.transport.connectionsOpened == 1)
    }
}
