// Seeded fuzzing of the response decoders (issue 8): well-formed answers for list_folder pages,
// metadata, errors and downloads are mutated (truncated, bytes flipped, values swapped for other
// JSON types, huge strings, deep nesting, bad Content-Range and Dropbox-API-Result headers) and
// fed to the client through a fake transport. Each case must end in a value or a typed
// `DropboxError`, never a crash, and a download never hands on more bytes than were asked for.
// Fixed seeds, so a failure replays; a case count and a time bound keep it cheap on CI.

import Testing
@testable import DropboxClient
import Synchronization
import TestSupport

private struct Mutator {
    var rng: SeededGenerator

    mutating func int(_ range: Range<Int>) -> Int { Int.random(in: range, using: &rng) }
    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }

    mutating func name() -> String {
        ["a.txt", "", ".", "..", "a/b", "nul\u{0}x", String(repeating: "L", count: 300), "ÄÖ", "\u{FFFD}",
         "x\\y", "Case.TXT", "case.txt"][int(0..<12)]
    }

    mutating func anyValue(depth: Int = 0) -> JSONValue {
        switch int(0..<(depth > 3 ? 6 : 8)) {
        case 0: return .null
        case 1: return .bool(chance(0.5))
        case 2: return .number("\(Int64.random(in: Int64.min...Int64.max, using: &rng))")
        case 3: return .number(["-1.5", "1e300", "0.1", "-0", "18446744073709551616", "1e-400"][int(0..<6)])
        case 4: return .string(name())
        // Now and then a huge one (past curl-sized chunks, past any sane name).
        case 5: return .string(String(repeating: "z", count: chance(0.05) ? 70_000 : int(0..<300)))
        case 6: return .array((0..<int(0..<4)).map { _ in anyValue(depth: depth + 1) })
        default: return .object(["k": anyValue(depth: depth + 1), ".tag": .string(name())])
        }
    }

    mutating func metadata() -> JSONValue {
        let name = name()
        let path = "/dir/" + name
        switch int(0..<3) {
        case 0:
            return .object([".tag": .string("file"), "name": .string(name), "path_display": .string(path),
                            "path_lower": .string(path.lowercased()), "id": .string("id:\(int(0..<1000))"),
                            "rev": .string("015\(int(0..<1000))"), "size": .number("\(int(0..<5_000_000))"),
                            "server_modified": .string(["2024-01-02T03:04:05Z", "2024-13-40T99:99:99Z", "x"][int(0..<3)]),
                            "client_modified": .string("2024-01-02T03:04:05Z"),
                            "content_hash": .string(String(repeating: "a", count: 64)),
                            "is_downloadable": .bool(chance(0.8))])
        case 1:
            return .object([".tag": .string("folder"), "name": .string(name), "path_display": .string(path),
                            "path_lower": .string(path.lowercased()), "id": .string("id:\(int(0..<1000))")])
        default:
            return .object([".tag": .string("deleted"), "name": .string(name), "path_display": .string(path),
                            "path_lower": .string(path.lowercased())])
        }
    }

    mutating func page() -> JSONValue {
        .object(["entries": .array((0..<int(0..<6)).map { _ in metadata() }), "cursor": .string("c\(int(0..<9))"),
                 "has_more": .bool(chance(0.3))])
    }

    mutating func errorBody() -> JSONValue {
        .object(["error_summary": .string(["path/not_found/..", "reset/", "too_many_requests/", "x"][int(0..<4)]),
                 "error": .object([".tag": .string(["path", "reset", "too_many_requests", "other"][int(0..<4)]),
                                   "path": .object([".tag": .string("not_found")]),
                                   "retry_after": .number("\(int(0..<3))")])])
    }

    /// Replaces, removes or retypes values at random points of `value`.
    mutating func mutate(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let fields):
            var fields = fields
            for key in fields.keys.sorted() {  // sorted: a seed must replay
                if chance(0.15) { fields[key] = anyValue() }
                else if chance(0.05) { fields[key] = nil }
                else if let v = fields[key] { fields[key] = mutate(v) }
            }
            if chance(0.05) { fields[name()] = anyValue() }
            return .object(fields)
        case .array(let elements):
            var elements = elements.map { chance(0.1) ? anyValue() : mutate($0) }
            if chance(0.1), !elements.isEmpty { elements.remove(at: int(0..<elements.count)) }
            return .array(elements)
        default:
            return chance(0.1) ? anyValue() : value
        }
    }

    /// Text-level damage: truncation, flipped bytes, a deep nest, or the body of another type.
    mutating func damage(_ text: String) -> [UInt8] {
        var bytes = Array(text.utf8)
        switch int(0..<6) {
        case 0: if !bytes.isEmpty { bytes = Array(bytes.prefix(int(0..<bytes.count))) }
        case 1: for _ in 0..<int(1..<6) where !bytes.isEmpty { bytes[int(0..<bytes.count)] = UInt8(int(0..<256)) }
        case 2: bytes = Array(String(repeating: "[", count: int(100..<2000)).utf8)
        case 3: bytes = Array(["", "null", "[]", "\"s\"", "1e999", "{\"a\":", "\u{FEFF}{}", "{}{}"][int(0..<8)].utf8)
        default: break
        }
        return bytes
    }

    mutating func header() -> String {
        ["bytes 0-9/10", "bytes 0-9/*", "bytes 5-2/10", "bytes 0-18446744073709551615/5", "bytes -1-3/4", "bytes */10",
         "bytes 0-99999999999999999999/1", "garbage", "", "bytes 0-4/10", "bytes 10-19/20"][int(0..<11)]
    }
}

/// The answer the fake transport gives next; in a struct, not as the `Mutex`'s own argument
/// (`Sinks` in DropboxFilesystem.swift says why).
private final class Scripted: Sendable {
    struct Answer { var respond: (@Sendable (HTTPRequest) -> HTTPResponse)? }
    let answer = Mutex(Answer())
}

@Suite("Fuzzing the response decoders")
struct DecoderFuzzTests {
    @Test func hostileAnswersFailWithTypedErrorsOrDecode() {
        var m = Mutator(rng: SeededGenerator(seed: 0x8_D8))
        let clock = ContinuousClock()
        let start = clock.now
        var cases = 0, decoded = 0, failed = 0
        let scripted = Scripted()
        let transport = FakeTransport { request, _ in
            scripted.answer.withLock { $0.respond! }(request)
        }
        let client = DropboxHTTPClient(
            endpoints: DropboxEndpoints(api: "https://api.test", content: "https://content.test", notify: "https://notify.test"),
            tokens: StaticAccessToken("t"), transport: transport,
            retryPolicy: RetryPolicy(maxAttempts: 2, baseDelay: 0, maxDelay: 0, callDeadline: 60, sleep: { _ in }))
        while cases < 20_000 && clock.now - start < .seconds(8) {
            cases += 1
            let status = [200, 200, 200, 206, 409, 429, 500, 400, 401, 416, 302][m.int(0..<11)]
            let body: JSONValue = [m.page(), m.metadata(), m.errorBody(), m.anyValue()][m.int(0..<4)]
            let text = JSONWriter.encode(m.chance(0.7) ? m.mutate(body) : body)
            let bytes = m.damage(text)
            var headers: [String: String] = ["content-type": "application/json"]
            if m.chance(0.5) { headers["content-range"] = m.header() }
            if m.chance(0.5) { headers["dropbox-api-result"] = String(decoding: m.damage(JSONWriter.encode(m.mutate(m.metadata()))), as: UTF8.self) }
            if m.chance(0.2) { headers["retry-after"] = ["1", "-5", "x", "99999999999999999999"][m.int(0..<4)] }
            let answer = HTTPResponse(status: status, headers: headers, body: bytes)
            scripted.answer.withLock { $0.respond = { _ in answer } }
            let outcome: DropboxError?
            switch m.int(0..<6) {
            case 0: outcome = thrown { () throws(DropboxError) in try client.listFolder(path: "", recursive: true, limit: 10) }
            case 1: outcome = thrown { () throws(DropboxError) in try client.listFolderContinue(cursor: "c") }
            case 2: outcome = thrown { () throws(DropboxError) in try client.metadata(path: "/a") }
            case 3: outcome = thrown { () throws(DropboxError) in try client.longpoll(cursor: "c", timeout: 30) }
            case 4:
                let range = UInt64(m.int(0..<20))..<UInt64(m.int(20..<40))
                do throws(DropboxError) {
                    let got = try client.download(path: "/a", range: range)
                    #expect(got.count <= range.count)
                    outcome = nil
                } catch { outcome = error }
            default:
                let range = UInt64(m.int(0..<20))..<UInt64(m.int(20..<40))
                var handed = 0
                do throws(DropboxError) {
                    let got = try client.download(path: "/a", range: range) { chunk in handed += chunk.count; return true }
                    #expect(handed <= range.count && got <= UInt64(range.count))
                    outcome = nil
                } catch { outcome = error }
            }
            if outcome == nil { decoded += 1 } else { failed += 1 }
        }
        #expect(cases >= 2_000, "only \(cases) cases ran in the time bound")
        #expect(decoded > 0 && failed > 0)
    }

    @Test func decodeFunctionsSurviveRawNoise() {
        var m = Mutator(rng: SeededGenerator(seed: 42))
        let clock = ContinuousClock()
        let start = clock.now
        var cases = 0
        while cases < 20_000 && clock.now - start < .seconds(8) {
            cases += 1
            let text = JSONWriter.encode(m.mutate([m.page(), m.metadata(), m.errorBody()][m.int(0..<3)]))
            let bytes = m.damage(text)
            _ = thrown { () throws(DropboxError) in try Decode.listFolderPage(bytes) }
            _ = thrown { () throws(DropboxError) in try Decode.metadata(try Decode.json(bytes, context: "f"), context: "f") }
            _ = thrown { () throws(DropboxError) in try Decode.longpoll(bytes) }
            _ = ErrorDecoding.error(for: HTTPResponse(status: [400, 401, 409, 429, 500][m.int(0..<5)],
                                                      headers: ["retry-after": m.header()], body: bytes))
            _ = ContentRange.parse(m.header())
        }
        #expect(cases >= 2_000, "only \(cases) cases ran in the time bound")
    }
}
