import Foundation
import Testing

@Suite struct DownloadTests {
    static let files = ["Docs/a.txt": "0123456789", "empty": "", "Ünï.txt": "u", "Notes.paper": "<p>paper</p>"]

    @Test func argumentByHeaderOrURLByPostOrGet() throws {
        try withFixture(files: Self.files) { f in
            let post = f.download(#"{"path":"/docs/A.TXT"}"#)
            #expect(post.status == 200)
            #expect(post.text == "0123456789")
            #expect(post.header("Content-Type") == "application/octet-stream")
            #expect(post.header("Accept-Ranges") == "bytes")
            let result = try JSONSerialization.jsonObject(with: Data(post.header("Dropbox-API-Result")!.utf8)) as! [String: Any]
            #expect(result["name"] as? String == "a.txt")
            #expect(result[".tag"] == nil)
            #expect(result["size"] as? Int == 10)
            #expect(post.header("ETag") == "W/\"\(result["rev"] as! String)\"")
            let get = f.curl("/2/files/download", ["-G", "-H", "Authorization: Bearer emulator-token", "--data-urlencode", #"arg={"path":"/Docs/a.txt"}"#])
            #expect(get.status == 200)
            #expect(get.text == "0123456789")
            let octet = f.download(#"{"path":"/Docs/a.txt"}"#, headers: ["Content-Type: application/octet-stream"])
            #expect(octet.status == 200)
            let byRev = f.download(#"{"path":"rev:\#(result["rev"] as! String)"}"#)
            #expect(byRev.text == "0123456789")
            let byID = f.download(#"{"path":"\#(result["id"] as! String)"}"#)
            #expect(byID.text == "0123456789")
            #expect(errorTags(f.download(#"{"path":"rev:0123456789abcdef"}"#)) == ["path", "not_found"])
            #expect(f.curl("/2/files/download", ["-X", "POST", "-H", "Authorization: Bearer emulator-token"]).status == 400)
        }
    }

    @Test func headerResultIsASCIIAndArgMayBeRawUTF8() throws {
        try withFixture(files: Self.files) { f in
            let r = f.download(#"{"path":"/Ünï.txt"}"#)
            #expect(r.status == 200)
            let raw = r.header("Dropbox-API-Result")!
            #expect(raw.unicodeScalars.allSatisfy { $0.value < 0x7F })
            #expect(raw.contains(#"\u00dcn\u00ef.txt"#))
        }
    }

    @Test func ranges() throws {
        try withFixture(files: Self.files) { f in
            let arg = #"{"path":"/Docs/a.txt"}"#
            let ab = f.download(arg, headers: ["Range: bytes=2-4"])
            #expect(ab.status == 206)
            #expect(ab.text == "234")
            #expect(ab.header("Content-Range") == "bytes 2-4/10")
            let open = f.download(arg, headers: ["Range: bytes=7-"])
            #expect(open.text == "789")
            #expect(open.header("Content-Range") == "bytes 7-9/10")
            let suffix = f.download(arg, headers: ["Range: bytes=-4"])
            #expect(suffix.text == "6789")
            #expect(suffix.header("Content-Range") == "bytes 6-9/10")
            let long = f.download(arg, headers: ["Range: bytes=8-100"])
            #expect(long.text == "89")
            #expect(long.header("Content-Range") == "bytes 8-9/10")
            let bigSuffix = f.download(arg, headers: ["Range: bytes=-100"])
            #expect(bigSuffix.status == 206)
            #expect(bigSuffix.text == "0123456789")
            let past = f.download(arg, headers: ["Range: bytes=10-"])
            #expect(past.status == 416)
            #expect(past.header("Content-Range") == "bytes */10")
            let empty = f.download(#"{"path":"/empty"}"#, headers: ["Range: bytes=0-0"])
            #expect(empty.status == 416)
            #expect(empty.header("Content-Range") == "bytes */0")
            let whole = f.download(#"{"path":"/empty"}"#)
            #expect(whole.status == 200)
            #expect(whole.body.isEmpty)
        }
    }

    @Test func rangePastEnd409Knob() throws {
        try withFixture(files: Self.files, { $0.rangePastEnd = .route409 }) { f in
            let r = f.download(#"{"path":"/empty"}"#, headers: ["Range: bytes=0-0"])
            #expect(r.status == 409)
            #expect((r.json["error_summary"] as! String).hasPrefix("range/not_satisfiable"))
        }
    }

    @Test func etagNotModified() throws {
        try withFixture(files: Self.files) { f in
            let first = f.download(#"{"path":"/Docs/a.txt"}"#)
            let etag = first.header("ETag")!
            let again = f.download(#"{"path":"/Docs/a.txt"}"#, headers: ["If-None-Match: \(etag)"])
            #expect(again.status == 304)
            #expect(again.body.isEmpty)
            #expect(f.download(#"{"path":"/Docs/a.txt"}"#, headers: ["If-None-Match: W/\"other\""]).status == 200)
        }
    }

    @Test func errorsAndExport() throws {
        try withFixture(files: Self.files) { f in
            #expect(errorTags(f.download(#"{"path":"/Docs"}"#)) == ["path", "not_file"])
            #expect(errorTags(f.download(#"{"path":"/nope"}"#)) == ["path", "not_found"])
            let paper = f.download(#"{"path":"/Notes.paper"}"#)
            #expect(paper.status == 409)
            #expect(errorTags(paper) == ["unsupported_file"])
            let export = f.download(#"{"path":"/Notes.paper"}"#, route: "files/export")
            #expect(export.status == 200)
            #expect(export.text == "<p>paper</p>")
            let result = try JSONSerialization.jsonObject(with: Data(export.header("Dropbox-API-Result")!.utf8)) as! [String: Any]
            #expect((result["export_metadata"] as? [String: Any])?["name"] as? String == "Notes.html")
            #expect((result["file_metadata"] as? [String: Any])?["is_downloadable"] as? Bool == false)
            let md = f.download(#"{"path":"/Notes.paper","export_format":"markdown"}"#, route: "files/export")
            #expect(md.status == 200)
            #expect(errorTags(f.download(#"{"path":"/Notes.paper","export_format":"pdf"}"#, route: "files/export")) == ["invalid_export_format"])
            #expect(errorTags(f.download(#"{"path":"/Docs/a.txt"}"#, route: "files/export")) == ["non_exportable"])
            let bad = f.download(#"{"path":""}"#)
            #expect(bad.status == 400)
            #expect(bad.text.contains(#"HTTP header "Dropbox-API-Arg": path: '' did not match pattern"#))
        }
    }

    @Test func largeFileStreamsIntact() throws {
        try withFixture { f in
            let size = 9_711_423
            var bytes = [UInt8](repeating: 0, count: size)
            for i in 0..<size { bytes[i] = UInt8(truncatingIfNeeded: i &* 2654435761 >> 13) }
            try Data(bytes).write(to: URL(fileURLWithPath: f.dir + "/big.bin"))
            let r = f.download(#"{"path":"/big.bin"}"#)
            #expect(r.body == Data(bytes))
            let part = f.download(#"{"path":"/big.bin"}"#, headers: ["Range: bytes=4194300-4194400"])
            #expect(r.body.count == size)
            #expect(part.body == Data(bytes[4194300...4194400]))
        }
    }

    @Test func manyKeepAliveConnectionsAtOnce() async throws {
        let f = try Fixture(files: Self.files)
        defer { f.close() }
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    // One curl, several requests: they reuse a single keep-alive connection.
                    let urls = Array(repeating: ["-X", "POST", "-H", "Authorization: Bearer emulator-token", "-H", #"Dropbox-API-Arg: {"path":"/Docs/a.txt"}"#, "-o", "/dev/null", f.url + "/2/files/download", "--next"], count: 5).flatMap { $0 }
                    let r = f.curl("/2/files/download", ["-X", "POST", "-H", "Authorization: Bearer emulator-token", "-H", #"Dropbox-API-Arg: {"path":"/Docs/a.txt"}"#, "--next"] + urls.dropLast())
                    return r.status == 200
                }
            }
            for try await ok in group { #expect(ok) }
        }
        let stats = f.curl("/__stats").json
        #expect((stats["requests"] as? [String: Any])?["files/download"] as? Int == 96)
        #expect((stats["connections"] as? Int ?? 0) <= 32)
    }
}
