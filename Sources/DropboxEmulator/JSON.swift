// The emulator's own JSON: a value type, a writer and a parser. Deliberately independent of the
// client's Codable models (a misreading of the wire contract written once would pass on both sides)
// and of JSONSerialization, whose NSNumber bridging on Linux blurs Bool, Int and Double.

/// A JSON value whose objects keep their key order, so responses read like Dropbox's.
enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.int(let a), .int(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    subscript(key: String) -> JSON? {
        guard case .object(let pairs) = self else { return nil }
        return pairs.first(where: { $0.0 == key })?.1
    }

    var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d == d.rounded() && abs(d) < 9e18: return Int64(d)
        default: return nil
        }
    }
    var isNull: Bool { if case .null = self { return true } else { return false } }
}

// MARK: - Writing

extension JSON {
    /// - Parameter asciiOnly: escape 0x7F and every non-ASCII scalar as `\uXXXX`, which Dropbox
    ///   calls "HTTP header safe" JSON; `Dropbox-API-Result` must be this, because Python's
    ///   http.client decodes header bytes as latin-1.
    func serialized(asciiOnly: Bool = false) -> String {
        String(decoding: serializedBytes(asciiOnly: asciiOnly), as: UTF8.self)
    }

    /// The same text as bytes, for a response body. Written into a byte array: appending to a
    /// String checks and grows its storage on every piece, which made up much of the emulator's
    /// time serving a large recursive listing.
    func serializedBytes(asciiOnly: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(into: &out, asciiOnly: asciiOnly)
        return out
    }

    private func write(into out: inout [UInt8], asciiOnly: Bool) {
        switch self {
        case .null: out += "null".utf8
        case .bool(let b): out += (b ? "true" : "false").utf8
        case .int(let i): out += String(i).utf8
        case .double(let d): out += (d.isFinite ? "\(d)" : "null").utf8
        case .string(let s): JSON.writeString(s, into: &out, asciiOnly: asciiOnly)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out, asciiOnly: asciiOnly)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let pairs):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in pairs.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSON.writeString(key, into: &out, asciiOnly: asciiOnly)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out, asciiOnly: asciiOnly)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ s: String, into out: inout [UInt8], asciiOnly: Bool) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape at all (a thumbnail's megabytes of base64 among them): one
        // pass over the bytes in place, then one append, instead of one append per character.
        var text = s
        let plain = text.withUTF8 { bytes -> Bool in
            guard bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else { return false }
            out.append(contentsOf: bytes)
            return true
        }
        if plain {
            out.append(UInt8(ascii: "\""))
            return
        }
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\"".utf8
            case "\\": out += "\\\\".utf8
            case "\n": out += "\\n".utf8
            case "\r": out += "\\r".utf8
            case "\t": out += "\\t".utf8
            case _ where scalar.value < 0x20:
                appendEscape(UInt16(scalar.value), into: &out)
            case _ where asciiOnly && scalar.value >= 0x7F:
                for unit in String(scalar).utf16 { appendEscape(unit, into: &out) }
            default:
                out += String(scalar).utf8
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private static func appendEscape(_ unit: UInt16, into out: inout [UInt8]) {
        let hex = String(unit, radix: 16)
        out += ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).utf8
    }
}

// MARK: - Parsing

struct JSONParseError: Error, CustomStringConvertible {
    var description: String
}

extension JSON {
    static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSON {
        var parser = Parser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw JSONParseError(description: "trailing data") }
        return value
    }

    static func parse(_ string: String) throws(JSONParseError) -> JSON {
        try parse(Array(string.utf8))
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        mutating func skipWhitespace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        func fail(_ message: String) -> JSONParseError {
            JSONParseError(description: "\(message) at offset \(index)")
        }

        mutating func expect(_ literal: String) throws(JSONParseError) {
            for byte in literal.utf8 {
                guard index < bytes.count, bytes[index] == byte else { throw fail("invalid literal") }
                index += 1
            }
        }

        mutating func parseValue(depth: Int) throws(JSONParseError) -> JSON {
            guard depth < 200 else { throw fail("nesting too deep") }
            guard index < bytes.count else { throw fail("unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: "n"): try expect("null"); return .null
            case UInt8(ascii: "t"): try expect("true"); return .bool(true)
            case UInt8(ascii: "f"): try expect("false"); return .bool(false)
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "["):
                index += 1
                var items: [JSON] = []
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
                while true {
                    skipWhitespace()
                    items.append(try parseValue(depth: depth + 1))
                    skipWhitespace()
                    guard index < bytes.count else { throw fail("unterminated array") }
                    if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                    if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
                    throw fail("expected , or ]")
                }
            case UInt8(ascii: "{"):
                index += 1
                var pairs: [(String, JSON)] = []
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(pairs) }
                while true {
                    skipWhitespace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected key") }
                    let key = try parseString()
                    skipWhitespace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected :") }
                    index += 1
                    skipWhitespace()
                    pairs.append((key, try parseValue(depth: depth + 1)))
                    skipWhitespace()
                    guard index < bytes.count else { throw fail("unterminated object") }
                    if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                    if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(pairs) }
                    throw fail("expected , or }")
                }
            default:
                return try parseNumber()
            }
        }

        mutating func parseNumber() throws(JSONParseError) -> JSON {
            let start = index
            var isInteger = true
            while index < bytes.count {
                let b = bytes[index]
                if (b >= 0x30 && b <= 0x39) || b == UInt8(ascii: "-") || b == UInt8(ascii: "+") {
                    index += 1
                } else if b == UInt8(ascii: ".") || b == UInt8(ascii: "e") || b == UInt8(ascii: "E") {
                    isInteger = false
                    index += 1
                } else {
                    break
                }
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            if isInteger, let i = Int64(text) { return .int(i) }
            if let d = Double(text), !text.isEmpty, text.first != "+" { return .double(d) }
            throw fail("invalid number")
        }

        mutating func parseHex4() throws(JSONParseError) -> UInt16 {
            guard index + 4 <= bytes.count,
                  let v = UInt16(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16)
            else { throw fail("invalid \\u escape") }
            index += 4
            return v
        }

        mutating func parseString() throws(JSONParseError) -> String {
            index += 1  // opening quote
            var raw: [UInt8] = []
            while true {
                guard index < bytes.count else { throw fail("unterminated string") }
                let b = bytes[index]
                index += 1
                switch b {
                case UInt8(ascii: "\""):
                    guard let s = String(validating: raw, as: UTF8.self) else { throw fail("invalid UTF-8") }
                    return s
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { throw fail("bad escape") }
                    let e = bytes[index]
                    index += 1
                    switch e {
                    case UInt8(ascii: "\""): raw.append(0x22)
                    case UInt8(ascii: "\\"): raw.append(0x5C)
                    case UInt8(ascii: "/"): raw.append(0x2F)
                    case UInt8(ascii: "b"): raw.append(0x08)
                    case UInt8(ascii: "f"): raw.append(0x0C)
                    case UInt8(ascii: "n"): raw.append(0x0A)
                    case UInt8(ascii: "r"): raw.append(0x0D)
                    case UInt8(ascii: "t"): raw.append(0x09)
                    case UInt8(ascii: "u"):
                        var unit = try parseHex4()
                        var scalar: Unicode.Scalar?
                        if (0xD800..<0xDC00).contains(unit) {
                            guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                                  bytes[index + 1] == UInt8(ascii: "u") else { throw fail("lone surrogate") }
                            index += 2
                            let low = try parseHex4()
                            guard (0xDC00..<0xE000).contains(low) else { throw fail("bad surrogate pair") }
                            scalar = Unicode.Scalar(0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00))
                        } else {
                            if (0xDC00..<0xE000).contains(unit) { unit = 0xFFFD }
                            scalar = Unicode.Scalar(unit)
                        }
                        guard let scalar else { throw fail("bad escape") }
                        raw.append(contentsOf: Array(String(scalar).utf8))
                    default: throw fail("bad escape")
                    }
                case 0..<0x20:
                    throw fail("control character in string")
                default:
                    raw.append(b)
                }
            }
        }
    }
}
