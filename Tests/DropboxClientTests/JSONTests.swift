@testable import DropboxClient
import TestSupport
import Testing

@Suite("JSON reader and writer")
struct JSONTests {
    @Test func readsNestedValues() throws {
        let v = try JSONReader.parse(#" {"a": [1, -2.5e3, true, false, null, "x"], "b": {}} "#)
        #expect(v == .object(["a": .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null,
                                         .string("x")]), "b": .object([:])]))
    }

    @Test func keepsHugeNumbersAsText() throws {
        let v = try JSONReader.parse("[18446744073709551616, 123456789012345678901234567890]")
        #expect(v == .array([.number("18446744073709551616"), .number("123456789012345678901234567890")]))
    }

    @Test func decodesEscapesAndSurrogatePairs() throws {
        let v = try JSONReader.parse(#""a\"b\\c\/d\n\t\u00fc\ud83d\ude00\u0000""#)
        #expect(v == .string("a\"b\\c/d\n\tü😀\u{0}"))
        #expect(try JSONReader.parse("\"Grüße 日本 😀\"") == .string("Grüße 日本 😀"))
    }

    @Test(arguments: [
        "", "[", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "tru", "01", "1.", "-", "1e", "\"abc",
        "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"", "\"\\x\"", "\"a\nb\"", "[1] [2]", "{1:2}", "nul",
        "\"\\u12\"",
    ])
    func rejectsInvalidText(_ text: String) {
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func deepNestingIsAnErrorNotACrash() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse(deep) }
        let ok = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect((try? JSONReader.parse(ok)) != nil)
    }

    @Test func headerSafeOutputIsPrintableASCII() {
        let s = JSONWriter.encode(.object(["path": .string("/Grüße/😀 \u{7F}\"\\\n\u{1}")]), headerSafe: true)
        #expect(s == #"{"path":"/Gr\u00fc\u00dfe/\ud83d\ude00 \u007f\"\\\n\u0001"}"#)
        #expect(s.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F })
    }

    @Test func plainOutputKeepsUTF8() {
        #expect(JSONWriter.encode(.string("ü😀\u{7F}")) == "\"ü😀\u{7F}\"")
    }

    @Test(arguments: ["", "plain", "ü", "😀", "a\"b\\c", "\u{0}\u{1F}\u{7F}\u{80}\u{FFFF}\u{10FFFF}",
                      "e\u{301}", "'quote' -dash \u{2028}"])
    func roundTrips(_ text: String) throws {
        for safe in [false, true] {
            let encoded = JSONWriter.encode(.object(["k": .string(text), "n": .int(UInt64.max), "b": .bool(true)]),
                                            headerSafe: safe)
            let back = try JSONReader.parse(encoded)
            #expect(back["k"] == .string(text))
            #expect(back["n"] == .number("18446744073709551615"))
        }
    }
}

@Suite("Dropbox timestamps")
struct TimestampTests {
    @Test(arguments: [
        ("1970-01-01T00:00:00Z", Int64(0)),
        ("2015-05-12T15:50:38Z", 1_431_445_838),
        ("2000-02-29T12:00:00Z", 951_825_600),
        ("1969-12-31T23:59:59Z", -1),
        ("2038-01-19T03:14:08Z", 2_147_483_648),
        ("9999-12-31T23:59:59Z", 253_402_300_799),
        ("0001-01-01T00:00:00Z", -62_135_596_800),
        ("2016-12-31T23:59:60Z", 1_483_228_800),
    ])
    func parses(_ text: String, _ seconds: Int64) {
        #expect(DropboxTimestamp.parse(text) == seconds)
    }

    @Test(arguments: [
        "", "2015-05-12T15:50:38", "2015-05-12T15:50:38.Z", "2015-05-12 15:50:38Z", "2015-05-12T15:50:38+0000",
        "2001-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2015-13-01T00:00:00Z", "2015-00-01T00:00:00Z",
        "2015-04-31T00:00:00Z", "2015-05-00T00:00:00Z", "2015-05-12T24:00:00Z", "2015-05-12T23:60:00Z",
        "2015-05-12T23:59:61Z", "+015-05-12T15:50:38Z", "2015-5-12T15:50:38Zx", "２０15-05-12T15:50:38Z",
    ])
    func rejects(_ text: String) {
        #expect(DropboxTimestamp.parse(text) == nil)
    }

    @Test func formatIsTheInverse() {
        var s: Int64 = -62_135_596_800
        while s < 253_402_300_799 {
            #expect(DropboxTimestamp.parse(DropboxTimestamp.format(s)) == s)
            s += 7_654_321_987 / 13
        }
        #expect(DropboxTimestamp.format(1_431_445_838) == "2015-05-12T15:50:38Z")
    }
}

@Suite("Reading a page's cursor before its entries")
struct EarlyCursorTests {
    @Test func findsTheMembersWhereverTheyAreAndStepsOverTheRest() {
        let text = #"""
            {"entries": [{"name": "a \"quoted\" ]}[{ name", "n": -1.5e3, "t": true, "z": null, "x": [[], {}, [{"a": "\\"}]]}],
             "cursor": "AAF-cur_sor", "nested": {"cursor": "not this one", "has_more": "no"}, "has_more": true}
            """#
        let found = JSONReader.topLevelMembers(of: Array(text.utf8), named: ["cursor", "has_more"])
        #expect(found == ["cursor": .string("AAF-cur_sor"), "has_more": .bool(true)])
        let first = Decode.listFolderContinuation(Array(#"{"has_more":false,"cursor":"c1","entries":[]}"#.utf8))
        #expect(first?.cursor == "c1" && first?.hasMore == false)
    }

    @Test func aRepeatedKeyKeepsItsLastValueAsTheFullDecodeDoes() throws {
        let body = Array(#"{"cursor": "old", "entries": [], "has_more": false, "cursor": "new"}"#.utf8)
        #expect(Decode.listFolderContinuation(body)?.cursor == "new")
        #expect(try Decode.listFolderPage(body).cursor == "new")
    }

    @Test(arguments: [
        "", "[]", "{", #"{"cursor": "c""#, #"{"cursor": "c", "has_more": 1}"#, #"{"cursor": "", "has_more": true}"#,
        #"{"has_more": true}"#, #"{"entries": ["unterminated], "cursor": "c", "has_more": true}"#,
        #"{"entries": [1, 2 "cursor": "c", "has_more": true}"#,
    ])
    func unreadableTextGivesNoEarlyCursor(_ text: String) {
        #expect(Decode.listFolderContinuation(Array(text.utf8)) == nil)
    }

    @Test func deepNestingIsSteppedOverWithoutRecursion() {
        let deep = String(repeating: "[", count: 200_000) + String(repeating: "]", count: 200_000)
        let text = #"{"entries": "# + deep + #", "cursor": "c", "has_more": false}"#
        #expect(Decode.listFolderContinuation(Array(text.utf8))?.cursor == "c")
    }
}
