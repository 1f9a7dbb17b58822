import Foundation
import Testing

@Suite struct KnobTests {
    @Test func failureRateIsSeededAndSparesAdminRoutes() throws {
        func statuses(seed: UInt64) throws -> [Int] {
            var out: [Int] = []
            try withFixture(files: ["a": "a"], { $0.failureRate = 0.5; $0.seed = seed }) { f in
                for _ in 0..<30 { out.append(f.rpc("users/get_space_usage", "null").status) }
                for _ in 0..<5 { #expect(f.curl("/__stats").status == 200) }
            }
            return out
        }
        let a = try statuses(seed: 7)
        #expect(try statuses(seed: 7) == a)
        #expect(Set(a).isSubset(of: [200, 429, 500, 503]))
        #expect(a.contains(200))
        #expect(a.contains { $0 != 200 })
        try withFixture(files: ["a": "a"], { $0.failureRate = 1 }) { f in
            var seen = Set<Int>()
            for _ in 0..<20 {
                let r = f.rpc("users/get_space_usage", "null")
                seen.insert(r.status)
                if r.status == 429 {
                    #expect(r.header("Retry-After") == "1")
                    #expect(((r.json["error"] as? [String: Any])?["reason"] as? [String: Any])?[".tag"] as? String == "too_many_requests")
                }
            }
            #expect(seen == [429, 500, 503])
        }
    }

    @Test func knobsChangeAtRunTime() throws {
        try withFixture(files: ["a": "a"]) { f in
            #expect(f.rpc("users/get_space_usage", "null").status == 200)
            let set = f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", #"{"fail_rate":1}"#])
            #expect(set.json["fail_rate"] as? Double == 1)
            #expect(f.rpc("users/get_space_usage", "null").status != 200)
            _ = f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", #"{"fail_rate":0}"#])
            #expect(f.rpc("users/get_space_usage", "null").status == 200)
            #expect(f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", #"{"nope":1}"#]).status == 400)
            #expect(f.curl("/__admin/knobs").json["page_size"] as? Int == 2000)
        }
    }

    @Test func truncation() throws {
        try withFixture(files: ["big": String(repeating: "x", count: 100_000)], { $0.truncateRate = 1 }) { f in
            let r = f.download(#"{"path":"/big"}"#)
            #expect(r.status == 200)
            #expect(r.body.count < 100_000)
            #expect(r.curlExit != 0)  // curl reports the short body
        }
    }

    @Test func rateLimit() throws {
        try withFixture(files: ["a": "a"], { $0.requestsPerSecond = 3 }) { f in
            var statuses: [Int] = []
            var retry: String?
            for _ in 0..<8 {
                let r = f.rpc("users/get_space_usage", "null")
                statuses.append(r.status)
                if r.status == 429 { retry = r.header("Retry-After") }
            }
            #expect(statuses.contains(429))
            #expect(statuses.filter { $0 == 200 }.count <= 6)
            #expect(retry == "1")
        }
    }

    @Test func latencyAndBandwidth() throws {
        try withFixture(files: ["a": String(repeating: "y", count: 200_000)], { $0.latency = .milliseconds(300) }) { f in
            let clock = ContinuousClock()
            var start = clock.now
            #expect(f.rpc("users/get_space_usage", "null").status == 200)
            #expect(clock.now - start >= .milliseconds(300))
            _ = f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", #"{"latency_ms":0,"bandwidth":400000}"#])
            start = clock.now
            let r = f.download(#"{"path":"/a"}"#)
            #expect(r.body.count == 200_000)
            #expect(clock.now - start >= .milliseconds(400))
        }
    }

    @Test func eachConnectionCanBeCappedOnItsOwn() throws {
        // A far server: every connection is slow, whatever the link. Set at start and as a knob.
        let text = (0..<25_000).map { String(format: "%07d,", $0) }.joined()   // 200,000 bytes
        try withFixture(files: ["t.txt": text], { $0.connectionBandwidthBytesPerSecond = 400_000 }) { f in
            let clock = ContinuousClock()
            var start = clock.now
            let whole = f.download(#"{"path":"/t.txt"}"#)
            #expect(whole.body == Data(text.utf8))
            #expect(clock.now - start >= .milliseconds(400))
            let knobs = f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", #"{"connection_bandwidth":null}"#]).json
            #expect(knobs["connection_bandwidth"] is NSNull)
            let set = f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", #"{"connection_bandwidth":200000}"#]).json
            #expect(set["connection_bandwidth"] as? Int == 200_000)
            start = clock.now
            let ranged = f.download(#"{"path":"/t.txt"}"#, headers: ["Range: bytes=0-99999"])
            #expect(ranged.body == Data(text.utf8)[0..<100_000])
            #expect(clock.now - start >= .milliseconds(400))
        }
    }

    @Test func statsCountTheMostDownloadsInFlightAtOnce() throws {
        // How many Range requests a client keeps going at once, for tests of its read-ahead.
        let text = (0..<25_000).map { String(format: "%07d,", $0) }.joined()   // 200,000 bytes
        try withFixture(files: ["t.txt": text], { $0.connectionBandwidthBytesPerSecond = 400_000 }) { f in
            _ = f.download(#"{"path":"/t.txt"}"#)
            _ = f.download(#"{"path":"/t.txt"}"#)
            #expect(f.curl("/__stats").json["download_peak"] as? Int == 1, "one after the other")
            let done = DispatchGroup()
            for _ in 0..<3 {
                done.enter()
                Thread { _ = f.download(#"{"path":"/t.txt"}"#); done.leave() }.start()
            }
            done.wait()
            #expect(f.curl("/__stats").json["download_bytes"] as? Int == 5 * 200_000)
            #expect(f.curl("/__stats").json["download_peak"] as? Int == 3, "three at once, each half a second")
            _ = f.curl("/__stats/reset", ["-X", "POST"])
            #expect(f.curl("/__stats").json["download_peak"] as? Int == 0, "none in flight at the reset")
        }
    }

    @Test func aCappedDownloadSendsTheExactBytesOfTheFileAndOfARange() throws {
        // Capped downloads go out in paced chunks (sendfile per chunk): every chunk must land at
        // its offset, for whole files and ranges alike.
        let text = (0..<40_000).map { String(format: "%07d,", $0) }.joined()   // 320,000 bytes
        try withFixture(files: ["t.txt": text], { $0.bandwidthBytesPerSecond = 20_000_000 }) { f in
            let whole = f.download(#"{"path":"/t.txt"}"#)
            #expect(whole.status == 200)
            #expect(whole.body == Data(text.utf8))
            let ranged = f.download(#"{"path":"/t.txt"}"#, headers: ["Range: bytes=1000-300999"])
            #expect(ranged.status == 206)
            #expect(ranged.body == Data(text.utf8)[1000..<301_000])
            let stats = f.curl("/__stats").json
            #expect(stats["download_bytes"] as? Int == 320_000 + 300_000)
        }
    }

    @Test func statsCountRoutesAndBytes() throws {
        try withFixture(files: ["a": "abc"]) { f in
            _ = f.rpc("files/list_folder", #"{"path":""}"#)
            _ = f.rpc("files/list_folder", #"{"path":""}"#)
            _ = f.download(#"{"path":"/a"}"#)
            let stats = f.curl("/__stats")
            #expect(stats.header("Content-Type") == "application/json")
            let requests = stats.json["requests"] as! [String: Int]
            #expect(requests == ["files/list_folder": 2, "files/download": 1])
            #expect(stats.json["download_bytes"] as? Int == 3)
            #expect((stats.json["bytes_sent"] as? Int ?? 0) > 3)
            #expect((stats.json["connections"] as? Int ?? 0) >= 3)
            #expect(f.curl("/__stats/reset", ["-X", "POST"]).status == 200)
            let after = f.curl("/__stats").json
            #expect((after["requests"] as? [String: Int])?.isEmpty == true)
            #expect(after["bytes_sent"] as? Int == 0)
        }
    }
}

@Suite struct OAuthTests {
    func form(_ f: Fixture, _ body: String) -> HTTPResult {
        f.curl("/oauth2/token", ["-X", "POST", "-H", "Content-Type: application/x-www-form-urlencoded", "--data-binary", body])
    }

    @Test func refreshTokenAndExpiry() async throws {
        let f = try Fixture(files: ["a": "a"]) { c in
            c.refreshToken = "refresh-1"; c.appKey = "app-1"; c.accessTokenLifetime = .seconds(1)
        }
        defer { f.close() }
        let r = form(f, "grant_type=refresh_token&refresh_token=refresh-1&client_id=app-1")
        #expect(r.status == 200)
        #expect(r.header("Content-Type") == "application/json")
        #expect(r.json["expires_in"] as? Int == 1)
        #expect(r.json["token_type"] as? String == "bearer")
        let token = r.json["access_token"] as! String
        #expect(f.rpc("users/get_current_account", "null", token: token).status == 200)
        try await Task.sleep(for: .milliseconds(1200))
        let expired = f.rpc("users/get_current_account", "null", token: token)
        #expect(expired.status == 401)
        #expect(errorTags(expired) == ["expired_access_token"])
        let bad = form(f, "grant_type=refresh_token&refresh_token=nope&client_id=app-1")
        #expect(bad.status == 400)
        #expect(bad.json["error"] as? String == "invalid_grant")
        #expect(form(f, "grant_type=refresh_token&refresh_token=refresh-1&client_id=other").json["error"] as? String == "invalid_grant")
        #expect(form(f, "grant_type=password").status == 400)
    }

    @Test func pkceCodeFlowAndRevoke() throws {
        try withFixture(files: ["a": "a"], { $0.appKey = "app-1" }) { f in
            let verifier = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"
            // base64url(sha256(verifier)) without padding, computed independently with openssl.
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", "printf %s '\(verifier)' | openssl dgst -sha256 -binary | openssl base64 -A | tr '+/' '-_' | tr -d '='"]
            let pipe = Pipe()
            p.standardOutput = pipe
            try p.run()
            p.waitUntilExit()
            let challenge = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let noRedirect = f.curl("/oauth2/authorize?client_id=app-1&response_type=code&code_challenge=\(challenge)&code_challenge_method=S256")
            #expect(noRedirect.status == 200)
            let code = noRedirect.text.trimmingCharacters(in: .whitespacesAndNewlines)
            let wrong = form(f, "grant_type=authorization_code&code=\(code)&client_id=app-1&code_verifier=wrong")
            #expect(wrong.json["error"] as? String == "invalid_grant")
            let redirect = f.curl("/oauth2/authorize?client_id=app-1&response_type=code&code_challenge=\(challenge)&code_challenge_method=S256&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&state=xyz")
            #expect(redirect.status == 302)
            let location = redirect.header("Location")!
            #expect(location.hasPrefix("http://127.0.0.1:9/cb?code="))
            #expect(location.hasSuffix("&state=xyz"))
            let code2 = String(location.split(separator: "code=")[1].split(separator: "&")[0])
            let ok = form(f, "grant_type=authorization_code&code=\(code2)&client_id=app-1&code_verifier=\(verifier)&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb")
            #expect(ok.status == 200)
            for key in ["access_token", "expires_in", "refresh_token", "account_id", "uid", "scope", "token_type"] { #expect(ok.json[key] != nil) }
            #expect(form(f, "grant_type=authorization_code&code=\(code2)&client_id=app-1&code_verifier=\(verifier)").status == 400)  // single use
            let access = ok.json["access_token"] as! String
            let refresh = ok.json["refresh_token"] as! String
            let sibling = form(f, "grant_type=refresh_token&refresh_token=\(refresh)&client_id=app-1").json["access_token"] as! String
            #expect(f.rpc("users/get_current_account", "null", token: access).status == 200)
            #expect(f.rpc("auth/token/revoke", nil, token: access).isNullBody)
            #expect(errorTags(f.rpc("users/get_current_account", "null", token: access)) == ["invalid_access_token"])
            #expect(errorTags(f.rpc("users/get_current_account", "null", token: sibling)) == ["invalid_access_token"])
            #expect(form(f, "grant_type=refresh_token&refresh_token=\(refresh)&client_id=app-1").json["error"] as? String == "invalid_grant")
        }
    }
}

@Suite struct TeamTests {
    @Test func rootInfoAndPathRoot() throws {
        try withFixture(files: ["Home/mine.txt": "m", "Shared/team.txt": "t"], { $0.teamMode = true }) { f in
            let account = f.rpc("users/get_current_account", "null").json
            let info = account["root_info"] as! [String: Any]
            #expect(info[".tag"] as? String == "team")
            #expect(info["home_path"] as? String == "/Home")
            let root = info["root_namespace_id"] as! String
            let home = info["home_namespace_id"] as! String
            #expect(root != home)
            let homeList = f.rpc("files/list_folder", #"{"path":""}"#).json["entries"] as! [[String: Any]]
            #expect(homeList.map { $0["path_display"] as! String } == ["/mine.txt"])
            let rootHeader = #"Dropbox-API-Path-Root: {".tag":"root","root":"\#(root)"}"#
            let teamList = f.rpc("files/list_folder", #"{"path":""}"#, headers: [rootHeader]).json["entries"] as! [[String: Any]]
            #expect(teamList.map { $0["path_display"] as! String } == ["/Home", "/Shared"])
            let nsHeader = #"Dropbox-API-Path-Root: {".tag":"namespace_id","namespace_id":"\#(root)"}"#
            #expect(f.rpc("files/get_metadata", #"{"path":"/Shared/team.txt"}"#, headers: [nsHeader]).status == 200)
            #expect(f.download(#"{"path":"/Home/mine.txt"}"#, headers: [rootHeader]).text == "m")
            #expect(f.rpc("files/get_metadata", #"{"path":"/mine.txt"}"#, headers: [#"Dropbox-API-Path-Root: {".tag":"home"}"#]).status == 200)
            let invalid = f.rpc("files/list_folder", #"{"path":""}"#, headers: [#"Dropbox-API-Path-Root: {".tag":"root","root":"999"}"#])
            #expect(invalid.status == 422)
            #expect(errorTags(invalid) == ["invalid_root", "team"])
            let noPermission = f.rpc("files/list_folder", #"{"path":""}"#, headers: [#"Dropbox-API-Path-Root: {".tag":"namespace_id","namespace_id":"999"}"#])
            #expect(noPermission.status == 422)
            #expect(errorTags(noPermission) == ["no_permission"])
            let space = f.rpc("users/get_space_usage", "null").json["allocation"] as! [String: Any]
            #expect(space[".tag"] as? String == "team")
        }
    }
}

@Suite struct TLSTests {
    @Test func servesHTTPS() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem",
                       "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        try withFixture(files: ["a.txt": String(repeating: "z", count: 1_000_000)], { $0.tlsCertificatePath = dir + "/cert.pem"; $0.tlsKeyPath = dir + "/key.pem" }) { f in
            #expect(f.url.hasPrefix("https://127.0.0.1:"))
            f.caFile = dir + "/cert.pem"
            #expect(f.rpc("users/get_current_account", "null").status == 200)
            let r = f.download(#"{"path":"/a.txt"}"#)
            #expect(r.body.count == 1_000_000)
            #expect(f.download(#"{"path":"/a.txt"}"#, headers: ["Range: bytes=10-19"]).body.count == 10)
        }
        var bad = EmulatorConfigurationProbe.configuration(dir)
        bad.tlsCertificatePath = dir + "/missing.pem"
        bad.tlsKeyPath = dir + "/key.pem"
        #expect(throws: (any Error).self) { try DropboxEmulatorServerProbe.start(bad) }
    }
}

import DropboxEmulator
enum EmulatorConfigurationProbe { static func configuration(_ root: String) -> EmulatorConfiguration { EmulatorConfiguration(root: root) } }
enum DropboxEmulatorServerProbe { static func start(_ c: EmulatorConfiguration) throws { try DropboxEmulatorServer.start(c).stop() } }
