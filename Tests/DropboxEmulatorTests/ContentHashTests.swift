@testable import DropboxEmulator
import Testing

@Suite struct ContentHashTests {
    @Test func vectors() {
        #expect(ContentHash.hex(of: [UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(ContentHash.hex(of: Array("a".utf8)) == "bf5d3affb73efd2ec6c36ad3112dd933efed63c4e1cbffcfa88e2759c144f2d8")
        let block = [UInt8](repeating: 0, count: 4 * 1024 * 1024)
        #expect(ContentHash.hex(of: block) == "c7e946d101855255d919ef0c70718633adf77d3dfb3adeeecf5d0cb4e951be58")
        #expect(ContentHash.hex(of: block + [0]) == "14a4d47f23a30177885d9820122f17d2d3a55fe63f7f5c27b95f689e0b2accd6")
    }

    @Test func chunkingDoesNotMatter() {
        let data = (0..<(9 * 1024 * 1024 + 17)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var h = ContentHash.Hasher()
        var i = 0
        while i < data.count { let n = min(1_000_003, data.count - i); h.update(data[i..<(i + n)]); i += n }
        #expect(h.finalize() == ContentHash.hex(of: data))
    }

    @Test func servedHashMatches() throws {
        try withFixture(files: ["a.txt": "a"]) { f in
            let r = f.rpc("files/get_metadata", #"{"path":"/a.txt"}"#)
            #expect(r.json["content_hash"] as? String == "bf5d3affb73efd2ec6c36ad3112dd933efed63c4e1cbffcfa88e2759c144f2d8")
        }
    }
}

@Suite struct JSONTests {
    @Test func headerSafeEscaping() throws {
        let value = JSON.object([("n", .string("é\u{7F}😀\"\\\n"))])
        #expect(value.serialized(asciiOnly: true) == #"{"n":"\u00e9\u007f\ud83d\ude00\"\\\n"}"#)
        #expect(try JSON.parse(value.serialized(asciiOnly: true)) == value)
        #expect(try JSON.parse(value.serialized()) == value)
    }

    @Test func parsesNumbersAndLiterals() throws {
        let v = try JSON.parse(#" {"a":[1,-2.5,true,false,null],"b":{"c":"d"}} "#)
        #expect(v["a"] == .array([.int(1), .double(-2.5), .bool(true), .bool(false), .null]))
        #expect(v["b"]?["c"]?.stringValue == "d")
        #expect(throws: JSONParseError.self) { try JSON.parse("{") }
        #expect(throws: JSONParseError.self) { try JSON.parse("[1] x") }
    }
}
