// files/download and files/export: content-host answers with Dropbox-API-Result, Range, and 416
// at end of file.

import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

extension Router {

    func handleDownload(route: String, arg: JSON, place: String, request: EmulatorRequest) -> Reply {
        do {
            let path = try pathArg(arg, route: route, readPath: true, place: place).get()
            let base = try pathBase(request, route: route).get()
            guard case .entry(let found) = try resolve(path, base: base).get() else {
                return .routeError(["path", "not_file"])
            }
            guard found.kind == .file else { return .routeError(["path", "not_file"]) }
            // Opening it would follow it; what Dropbox serves for a link is not documented.
            guard found.symlinkTarget == nil else { return .routeError(["unsupported_file"]) }
            if let rev = arg["rev"]?.stringValue, rev != found.rev { return .routeError(["path", "not_found"]) }
            var exportFormat = "html"
            if route == "files/export" {
                guard !found.isDownloadable else { return .routeError(["non_exportable"]) }
                if let f = arg["export_format"]?.stringValue {
                    guard ["html", "markdown"].contains(f) else { return .routeError(["invalid_export_format"]) }
                    exportFormat = f
                }
            } else if !found.isDownloadable {
                return .routeError(["unsupported_file"])
            }

            return serveFile(found, request: request, honourRange: true) { entry in
                if route == "files/export" {
                    let stem = entry.name.dropLast(".paper".count)
                    return .object([
                        ("export_metadata", .object([
                            ("name", .string(stem + (exportFormat == "html" ? ".html" : ".md"))),
                            ("size", .int(Int64(entry.size))),
                            ("export_hash", entry.contentHash.map { .string($0) } ?? .null),
                        ])),
                        ("file_metadata", metadata(entry, base: base.count, tagged: false)),
                    ])
                }
                // Real download responses carry FileMetadata without ".tag".
                return metadata(entry, base: base.count, tagged: false)
            }
        } catch {
            return error.reply
        }
    }

    /// A file's bytes as a download route answers them: `Dropbox-API-Result` from `result` (given
    /// the entry with its size as opened and its hash), ETag and If-None-Match, and Range unless
    /// `honourRange` is false (then the whole file, 200).
    func serveFile(_ found: EntrySnapshot, request: EmulatorRequest, honourRange: Bool,
                   result: (EntrySnapshot) -> JSON) -> Reply {
        let fd = open(index.realPath(found.components), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .routeError(["path", "not_found"]) }
        var st = stat()
        fstat(fd, &st)
        let size = Int64(st.st_size)
        var entry = index.withHashes([found])[0]
        entry.size = UInt64(size)
        var headers: HTTPHeaders = [
            "Dropbox-API-Result": result(entry).serialized(asciiOnly: true),
            "Accept-Ranges": "bytes",
            "ETag": "W/\"\(entry.rev)\"",
        ]
        if let inm = request.headers.first(name: "If-None-Match"),
           inm.split(separator: ",").contains(where: { $0.trimmingCharacters(in: " ") == "W/\"\(entry.rev)\"" || $0.trimmingCharacters(in: " ") == "\"\(entry.rev)\"" || $0.trimmingCharacters(in: " ") == "*" }) {
            close(fd)
            return .empty(.notModified, headers)
        }
        headers.add(name: "Content-Type", value: "application/octet-stream")
        switch honourRange ? Router.parseRange(request.headers.first(name: "Range"), size: size) : nil {
        case .none:
            return .file(.ok, headers, FileBody(fd: fd, offset: 0, length: size))
        case .some(.some(let range)):
            headers.add(name: "Content-Range", value: "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(size)")
            return .file(.partialContent, headers, FileBody(fd: fd, offset: range.lowerBound, length: range.upperBound - range.lowerBound))
        case .some(.none):
            close(fd)
            if server.currentKnobs.rangePastEnd == .route409 { return .routeError(["range", "not_satisfiable"]) }
            var h: HTTPHeaders = ["Content-Range": "bytes */\(size)"]
            h.add(name: "Accept-Ranges", value: "bytes")
            return .text(.rangeNotSatisfiable, "Requested range not satisfiable", h)
        }
    }

    /// nil: no usable Range (serve all); .some(nil): unsatisfiable; else the byte range.
    static func parseRange(_ header: String?, size: Int64) -> Range<Int64>?? {
        guard let header, header.hasPrefix("bytes=") else { return nil }
        let spec = header.dropFirst(6).trimmingCharacters(in: " ")
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingCharacters(in: " ")
        let last = spec[spec.index(after: dash)...].trimmingCharacters(in: " ")
        if first.isEmpty {
            guard let n = Int64(last) else { return nil }
            guard n > 0, size > 0 else { return .some(nil) }
            return .some(max(0, size - n)..<size)
        }
        guard let start = Int64(first) else { return nil }
        if last.isEmpty {
            return start < size ? .some(start..<size) : .some(nil)
        }
        guard let end = Int64(last), end >= start else { return nil }
        guard start < size else { return .some(nil) }
        return .some(start..<min(end + 1, size))
    }
}
