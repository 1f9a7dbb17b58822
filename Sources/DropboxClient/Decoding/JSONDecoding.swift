// Decoding of Dropbox answers into the model types of Metadata.swift.
//
// The rules follow Dropbox's own non-strict decoder (stone `decode_struct`, docs/dropbox-api.md §0):
// unknown fields are ignored; a required field that is missing or of the wrong type is an error;
// an optional field may be omitted or `null`. Every failure is a `.malformedResponse` naming the
// field, so a broken server shows up in a log as what it is.

/// A JSON object being decoded, with a context ("file entry", "account") for error messages.
struct JSONFields {
    let fields: JSONObject
    let context: String

    init(_ value: JSONValue, context: String) throws(DropboxError) {
        guard case .object(let fields) = value else {
            throw .malformedResponse("\(context): expected an object, got \(value.kind)")
        }
        self.fields = fields
        self.context = context
    }

    private func wrongType(_ key: String, _ expected: String, _ got: JSONValue) -> DropboxError {
        .malformedResponse("\(context): field \"\(key)\" should be \(expected), got \(got.kind)")
    }

    private func missing(_ key: String) -> DropboxError {
        .malformedResponse("\(context): required field \"\(key)\" is missing")
    }

    /// The field's value, or nil when absent or `null`.
    func optional(_ key: String) -> JSONValue? {
        switch fields[key] {
        case nil, .null?: nil
        case let value?: value
        }
    }

    func required(_ key: String) throws(DropboxError) -> JSONValue {
        guard let value = optional(key) else { throw missing(key) }
        return value
    }

    func optionalString(_ key: String) throws(DropboxError) -> String? {
        guard let value = optional(key) else { return nil }
        guard case .string(let s) = value else { throw wrongType(key, "a string", value) }
        return s
    }

    func string(_ key: String) throws(DropboxError) -> String {
        guard let s = try optionalString(key) else { throw missing(key) }
        return s
    }

    func bool(_ key: String, default defaultValue: Bool) throws(DropboxError) -> Bool {
        guard let value = optional(key) else { return defaultValue }
        guard case .bool(let b) = value else { throw wrongType(key, "a boolean", value) }
        return b
    }

    func bool(_ key: String) throws(DropboxError) -> Bool {
        let value = try required(key)
        guard case .bool(let b) = value else { throw wrongType(key, "a boolean", value) }
        return b
    }

    func optionalUInt64(_ key: String) throws(DropboxError) -> UInt64? {
        guard let value = optional(key) else { return nil }
        // Only plain digits: "1.0", "1e3" and "-1" are not UInt64 in stone's JSON, and a value
        // beyond UInt64.max fails here instead of wrapping or rounding through Double.
        guard case .number(let text) = value, let n = UInt64(text) else {
            throw wrongType(key, "an unsigned 64-bit integer", value)
        }
        return n
    }

    func uint64(_ key: String) throws(DropboxError) -> UInt64 {
        guard let n = try optionalUInt64(key) else { throw missing(key) }
        return n
    }

    func timestamp(_ key: String) throws(DropboxError) -> UnixSeconds {
        let text = try string(key)
        guard let seconds = DropboxTimestamp.parse(text) else {
            throw .malformedResponse("\(context): field \"\(key)\" is not a %Y-%m-%dT%H:%M:%SZ timestamp")
        }
        return seconds
    }

    func object(_ key: String) throws(DropboxError) -> JSONFields {
        try JSONFields(try required(key), context: "\(context).\(key)")
    }

    func optionalObject(_ key: String) throws(DropboxError) -> JSONFields? {
        guard let value = optional(key) else { return nil }
        return try JSONFields(value, context: "\(context).\(key)")
    }

    func array(_ key: String) throws(DropboxError) -> [JSONValue] {
        let value = try required(key)
        guard case .array(let elements) = value else { throw wrongType(key, "an array", value) }
        return elements
    }
}

/// Dropbox's `Timestamp("%Y-%m-%dT%H:%M:%SZ")`, always UTC (docs/dropbox-api.md §2).
public enum DropboxTimestamp {
    /// Parses `YYYY-MM-DDTHH:MM:SSZ`, Dropbox's one form, into seconds since the Unix epoch. Two
    /// RFC 3339 variants another server may write are read too: a fraction of a second (dropped,
    /// as the mount shows whole seconds) and a `+HH:MM`/`-HH:MM` offset instead of `Z` (Python's
    /// `isoformat()` writes `+00:00`). Anything else (a date alone, a number, February 30) is nil.
    public static func parse(_ text: String) -> UnixSeconds? {
        var text = text
        // Every entry of a listing carries two timestamps: read them in place, not as a copy.
        return text.withUTF8 { parse(utf8: $0) }
    }

    private static func parse(utf8 b: UnsafeBufferPointer<UInt8>) -> UnixSeconds? {
        guard b.count >= 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":")
        else { return nil }
        // After the seconds: an optional fraction, then `Z` or an offset, then nothing.
        var zone = 19
        if b[zone] == UInt8(ascii: ".") {
            zone += 1
            let digits = zone
            while zone < b.count, b[zone] >= UInt8(ascii: "0"), b[zone] <= UInt8(ascii: "9") { zone += 1 }
            guard zone > digits, zone < b.count else { return nil }
        }
        func number(_ from: Int, _ count: Int) -> Int64? {
            var n: Int64 = 0
            for c in b[from..<(from + count)] {
                guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
                n = n * 10 + Int64(c - UInt8(ascii: "0"))
            }
            return n
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              (1...12).contains(month), day >= 1, day <= daysInMonth(year: year, month: month),
              hour <= 23, minute <= 59, second <= 60  // 60: a leap second, as strptime allows
        else { return nil }
        var offset: Int64 = 0
        switch b[zone] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            guard zone + 1 == b.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard zone + 6 == b.count, b[zone + 3] == UInt8(ascii: ":"),
                  let hours = number(zone + 1, 2), let minutes = number(zone + 4, 2), hours <= 23, minutes <= 59
            else { return nil }
            offset = (hours * 3600 + minutes * 60) * (b[zone] == UInt8(ascii: "+") ? 1 : -1)
        default:
            return nil
        }
        return daysFromCivil(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second - offset
    }

    /// The inverse of `parse`, for tests and logs.
    public static func format(_ seconds: UnixSeconds) -> String {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let rest = seconds - days * 86_400
        let (y, m, d) = civilFromDays(days)
        func pad(_ n: Int64, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(rest / 3600, 2)):\(pad(rest % 3600 / 60, 2)):\(pad(rest % 60, 2))Z"
    }

    private static func isLeap(_ y: Int64) -> Bool { y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) }

    private static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian, day 0 = 1970-01-01).
    private static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    private static func civilFromDays(_ z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? yoe + era * 400 + 1 : yoe + era * 400, m, d)
    }
}

enum Decode {
    /// Seconds: the most of a longpoll's `backoff` the change feed honours.
    static let longestLongpollBackoff: UInt64 = 900

    static func json(_ body: [UInt8], context: String) throws(DropboxError) -> JSONValue {
        do {
            return try JSONReader.parse(body)
        } catch {
            throw .malformedResponse("\(context): \(error)")
        }
    }

    static func metadata(_ value: JSONValue, context: String = "metadata") throws(DropboxError) -> Metadata {
        let f = try JSONFields(value, context: context)
        let tag = try f.string(".tag")
        let name = try f.string("name")
        // The spec says a name "never contains a slash"; one that does (or is empty, or holds NUL)
        // would let a server address a different path than the one it names.
        guard !name.isEmpty, !name.utf8.contains(UInt8(ascii: "/")), !name.utf8.contains(0) else {
            throw .malformedResponse("\(context): invalid name \(JSONWriter.encode(.string(name), headerSafe: true))")
        }
        let pathLower = try f.optionalString("path_lower")
        let pathDisplay = try f.optionalString("path_display")
        switch tag {
        case "file":
            return .file(FileMetadata(
                name: name, id: try f.string("id"), pathLower: pathLower, pathDisplay: pathDisplay,
                clientModified: try f.timestamp("client_modified"),
                serverModified: try f.timestamp("server_modified"),
                rev: try f.string("rev"), size: try f.uint64("size"),
                isDownloadable: try f.bool("is_downloadable", default: true),
                contentHash: try f.optionalString("content_hash"),
                exportAs: try f.optionalObject("export_info")?.optionalString("export_as"),
                symlinkTarget: try f.optionalObject("symlink_info")?.optionalString("target")))
        case "folder":
            return .folder(FolderMetadata(name: name, id: try f.string("id"),
                                          pathLower: pathLower, pathDisplay: pathDisplay))
        case "deleted":
            return .deleted(DeletedMetadata(name: name, pathLower: pathLower, pathDisplay: pathDisplay))
        default:
            throw .malformedResponse("\(context): unknown metadata tag \"\(tag.prefix(40))\"")
        }
    }

    static func listFolderPage(_ body: [UInt8]) throws(DropboxError) -> ListFolderPage {
        let f = try JSONFields(try json(body, context: "list_folder"), context: "list_folder")
        let entries = try f.array("entries")
        var decoded: [Metadata] = []
        var skipped = 0
        var firstSkipReason: String?
        decoded.reserveCapacity(entries.count)
        for (i, entry) in entries.enumerated() {
            // `Metadata` is a closed union in the spec, but a server may grow it, and a name with
            // a slash cannot be shown: the entry is left out (and logged by the caller) rather
            // than failing the page, which would fail every listing of the folder, or the whole
            // account's first listing, for as long as the entry exists.
            do throws(DropboxError) {
                decoded.append(try metadata(entry, context: "list_folder entry \(i)"))
            } catch {
                skipped += 1
                if firstSkipReason == nil { firstSkipReason = "\(error)" }
            }
        }
        let cursor = try f.string("cursor")
        guard !cursor.isEmpty else { throw .malformedResponse("list_folder: empty cursor") }
        return ListFolderPage(entries: decoded, cursor: cursor, hasMore: try f.bool("has_more"),
                              skippedEntries: skipped, firstSkipReason: firstSkipReason)
    }

    /// A page's cursor and `has_more`, read before its entries are decoded, so that the next page
    /// can be asked for while this one is decoded. nil when they cannot be read that way; the full
    /// decode (`listFolderPage`) then fails with the reason.
    static func listFolderContinuation(_ body: [UInt8]) -> (cursor: String, hasMore: Bool)? {
        guard let members = JSONReader.topLevelMembers(of: body, named: ["cursor", "has_more"]),
              case .string(let cursor)? = members["cursor"], !cursor.isEmpty,
              case .bool(let hasMore)? = members["has_more"] else { return nil }
        return (cursor, hasMore)
    }

    static func cursor(_ body: [UInt8]) throws(DropboxError) -> String {
        let f = try JSONFields(try json(body, context: "get_latest_cursor"), context: "get_latest_cursor")
        let cursor = try f.string("cursor")
        guard !cursor.isEmpty else { throw .malformedResponse("get_latest_cursor: empty cursor") }
        return cursor
    }

    static func longpoll(_ body: [UInt8]) throws(DropboxError) -> LongpollResult {
        let f = try JSONFields(try json(body, context: "longpoll"), context: "longpoll")
        // Dropbox asks for a minute or a few; a hostile or broken value must not stop the change
        // feed for the life of the mount, so more than 15 minutes is taken as 15.
        let backoff = try f.optionalUInt64("backoff").map { Int(min($0, Self.longestLongpollBackoff)) }
        return LongpollResult(changes: try f.bool("changes"), backoff: backoff)
    }

    static func account(_ body: [UInt8]) throws(DropboxError) -> Account {
        let f = try JSONFields(try json(body, context: "account"), context: "account")
        let rootInfo = try f.object("root_info")
        return Account(accountID: try f.string("account_id"),
                       displayName: try f.object("name").string("display_name"),
                       email: try f.string("email"),
                       rootNamespaceID: try rootInfo.string("root_namespace_id"),
                       homeNamespaceID: try rootInfo.string("home_namespace_id"))
    }

    static func spaceUsage(_ body: [UInt8]) throws(DropboxError) -> SpaceUsage {
        let f = try JSONFields(try json(body, context: "space_usage"), context: "space_usage")
        // Both `individual` and `team` allocations carry `allocated`; the open union's `other`
        // carries nothing, which reads as "no known allocation".
        let allocated = try f.object("allocation").optionalUInt64("allocated") ?? 0
        return SpaceUsage(used: try f.uint64("used"), allocated: allocated)
    }
}
