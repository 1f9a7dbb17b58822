// files/get_thumbnail_batch and files/get_thumbnail_v2: real images in, real thumbnails out,
// decoded again with libgd to check their size; per-entry failures; the sample photos.

import CGD
@testable import DropboxEmulator
import Foundation
import Testing

/// Writes `bytes` at `root/rel`, creating folders.
private func put(_ root: String, _ rel: String, _ bytes: [UInt8]) {
    let path = root + "/" + rel
    try? FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
}

private func photo(_ width: Int, _ height: Int, _ encoding: SamplePhotos.Encoding, number: Int = 7) -> [UInt8] {
    SamplePhotos.photo(number: number, width: width, height: height, encoding: encoding)!
}

/// Width and height of an encoded image, as libgd decodes it.
private func dimensions(_ bytes: [UInt8]) -> [Int]? {
    guard let image = Thumbnailer.decode(bytes) else { return nil }
    return [image.width, image.height]
}

private enum Magic {
    static func of(_ bytes: [UInt8]) -> String {
        if bytes.starts(with: [0xFF, 0xD8, 0xFF]) { return "jpeg" }
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) { return "png" }
        if bytes.count > 12, bytes.starts(with: Array("RIFF".utf8)), Array(bytes[8..<12]) == Array("WEBP".utf8) { return "webp" }
        return "?"
    }
}

/// The images most tests serve: one of each decoder but TIFF (libtiff warns on stderr as gd
/// writes one), landscape and portrait, one tiny.
private func servePhotos(_ root: String) {
    put(root, "Photos/land.jpg", photo(1200, 800, .jpeg))
    put(root, "Photos/port.png", photo(600, 900, .png))
    put(root, "Photos/small.webp", photo(100, 60, .webp))
    put(root, "Photos/anim.gif", photo(300, 200, .gif))
    put(root, "Photos/scan.bmp", photo(320, 240, .bmp))
    put(root, "Photos/SHOUT.JPEG", photo(200, 200, .jpeg))
    put(root, "Photos/raw.ppm", Array("P6\n# hand-made\n40 20\n255\n".utf8) + (0..<40 * 20).flatMap { i in [UInt8(i % 256), 128, 0] })
    put(root, "Photos/jpeg-named.png", photo(160, 120, .jpeg))
}

private func batch(_ f: Fixture, _ entries: [String]) -> HTTPResult {
    f.rpc("files/get_thumbnail_batch", #"{"entries":[\#(entries.joined(separator: ","))]}"#)
}

/// The batch answer's entries: the decoded thumbnail and the metadata, or the failure's tags.
private func outcomes(_ r: HTTPResult) -> [(image: [UInt8]?, metadata: [String: Any], failure: [String])] {
    (r.json["entries"] as? [[String: Any]] ?? []).map { entry in
        if entry[".tag"] as? String == "success" {
            let image = (entry["thumbnail"] as? String).flatMap { Data(base64Encoded: $0) }.map { Array($0) }
            return (image, entry["metadata"] as? [String: Any] ?? [:], [])
        }
        var tags: [String] = []
        var node = entry["failure"] as? [String: Any]
        while let n = node, let tag = n[".tag"] as? String {
            tags.append(tag)
            node = n[tag] as? [String: Any]
        }
        return (nil, [:], tags)
    }
}

@Suite struct ThumbnailTests {
    @Test func sizesFitTheBoxAndNeverGrow() {
        func fit(_ w: Int, _ h: Int, _ size: ThumbnailSize, _ mode: ThumbnailMode) -> [Int] {
            let r = Thumbnailer.fittedSize(width: w, height: h, size: size, mode: mode)
            return [r.width, r.height]
        }
        #expect(fit(3000, 2000, .w128h128, .strict) == [128, 85])
        #expect(fit(2000, 3000, .w128h128, .strict) == [85, 128])
        #expect(fit(3000, 2000, .w480h320, .bestfit) == [480, 320])
        #expect(fit(2000, 3000, .w480h320, .bestfit) == [320, 480], "a portrait fits the transposed box")
        #expect(fit(2000, 3000, .w480h320, .strict) == [213, 320])
        #expect(fit(3000, 2000, .w128h128, .fitoneBestfit) == [192, 128], "covers the box")
        #expect(fit(1000, 1000, .w480h320, .fitoneBestfit) == [480, 480])
        #expect(fit(3000, 2000, .w128h128, .original) == [3000, 2000])
        #expect(fit(100, 60, .w2048h1536, .bestfit) == [100, 60], "never scaled up")
        #expect(fit(300, 200, .w256h256, .fitoneBestfit) == [300, 200])
        #expect(fit(5000, 10, .w32h32, .strict) == [32, 1], "at least one pixel")
    }

    @Test func batchAnswersEachEntryInOrderWithRealImages() throws {
        try withFixture({ servePhotos($0.root); put($0.root, "Photos/scan.tiff", photo(400, 300, .tiff)) }) { f in
            let asked: [(entry: String, name: String, format: String, size: [Int])] = [
                (#"{"path":"/Photos/land.jpg","format":"png","size":"w128h128","mode":"strict"}"#, "land.jpg", "png", [128, 85]),
                (#"{"path":"/photos/PORT.png","format":{".tag":"jpeg"},"size":{".tag":"w128h128"}}"#, "port.png", "jpeg", [85, 128]),
                (#"{"path":"/Photos/land.jpg","format":"webp","size":"w480h320","mode":"bestfit"}"#, "land.jpg", "webp", [480, 320]),
                (#"{"path":"/Photos/port.png","format":"png","size":"w480h320","mode":{".tag":"bestfit"}}"#, "port.png", "png", [320, 480]),
                (#"{"path":"/Photos/small.webp","format":"png","size":"w128h128"}"#, "small.webp", "png", [100, 60]),
                (#"{"path":"/Photos/anim.gif"}"#, "anim.gif", "jpeg", [64, 43]),
                (#"{"path":"/Photos/scan.bmp","format":"png","size":"w128h128"}"#, "scan.bmp", "png", [128, 96]),
                (#"{"path":"/Photos/scan.tiff","format":"webp","size":"w256h256"}"#, "scan.tiff", "webp", [256, 192]),
                (#"{"path":"/Photos/SHOUT.JPEG","format":"png","size":"w32h32","quality":"quality_90","exclude_media_info":true}"#, "SHOUT.JPEG", "png", [32, 32]),
                (#"{"path":"/Photos/raw.ppm","format":"png","size":"w32h32"}"#, "raw.ppm", "png", [32, 16]),
                (#"{"path":"/Photos/jpeg-named.png","format":"png","size":"w64h64"}"#, "jpeg-named.png", "png", [64, 48]),
                (#"{"path":"/Photos/land.jpg","format":"png","size":"w128h128","mode":"fitone_bestfit"}"#, "land.jpg", "png", [192, 128]),
                (#"{"path":"/Photos/port.png","format":"jpeg","size":"w64h64","mode":"original"}"#, "port.png", "jpeg", [600, 900]),
            ]
            let r = batch(f, asked.map(\.entry))
            #expect(r.status == 200)
            #expect(r.header("Content-Type") == "application/json")
            let got = outcomes(r)
            try #require(got.count == asked.count)
            for (one, answer) in zip(asked, got) {
                let image = try #require(answer.image, "\(one.entry): \(answer.failure)")
                #expect(Magic.of(image) == one.format, "\(one.entry)")
                #expect(dimensions(image) == one.size, "\(one.entry)")
                #expect(answer.metadata["name"] as? String == one.name)
                #expect(answer.metadata[".tag"] == nil, "FileMetadata, untagged as in download")
                #expect((answer.metadata["content_hash"] as? String)?.count == 64)
                #expect((answer.metadata["rev"] as? String)?.isEmpty == false)
            }
            #expect(got[0].metadata["size"] as? Int == (try FileManager.default.attributesOfItem(atPath: f.dir + "/Photos/land.jpg")[.size] as? Int))
            #expect(batch(f, []).text == #"{"entries":[]}"#)
        }
    }

    @Test func idsAndRevsResolveAsInDownload() throws {
        try withFixture({ servePhotos($0.root) }) { f in
            let md = f.rpc("files/get_metadata", #"{"path":"/Photos/land.jpg"}"#).json
            let id = try #require(md["id"] as? String), rev = try #require(md["rev"] as? String)
            let got = outcomes(batch(f, [
                #"{"path":"\#(id)","format":"png"}"#, #"{"path":"rev:\#(rev)","format":"png"}"#,
                #"{"path":"rev:0123456789abcdef"}"#, #"{"path":"id:nope"}"#,
            ]))
            #expect(got.map { $0.image.flatMap(dimensions) } == [[64, 43], [64, 43], nil, nil])
            #expect(got[2].failure == ["path", "not_found"])
            #expect(got[3].failure == ["path", "not_found"])
        }
    }

    @Test func eachEntryFailsOnItsOwn() throws {
        let land = photo(1200, 800, .jpeg)
        let port = photo(600, 900, .png)
        let files = ["notes.txt": "not an image\n", "Photos/fake.jpg": "text, not a JPEG\n", "Docs/x.txt": "x"]
        try withFixture(files: files, { c in
            put(c.root, "Photos/land.jpg", land)
            put(c.root, "Photos/cut.jpg", Array(land.prefix(land.count / 2)))
            put(c.root, "Photos/cut.png", Array(port.prefix(port.count / 2)))
            put(c.root, "Photos/empty.png", [])
            put(c.root, "Album.jpg/inner.png", port)  // a folder with an image's name
            // Over 20 MB: sparse, and answered by its size without being read.
            let big = open(c.root + "/Photos/big.jpg", O_CREAT | O_WRONLY, 0o644)
            ftruncate(big, off_t(20 * 1024 * 1024 + 1))
            close(big)
            let limit = open(c.root + "/Photos/limit.png", O_CREAT | O_WRONLY, 0o644)
            ftruncate(limit, off_t(20 * 1024 * 1024))  // at the limit: read, then found not to be a PNG
            close(limit)
        }) { f in
            let r = batch(f, [
                #"{"path":"/Photos/fake.jpg"}"#, #"{"path":"/notes.txt"}"#, #"{"path":"/missing.jpg"}"#,
                #"{"path":"/Photos/land.jpg","format":"png"}"#, #"{"path":"/Docs"}"#, #"{"path":"/Album.jpg"}"#,
                #"{"path":"/Photos/big.jpg"}"#, #"{"path":"/Photos/cut.jpg"}"#, #"{"path":"/Photos/cut.png"}"#,
                #"{"path":"/Photos/empty.png"}"#, #"{"path":"/Photos/limit.png"}"#, #"{"path":"/Photos/land.jpg/"}"#,
                #"{"path":"/Photos/land.jpg","size":"w32h32"}"#,
            ])
            #expect(r.status == 200)
            let got = outcomes(r)
            #expect(got.map(\.failure) == [
                ["unsupported_image"], ["unsupported_extension"], ["path", "not_found"],
                [], ["path", "not_file"], ["path", "not_file"],
                ["unsupported_image"], ["unsupported_image"], ["unsupported_image"],
                ["unsupported_image"], ["unsupported_image"], ["path", "malformed_path"],
                [],
            ])
            #expect(got[3].image.flatMap(dimensions) == [64, 43])
            #expect(got[12].image.flatMap(dimensions) == [32, 21])
        }
    }

    @Test func moreThan25IsTooManyFilesAndBadArgumentsAre400() throws {
        try withFixture(files: ["a.txt": "a"]) { f in
            let r26 = batch(f, Array(repeating: #"{"path":"/a.txt"}"#, count: 26))
            #expect(r26.status == 409)
            #expect(errorTags(r26) == ["too_many_files"])
            #expect((r26.json["error_summary"] as? String)?.hasPrefix("too_many_files/") == true)
            let r25 = batch(f, Array(repeating: #"{"path":"/a.txt"}"#, count: 25))
            #expect(r25.status == 200)
            #expect(outcomes(r25).count == 25)

            for bad in [#"{"path":"/a.jpg","size":"w100h100"}"#, #"{"path":"/a.jpg","format":"gif"}"#,
                        #"{"path":"/a.jpg","mode":{".tag":"crop"}}"#, #"{"path":"a.jpg"}"#, #"{"format":"png"}"#,
                        #"{"path":"/a.jpg","exclude_media_info":"yes"}"#] {
                let r = batch(f, [bad])
                #expect(r.status == 400, "\(bad)")
                #expect(r.text.hasPrefix("Error in call to API function \"files/get_thumbnail_batch\": request body: entries[0]"), "\(r.text)")
            }
            #expect(batch(f, [#"{"path":"/a.jpg","size":"w64"}"#]).text.hasSuffix("size: unknown tag 'w64'"))
            #expect(f.rpc("files/get_thumbnail_batch", #"{"entries":{}}"#).status == 400)
            #expect(f.rpc("files/get_thumbnail_batch", "{}").status == 400)
            #expect(f.rpc("files/get_thumbnail_batch", #"{"entries":[]}"#, token: "nope-nope-nope-nope").status == 401)
            // A bad entry is a 400 even in a batch that is also too long.
            #expect(batch(f, Array(repeating: #"{"path":"/a.txt"}"#, count: 26) + [#"{"path":"/a.jpg","size":"big"}"#]).status == 400)
        }
    }

    @Test func v2AnswersTheImageWithPreviewResult() throws {
        try withFixture({ servePhotos($0.root) }) { f in
            let r = f.download(#"{"resource":{".tag":"path","path":"/Photos/port.png"},"format":"png","size":"w480h320","mode":"bestfit"}"#,
                               route: "files/get_thumbnail_v2")
            #expect(r.status == 200)
            #expect(Magic.of(Array(r.body)) == "png")
            #expect(dimensions(Array(r.body)) == [320, 480])
            let raw = try #require(r.header("Dropbox-API-Result"))
            #expect(raw.unicodeScalars.allSatisfy { $0.value < 0x7F })
            let result = try JSONSerialization.jsonObject(with: Data(raw.utf8)) as! [String: Any]
            let md = try #require(result["file_metadata"] as? [String: Any])
            #expect(md["name"] as? String == "port.png")
            #expect(md["path_display"] as? String == "/Photos/port.png")

            // Defaults: jpeg, w64h64, strict; the argument may be a URL parameter, by GET.
            let get = f.curl("/2/files/get_thumbnail_v2", ["-G", "-H", "Authorization: Bearer emulator-token", "--data-urlencode",
                                                          #"arg={"resource":{".tag":"path","path":"/Photos/land.jpg"}}"#])
            #expect(get.status == 200)
            #expect(Magic.of(Array(get.body)) == "jpeg")
            #expect(dimensions(Array(get.body)) == [64, 43])

            func v2(_ arg: String) -> HTTPResult { f.download(arg, route: "files/get_thumbnail_v2") }
            #expect(errorTags(v2(#"{"resource":{".tag":"path","path":"/nope.png"}}"#)) == ["path", "not_found"])
            #expect(errorTags(v2(#"{"resource":{".tag":"path","path":"/Photos"}}"#)) == ["path", "not_file"])
            #expect(errorTags(v2(#"{"resource":{".tag":"link","url":"https://www.dropbox.com/s/abc/x.png"}}"#)) == ["not_found"])
            #expect(errorTags(v2(#"{"resource":{".tag":"path","path":"/Photos/land.jpg"},"preserve_transparency":true}"#)) == ["unsupported_output_format"])
            #expect(v2(#"{"resource":{".tag":"path","path":"/Photos/land.jpg"},"size":"w1x1"}"#).status == 400)
            #expect(v2(#"{"resource":{".tag":"path","path":"/Photos/land.jpg"},"size":"w1x1"}"#).text.hasSuffix(#"HTTP header "Dropbox-API-Arg": size: unknown tag 'w1x1'"#))
            #expect(v2(#"{"resource":{".tag":"file","path":"/Photos/land.jpg"}}"#).status == 400)
            #expect(v2(#"{"format":"png"}"#).status == 400)
            let noArg = f.curl("/2/files/get_thumbnail_v2", ["-X", "POST", "-H", "Authorization: Bearer emulator-token"])
            #expect(noArg.status == 400)
        }
    }

    @Test func transparencyIsFlattenedOntoWhiteUnlessKept() throws {
        // Left half fully transparent red, right half opaque blue.
        guard let image = GDImage(trueColorWidth: 64, height: 32) else { Issue.record("libgd made no image"); return }
        let im = image.pointer
        gdImageAlphaBlending(im, 0)
        gdImageSaveAlpha(im, 1)
        gdImageFilledRectangle(im, 0, 0, 31, 31, gdColor(255, 0, 0, alpha: 127))
        gdImageFilledRectangle(im, 32, 0, 63, 31, gdColor(0, 0, 255))
        let png = try #require(encoded { gdImagePngPtr(im, $0) })
        try withFixture({ put($0.root, "clear.png", png) }) { f in
            func pixels(_ bytes: [UInt8]) -> [Int32] {
                guard let decoded = Thumbnailer.decode(bytes) else { return [] }
                return [gdImageGetTrueColorPixel(decoded.pointer, 2, 2), gdImageGetTrueColorPixel(decoded.pointer, 60, 2)]
            }
            let flat = outcomes(batch(f, [#"{"path":"/clear.png","format":"png","mode":"original"}"#]))
            #expect(pixels(flat[0].image ?? []) == [gdColor(255, 255, 255), gdColor(0, 0, 255)])
            let kept = f.download(#"{"resource":{".tag":"path","path":"/clear.png"},"format":"png","mode":"original","preserve_transparency":true}"#,
                                  route: "files/get_thumbnail_v2")
            #expect(kept.status == 200)
            #expect(pixels(Array(kept.body)).map { ($0 >> 24) & 0x7F } == [127, 0])
        }
    }

    @Test func statsCountThumbnailCallsAndNoDownloads() throws {
        try withFixture({ servePhotos($0.root) }) { f in
            #expect(f.curl("/__stats/reset", ["-X", "POST"]).status == 200)
            for _ in 0..<3 { #expect(batch(f, [#"{"path":"/Photos/land.jpg"}"#, #"{"path":"/Photos/port.png"}"#]).status == 200) }
            #expect(f.download(#"{"resource":{".tag":"path","path":"/Photos/land.jpg"}}"#, route: "files/get_thumbnail_v2").status == 200)
            let requests = f.curl("/__stats").json["requests"] as? [String: Int] ?? [:]
            #expect(requests["files/get_thumbnail_batch"] == 3)
            #expect(requests["files/get_thumbnail_v2"] == 1)
            #expect(requests["files/download", default: 0] == 0)
            #expect(f.curl("/__stats").json["download_bytes"] as? Int == 0, "thumbnails are not file bytes")
        }
    }

    @Test func knobsApplyToThumbnails() throws {
        try withFixture({ servePhotos($0.root) }) { f in
            func knobs(_ body: String) { #expect(f.curl("/__admin/knobs", ["-X", "POST", "--data-binary", body]).status == 200) }
            knobs(#"{"fail_rate":1}"#)
            let failed = batch(f, [#"{"path":"/Photos/land.jpg"}"#])
            #expect([429, 500, 503].contains(failed.status))
            #expect([429, 500, 503].contains(f.download(#"{"resource":{".tag":"path","path":"/Photos/land.jpg"}}"#, route: "files/get_thumbnail_v2").status))
            knobs(#"{"fail_rate":0,"truncate_rate":1}"#)
            let cut = f.download(#"{"resource":{".tag":"path","path":"/Photos/land.jpg"},"format":"png","mode":"original"}"#, route: "files/get_thumbnail_v2")
            #expect(cut.curlExit == 18, "body shorter than its Content-Length")
            #expect(cut.body.count < Int(cut.header("Content-Length") ?? "") ?? 0)
            knobs(#"{"truncate_rate":0,"rate_limit":1}"#)
            let statuses = (0..<3).map { _ in batch(f, [#"{"path":"/Photos/land.jpg"}"#]).status }
            #expect(statuses.contains(429))
            knobs(#"{"rate_limit":null,"latency_ms":300}"#)
            let start = ContinuousClock.now
            #expect(batch(f, [#"{"path":"/Photos/small.webp"}"#]).status == 200)
            #expect(ContinuousClock.now - start >= .milliseconds(300))
        }
    }

    @Test func samplePhotosAreRealDeterministicAndVaried() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("photos-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let names = try SamplePhotos.write(count: 9, seed: 42, into: base + "/a/b")
        #expect(names.enumerated().allSatisfy { i, name in name.hasPrefix(String(format: "IMG_%04d.", i + 1)) })
        #expect(Set(names.map { ($0 as NSString).pathExtension }) == ["jpg", "png"])
        let again = try SamplePhotos.write(count: 3, seed: 42, into: base + "/c")
        var shapes: Set<String> = []
        var contents: Set<Data> = []
        for name in names {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: base + "/a/b/" + name))
            let size = try #require(dimensions(Array(bytes)), "\(name) decodes")
            #expect(Magic.of(Array(bytes)) == (name.hasSuffix(".png") ? "png" : "jpeg"))
            #expect(SamplePhotos.sizes.contains { [$0.0, $0.1] == size || [$0.1, $0.0] == size })
            shapes.insert(size[0] > size[1] ? "landscape" : "portrait")
            contents.insert(bytes)
        }
        #expect(shapes == ["landscape", "portrait"])
        #expect(contents.count == names.count, "every photo differs")
        for name in again {
            #expect(try Data(contentsOf: URL(fileURLWithPath: base + "/c/" + name)) == Data(contentsOf: URL(fileURLWithPath: base + "/a/b/" + name)),
                    "photo N depends only on the seed and N")
        }
        #expect(throws: SamplePhotoError.self) { try SamplePhotos.write(count: 1, seed: 1, into: "/proc/no/such/dir") }
    }
}
