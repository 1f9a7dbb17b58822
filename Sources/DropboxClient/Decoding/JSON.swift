// A small JSON reader and writer, just enough for Dropbox API v2.
//
// Why not Foundation's JSONSerialization or Codable: sizes are UInt64 and must not pass through
// Double; the `Dropbox-API-Arg` header needs "HTTP header safe" JSON (every non-ASCII character and
// 0x7F as `\uXXXX`, docs/dropbox-api.md §0), which no stock encoder emits; and a hostile or broken
// server must produce a typed error, never a trap, a stack overflow or an unbounded allocation.
// Numbers keep their source text so each field converts with exactly the range it allows.

enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number's text as it appeared (validated JSON number syntax).
    case number(String)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    subscript(key: String) -> JSONValue? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }

    /// A short name of the value's kind, for error messages.
    var kind: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// A JSON object's members in the order they came. A page of `list_folder` holds thousands of
/// small objects, and a dictionary per object (hashing every key with a seeded hasher) was the
/// largest cost of decoding one; a few fields found by a linear scan cost far less. Lookups scan
/// from the end, so a repeated key keeps its last value, as before; appending never searches, so a
/// hostile object with many keys costs linear time to read.
struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    private var members: [(key: String, value: JSONValue)] = []

    init() {}

    init(dictionaryLiteral elements: (String, JSONValue)...) {
        for (key, value) in elements { self[key] = value }
    }

    /// Adds a member as read, without looking for an earlier one of the same key.
    mutating func append(_ key: String, _ value: JSONValue) {
        members.append((key, value))
    }

    subscript(key: String) -> JSONValue? {
        get {
            var i = members.count
            while i > 0 {
                i -= 1
                if members[i].key == key { return members[i].value }
            }
            return nil
        }
        set {
            members.removeAll { $0.key == key }
            if let newValue { members.append((key, newValue)) }
        }
    }

    /// Each key once.
    var keys: [String] {
        var seen = Set<String>()
        return members.reversed().compactMap { seen.insert($0.key).inserted ? $0.key : nil }.reversed()
    }

    static func == (a: JSONObject, b: JSONObject) -> Bool {
        let keys = a.keys
        return keys.count == b.keys.count && keys.allSatisfy { a[$0] == b[$0] }
    }
}

struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    var reason: String
    var offset: Int
    var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

// MARK: - Reading

struct JSONReader {
    /// Deep enough for any Dropbox answer, shallow enough that recursion cannot exhaust the stack
    /// of a FUSE worker thread.
    static let maxDepth = 128

    private let bytes: [UInt8]
    private var index = 0

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONValue {
        var reader = JSONReader(bytes)
        reader.skipWhitespace()
        let value = try reader.readValue(depth: 0)
        reader.skipWhitespace()
        if reader.index != bytes.count { throw reader.failure("trailing characters after the value") }
        return value
    }

    static func parse(_ text: String) throws(JSONSyntaxError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    /// The members named `wanted` of the top-level object, read without building any other member:
    /// a `list_folder` page's cursor is known this way before its thousands of entries are decoded
    /// (`ListingPages`). A repeated key keeps its last value, as `JSONObject` does. nil if the text
    /// is not an object or ends early; the full parse then says what is wrong.
    static func topLevelMembers(of bytes: [UInt8], named wanted: Set<String>) -> [String: JSONValue]? {
        var reader = JSONReader(bytes)
        return try? reader.readTopLevelMembers(wanted)
    }

    private mutating func readTopLevelMembers(_ wanted: Set<String>) throws(JSONSyntaxError) -> [String: JSONValue] {
        skipWhitespace()
        guard current == UInt8(ascii: "{") else { throw failure("expected an object") }
        index += 1
        var found: [String: JSONValue] = [:]
        skipWhitespace()
        if current == UInt8(ascii: "}") { return found }
        while true {
            let key = try readKey()
            if wanted.contains(key) {
                found[key] = try readValue(depth: 1)
            } else {
                try skipValue()
            }
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): return found
            default: throw failure("expected ',' or '}'")
            }
        }
    }

    /// Steps over one value, looking only at what finding its end needs (brackets and strings);
    /// no recursion, so any nesting costs no stack.
    private mutating func skipValue() throws(JSONSyntaxError) {
        var depth = 0
        while let c = current {
            switch c {
            case UInt8(ascii: "\""):
                index += 1
                while true {
                    guard let s = current else { throw failure("unterminated string") }
                    index += s == UInt8(ascii: "\\") ? 2 : 1
                    if s == UInt8(ascii: "\"") { break }
                }
                if depth == 0 { return }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if depth == 0 { return }    // the end of the object around a number or literal
                depth -= 1
                index += 1
                if depth == 0 { return }
            case UInt8(ascii: ","), 0x20, 0x09, 0x0A, 0x0D:
                if depth == 0 { return }
                index += 1
            default:
                index += 1
            }
        }
        throw failure("unexpected end of input")
    }

    private func failure(_ reason: String) -> JSONSyntaxError {
        JSONSyntaxError(reason: reason, offset: index)
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func expect(_ literal: StaticString) throws(JSONSyntaxError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw failure("unexpected end of input") }
        for i in 0..<count where bytes[index + i] != literal.utf8Start[i] {
            throw failure("invalid literal")
        }
        index += count
    }

    private mutating func readValue(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth < Self.maxDepth else { throw failure("nested deeper than \(Self.maxDepth)") }
        guard let byte = current else { throw failure("unexpected end of input") }
        switch byte {
        case UInt8(ascii: "{"): return try readObject(depth: depth)
        case UInt8(ascii: "["): return try readArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"): try expect("true"); return .bool(true)
        case UInt8(ascii: "f"): try expect("false"); return .bool(false)
        case UInt8(ascii: "n"): try expect("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try readNumber())
        default: throw failure("unexpected character")
        }
    }

    /// A member's key and the colon after it, leaving the reader at the member's value.
    private mutating func readKey() throws(JSONSyntaxError) -> String {
        skipWhitespace()
        guard current == UInt8(ascii: "\"") else { throw failure("expected a key") }
        let key = try readString()
        skipWhitespace()
        guard current == UInt8(ascii: ":") else { throw failure("expected ':'") }
        index += 1
        skipWhitespace()
        return key
    }

    private mutating func readObject(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        index += 1  // {
        var fields = JSONObject()
        skipWhitespace()
        if current == UInt8(ascii: "}") { index += 1; return .object(fields) }
        while true {
            let key = try readKey()
            fields.append(key, try readValue(depth: depth + 1))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return .object(fields)
            default: throw failure("expected ',' or '}'")
            }
        }
    }

    private mutating func readArray(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        index += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            elements.append(try readValue(depth: depth + 1))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return .array(elements)
            default: throw failure("expected ',' or ']'")
            }
        }
    }

    private mutating func readNumber() throws(JSONSyntaxError) -> String {
        let start = index
        if current == UInt8(ascii: "-") { index += 1 }
        guard let first = current, isDigit(first) else { throw failure("expected a digit") }
        if first == UInt8(ascii: "0") {
            index += 1
        } else {
            while let c = current, isDigit(c) { index += 1 }
        }
        if current == UInt8(ascii: ".") {
            index += 1
            guard let c = current, isDigit(c) else { throw failure("expected a digit after '.'") }
            while let c = current, isDigit(c) { index += 1 }
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard let c = current, isDigit(c) else { throw failure("expected a digit in the exponent") }
            while let c = current, isDigit(c) { index += 1 }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    private mutating func readString() throws(JSONSyntaxError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes, so the bytes between the quotes are the string; when they are
        // all ASCII they need no UTF-8 validation either (most names and every key and id).
        var highBits: UInt8 = 0
        while let c = current, c != UInt8(ascii: "\""), c != UInt8(ascii: "\\") {
            guard c >= 0x20 else { throw failure("control character in a string") }
            highBits |= c
            index += 1
        }
        guard let stop = current else { throw failure("unterminated string") }
        if stop == UInt8(ascii: "\""), highBits < 0x80 {
            let end = index
            index += 1  // closing quote
            return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<end]), as: UTF8.self) }
        }
        var utf8 = Array(bytes[start..<index])
        if stop == UInt8(ascii: "\\") {
            while true {
                guard let c = current else { throw failure("unterminated string") }
                if c == UInt8(ascii: "\"") { break }
                guard c >= 0x20 else { throw failure("control character in a string") }
                index += 1
                guard c == UInt8(ascii: "\\") else { utf8.append(c); continue }
                guard let escaped = current else { throw failure("unterminated escape") }
                index += 1
                switch escaped {
                case UInt8(ascii: "\""): utf8.append(0x22)
                case UInt8(ascii: "\\"): utf8.append(0x5C)
                case UInt8(ascii: "/"): utf8.append(0x2F)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"): utf8.append(contentsOf: try readUnicodeEscape())
                default: throw failure("unknown escape")
                }
            }
        }
        index += 1  // closing quote
        guard let string = String(validating: utf8, as: UTF8.self) else {
            throw JSONSyntaxError(reason: "string is not valid UTF-8", offset: start)
        }
        return string
    }

    /// Reads the XXXX of `\uXXXX` (the `\u` already consumed), joining a surrogate pair.
    private mutating func readUnicodeEscape() throws(JSONSyntaxError) -> [UInt8] {
        let high = try readHex4()
        var scalarValue = UInt32(high)
        if (0xD800...0xDBFF).contains(high) {
            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw failure("unpaired surrogate") }
            index += 2
            let low = try readHex4()
            guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired surrogate") }
            scalarValue = 0x10000 + ((UInt32(high) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
        } else if (0xDC00...0xDFFF).contains(high) {
            throw failure("unpaired surrogate")
        }
        guard let scalar = Unicode.Scalar(scalarValue) else { throw failure("invalid code point") }
        return Array(String(Character(scalar)).utf8)
    }

    private mutating func readHex4() throws(JSONSyntaxError) -> UInt16 {
        guard index + 4 <= bytes.count else { throw failure("short \\u escape") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let c = bytes[index]
            let digit: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = c - UInt8(ascii: "A") + 10
            default: throw failure("bad hex digit in \\u escape")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }
}

// MARK: - Writing

enum JSONWriter {
    /// Encodes `value`. Object keys are sorted so the output is deterministic. With `headerSafe`,
    /// the output is pure printable ASCII: 0x7F and every non-ASCII scalar become `\uXXXX` (a
    /// surrogate pair above U+FFFF), as Dropbox requires for JSON in HTTP headers (jsonenc).
    static func encode(_ value: JSONValue, headerSafe: Bool = false) -> String {
        var out = ""
        write(value, into: &out, headerSafe: headerSafe)
        return out
    }

    private static func write(_ value: JSONValue, into out: inout String, headerSafe: Bool) {
        switch value {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let text): out += text
        case .string(let s): writeString(s, into: &out, headerSafe: headerSafe)
        case .array(let elements):
            out += "["
            for (i, element) in elements.enumerated() {
                if i > 0 { out += "," }
                write(element, into: &out, headerSafe: headerSafe)
            }
            out += "]"
        case .object(let fields):
            out += "{"
            for (i, key) in fields.keys.sorted().enumerated() {   // keys: each once, its last value
                if i > 0 { out += "," }
                writeString(key, into: &out, headerSafe: headerSafe)
                out += ":"
                write(fields[key]!, into: &out, headerSafe: headerSafe)
            }
            out += "}"
        }
    }

    private static func writeString(_ s: String, into out: inout String, headerSafe: Bool) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar.value {
            case 0x22: out += "\\\""
            case 0x5C: out += "\\\\"
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0x08: out += "\\b"
            case 0x0C: out += "\\f"
            case 0x00..<0x20: out += hexEscape(UInt16(scalar.value))
            case 0x7F... where headerSafe:
                for unit in String(scalar).utf16 { out += hexEscape(unit) }
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    private static func hexEscape(_ unit: UInt16) -> String {
        let hex = String(unit, radix: 16)
        return "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
    }
}

extension JSONValue {
    static func int<T: BinaryInteger>(_ n: T) -> JSONValue { .number(String(n)) }
}
