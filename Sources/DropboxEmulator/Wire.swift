import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

/// One complete HTTP request, as the routes see it.
struct EmulatorRequest: Sendable {
    var method: HTTPMethod
    var path: String
    var query: [String: String]
    var headers: HTTPHeaders
    var body: [UInt8]
}

/// A file body to stream: the descriptor is owned by the reply and closed once written.
struct FileBody: Sendable {
    var fd: Int32
    var offset: Int64
    var length: Int64
}

/// What a route answers. `later` is for longpoll, which completes from another thread.
enum Reply: Sendable {
    case json(HTTPResponseStatus, JSON, HTTPHeaders)
    case text(HTTPResponseStatus, String, HTTPHeaders)
    case empty(HTTPResponseStatus, HTTPHeaders)
    case file(HTTPResponseStatus, HTTPHeaders, FileBody)
    /// A download-style body made in memory (a thumbnail); the headers carry its Content-Type.
    case bytes(HTTPResponseStatus, HTTPHeaders, [UInt8])
    case later(EventLoopFuture<Reply>)

    static func json(_ value: JSON, status: HTTPResponseStatus = .ok) -> Reply { .json(status, value, [:]) }

    /// 400 as Dropbox sends it: plain text naming the route.
    static func badInput(_ route: String, _ message: String) -> Reply {
        .text(.badRequest, "Error in call to API function \"\(route)\": \(message)", [:])
    }

    /// 409 with a nested tag path, e.g. ["path", "not_found"] ->
    /// {".tag":"path","path":{".tag":"not_found"}}.
    static func routeError(_ tags: [String], extra: [(String, JSON)] = []) -> Reply {
        .json(.conflict, .object([
            ("error_summary", .string(tags.joined(separator: "/") + "/" + String(repeating: ".", count: 1 + tags.count % 3))),
            ("error", errorValue(tags, extra: extra)),
        ]), [:])
    }

    /// A union value from its tag path, each tag nested under the one before it; `extra` goes
    /// into the innermost object.
    static func errorValue(_ tags: [String], extra: [(String, JSON)] = []) -> JSON {
        guard let first = tags.first else { return .null }
        var pairs: [(String, JSON)] = [(".tag", .string(first))]
        if tags.count > 1 { pairs.append((first, errorValue(Array(tags.dropFirst()), extra: extra))) } else { pairs += extra }
        return .object(pairs)
    }

    /// The tag path of a 409 route error, the inverse of `routeError`; nil for any other reply.
    var routeErrorTags: [String]? {
        guard case .json(.conflict, let body, _) = self else { return nil }
        var tags: [String] = []
        var node = body["error"]
        while let tag = node?[".tag"]?.stringValue {
            tags.append(tag)
            node = node?[tag]
        }
        return tags
    }

    static func authError(_ tag: String) -> Reply {
        .json(.unauthorized, .object([
            ("error_summary", .string(tag + "/..")),
            ("error", .object([(".tag", .string(tag))])),
        ]), ["WWW-Authenticate": "Bearer realm=\"Dropbox-API\""])
    }

    /// 401 for a token that lacks the route's scope (spec `auth.stone` `AuthError.missing_scope`).
    static func missingScope(_ required: String) -> Reply {
        .json(.unauthorized, .object([
            ("error_summary", .string("missing_scope/..")),
            ("error", .object([(".tag", .string("missing_scope")), ("required_scope", .string(required))])),
        ]), ["WWW-Authenticate": "Bearer realm=\"Dropbox-API\""])
    }

    static func rateLimited(retryAfter: Int = 1) -> Reply {
        .json(.tooManyRequests, .object([
            ("error_summary", .string("too_many_requests/..")),
            ("error", .object([
                ("reason", .object([(".tag", .string("too_many_requests"))])),
                ("retry_after", .int(Int64(retryAfter))),
            ])),
        ]), ["Retry-After": String(retryAfter)])
    }
}

/// `%Y-%m-%dT%H:%M:%SZ` in UTC, no fraction: Python's SDK parses exactly this with strptime.
func dropboxTimestamp(_ seconds: Int) -> String {
    var t = time_t(seconds)
    var parts = tm()
    gmtime_r(&t, &parts)
    // Twenty bytes written in place: every entry of a listing carries two of these, and string
    // interpolation with padding showed in profiles of a large listing.
    var out = [UInt8](repeating: 0, count: 20)
    func put(_ value: Int32, at offset: Int, width: Int) {
        var v = max(0, value)
        for i in stride(from: offset + width - 1, through: offset, by: -1) {
            out[i] = UInt8(ascii: "0") + UInt8(v % 10)
            v /= 10
        }
    }
    put(parts.tm_year + 1900, at: 0, width: 4)
    put(parts.tm_mon + 1, at: 5, width: 2)
    put(parts.tm_mday, at: 8, width: 2)
    put(parts.tm_hour, at: 11, width: 2)
    put(parts.tm_min, at: 14, width: 2)
    put(parts.tm_sec, at: 17, width: 2)
    out[4] = UInt8(ascii: "-"); out[7] = UInt8(ascii: "-"); out[10] = UInt8(ascii: "T")
    out[13] = UInt8(ascii: ":"); out[16] = UInt8(ascii: ":"); out[19] = UInt8(ascii: "Z")
    return String(decoding: out, as: UTF8.self)
}

/// RFC 7231 IMF-fixdate for the Date header.
func httpDate(_ seconds: Int) -> String {
    var t = time_t(seconds)
    var parts = tm()
    gmtime_r(&t, &parts)
    let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func pad(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
    return "\(days[Int(parts.tm_wday)]), \(pad(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) \(pad(parts.tm_hour)):\(pad(parts.tm_min)):\(pad(parts.tm_sec)) GMT"
}

func percentDecode(_ s: Substring, plusIsSpace: Bool) -> String {
    var out: [UInt8] = []
    var bytes = Array(s.utf8)[...]
    while let b = bytes.first {
        bytes = bytes.dropFirst()
        if b == UInt8(ascii: "%"), bytes.count >= 2,
           let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) {
            out.append(v)
            bytes = bytes.dropFirst(2)
        } else if b == UInt8(ascii: "+"), plusIsSpace {
            out.append(0x20)
        } else {
            out.append(b)
        }
    }
    return String(decoding: out, as: UTF8.self)
}

func percentEncode(_ s: String) -> String {
    var out = ""
    for b in s.utf8 {
        let c = Character(Unicode.Scalar(b))
        if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "-._~".contains(c) {
            out.append(c)
        } else {
            out += "%" + (b < 16 ? "0" : "") + String(b, radix: 16, uppercase: true)
        }
    }
    return out
}

func parseForm(_ s: Substring) -> [String: String] {
    var out: [String: String] = [:]
    for pair in s.split(separator: "&") {
        let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        let key = percentDecode(kv[0], plusIsSpace: true)
        out[key] = kv.count > 1 ? percentDecode(kv[1], plusIsSpace: true) : ""
    }
    return out
}
