// get_thumbnail_batch on the wire: an RPC on the content host, one outcome per entry in order,
// base64 decoded here, and the answers a hostile or confused server might give.

@testable import DropboxClient
import TestSupport
import Testing

@Suite("Thumbnail batches")
struct ThumbnailClientTests {
    let requests = [
        ThumbnailRequest(path: "rev:0123456789a", format: .png, size: .w128h128, mode: .strict),
        ThumbnailRequest(path: "/b.jpg", format: .png, size: .w480h320, mode: .bestfit),
        ThumbnailRequest(path: "/c.txt", format: .png, size: .w128h128, mode: .strict),
    ]

    @Test func batchShapeAndOutcomes() throws {
        let fake = FakeTransport { _, _ in
            response(#"""
                {"entries":[
                  {".tag":"success","metadata":{},"thumbnail":"iVBORw0KGgo="},
                  {".tag":"failure","failure":{".tag":"path","path":{".tag":"not_found"}}},
                  {".tag":"failure","failure":{".tag":"unsupported_extension"}}]}
                """#)
        }
        let outcomes = try makeClient(fake).thumbnails(requests)
        #expect(outcomes == [.image([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]), .failed(["path", "not_found"]),
                             .failed(["unsupported_extension"])])
        let r = try #require(fake.requests.first)
        #expect(r.url == "https://content.test/2/files/get_thumbnail_batch", "an RPC, but on the content host")
        #expect(r.header("Content-Type") == "application/json")
        #expect(r.maxResponseBytes == DropboxHTTPClient.maxThumbnailBatchBytes)
        let entries = try JSONReader.parse(r.body)["entries"]
        guard case .array(let list)? = entries else { Issue.record("no entries array"); return }
        #expect(list.count == 3)
        #expect(list[1]["path"] == .string("/b.jpg"))
        #expect(list[1]["format"] == .string("png"))
        #expect(list[1]["size"] == .string("w480h320"))
        #expect(list[1]["mode"] == .string("bestfit"))
    }

    @Test func tooManyFilesIsARouteErrorAndNeverSent() throws {
        let fake = FakeTransport { _, _ in response(409, #"{"error_summary":"too_many_files/..","error":{".tag":"too_many_files"}}"#) }
        let many = Array(repeating: requests[0], count: maxThumbnailBatch + 1)
        #expect({ if case .badInput? = thrown({ () throws(DropboxError) in try makeClient(fake).thumbnails(many) }) { true } else { false } }())
        #expect(fake.requests.isEmpty)
        let error = thrown { () throws(DropboxError) in try makeClient(fake).thumbnails(Array(requests.prefix(1))) }
        #expect(error?.isRoute("too_many_files") == true)
        #expect(try makeClient(fake).thumbnails([]) == [], "nothing to ask, nothing sent")
    }

    @Test func confusedAnswersAreMalformedNotCrashes() throws {
        let answers = [
            #"{"entries":[{".tag":"success","thumbnail":"iVBORw0KGgo="}]}"#,                    // one entry for three
            #"{"entries":[{".tag":"success","thumbnail":"!!!"},{".tag":"other"},{".tag":"other"}]}"#,   // bad base64
            #"{"entries":"nope"}"#,
        ]
        for answer in answers {
            let fake = FakeTransport { _, _ in response(answer) }
            let error = thrown { () throws(DropboxError) in try makeClient(fake).thumbnails(requests) }
            guard case .malformedResponse? = error else { Issue.record("\(answer): \(String(describing: error))"); continue }
        }
        // A tag this client does not know fails that entry only (an open union).
        let fake = FakeTransport { _, _ in
            response(#"{"entries":[{".tag":"pending"},{".tag":"failure","failure":{}},{".tag":"success","thumbnail":""}]}"#)
        }
        #expect(try makeClient(fake).thumbnails(requests) == [.failed(["pending"]), .failed(["other"]), .image([])])
    }

    @Test func base64DecodesWhatEncodersWrite() {
        #expect(Base64.decode("") == [])
        #expect(Base64.decode("TWFu") == Array("Man".utf8))
        #expect(Base64.decode("TWE=") == Array("Ma".utf8))
        #expect(Base64.decode("TQ==") == Array("M".utf8))
        #expect(Base64.decode("TQ") == Array("M".utf8), "padding is optional")
        #expect(Base64.decode("TW\nFu") == Array("Man".utf8), "line breaks are skipped")
        #expect(Base64.decode("+/+/") == [0xFB, 0xFF, 0xBF])
        #expect(Base64.decode("TQ==TQ==") == nil, "nothing after padding")
        #expect(Base64.decode("T*==") == nil)
        #expect(Base64.decode("TR==") == nil, "stray bits in the last byte")
    }
}
