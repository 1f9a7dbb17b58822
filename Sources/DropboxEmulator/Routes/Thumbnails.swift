// files/get_thumbnail_batch (content host, RPC style: up to 25 images, each answered on its own)
// and files/get_thumbnail_v2 (download style: one image as the body). docs/dropbox-api.md §9.
// Paths resolve as files/download resolves them, and answer the same path errors.

import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

extension Router {

    static let maxThumbnailBatch = 25

    func thumbnailBatch(arg: JSON, request: EmulatorRequest, route: String) -> Reply {
        do {
            let place = "request body"
            guard case .object = arg else { return .badInput(route, "\(place): expected object, got \(arg.typeName)") }
            guard let value = arg["entries"] else { return .badInput(route, "\(place): missing required field 'entries'") }
            guard case .array(let items) = value else {
                return .badInput(route, "\(place): entries: expected list, got \(value.typeName)")
            }
            // The body is checked against its type before the route looks at it, so a bad entry
            // is a 400 even in a batch that is too long.
            var asked: [(path: String, spec: ThumbnailSpec)] = []
            for (i, item) in items.enumerated() {
                let itemPlace = "\(place): entries[\(i)]"
                let path = try pathArg(item, route: route, readPath: true, place: itemPlace).get()
                asked.append((path, try thumbnailSpec(item, route: route, place: itemPlace).get()))
            }
            guard asked.count <= Router.maxThumbnailBatch else { return .routeError(["too_many_files"]) }
            let base = try pathBase(request, route: route).get()
            let entries: [JSON] = asked.map { one in
                switch thumbnail(path: one.path, base: base, spec: one.spec) {
                case .success(let (entry, image)):
                    return .object([
                        (".tag", .string("success")),
                        ("metadata", metadata(entry, base: base.count, tagged: false)),
                        ("thumbnail", .string(base64(image))),
                    ])
                case .failure(let failure):
                    return .object([(".tag", .string("failure")), ("failure", Reply.errorValue(failure.tags))])
                }
            }
            return .json(.object([("entries", .array(entries))]))
        } catch {
            return error.reply
        }
    }

    func thumbnailV2(arg: JSON, place: String, request: EmulatorRequest, route: String) -> Reply {
        do {
            guard case .object = arg else { return .badInput(route, "\(place): expected object, got \(arg.typeName)") }
            guard let resource = arg["resource"] else { return .badInput(route, "\(place): missing required field 'resource'") }
            let spec = try thumbnailSpec(arg, route: route, place: place).get()
            var path: String
            var base: [String]
            var linkURL: String?
            switch try tag(resource, of: ["path", "link"], route: route, place: "\(place): resource").get() {
            case "path":
                path = try pathArg(resource, route: route, readPath: true, place: "\(place): resource").get()
                base = try pathBase(request, route: route).get()
            default:
                guard let url = resource["url"] else { return .badInput(route, "\(place): resource: missing required field 'url'") }
                guard let text = url.stringValue else { return .badInput(route, "\(place): resource: url: expected string, got \(url.typeName)") }
                // A link's file, by its path relative to the link: ThumbnailV2Error's `not_found`
                // for a link that does not work, `access_denied` for a missing or wrong password.
                switch linkTarget(url: text, password: resource["password"]?.stringValue, path: resource["path"]?.stringValue) {
                case .failure(let box):
                    return .routeError([box.reply.routeErrorTags == ["shared_link_access_denied"] ? "access_denied" : "not_found"])
                case .success(let target):
                    guard let entry = target.entry, !target.isFolder else { return .routeError(["not_found"]) }
                    path = "/" + entry.components.joined(separator: "/")
                    base = []
                    linkURL = text
                }
            }
            // py 12.2.4's ThumbnailV2Error: transparency is kept only in PNG and WebP.
            if spec.preserveTransparency, spec.format == .jpeg { return .routeError(["unsupported_output_format"]) }
            switch thumbnail(path: path, base: base, spec: spec) {
            case .success(let (entry, image)):
                // A link's thumbnail says which rev it shows (`MinimalFileLinkMetadata`), no path.
                let result = linkURL.map { url in
                    JSON.object([("link_metadata", .object([("url", .string(url)), ("id", .string(entry.id)), ("rev", .string(entry.rev))]))])
                } ?? JSON.object([("file_metadata", metadata(entry, base: base.count, tagged: false))])
                return .bytes(.ok, [
                    "Dropbox-API-Result": result.serialized(asciiOnly: true),
                    "Content-Type": "application/octet-stream",
                ], image)
            case .failure(let failure):
                return .routeError(failure.tags)
            }
        } catch {
            return error.reply
        }
    }

    /// A `ThumbnailError` (or `ThumbnailV2Error`) as its tag path.
    struct ThumbnailRefusal: Error {
        var tags: [String]
        init(_ tags: [String]) { self.tags = tags }
    }

    /// The thumbnail of one file, with the metadata of the file it was made from.
    func thumbnail(path: String, base: [String], spec: ThumbnailSpec) -> Result<(EntrySnapshot, [UInt8]), ThumbnailRefusal> {
        let found: EntrySnapshot
        switch resolve(path, base: base) {
        case .failure(let box): return .failure(ThumbnailRefusal(box.reply.routeErrorTags ?? ["path", "not_found"]))
        case .success(.root): return .failure(ThumbnailRefusal(["path", "not_file"]))
        case .success(.entry(let e)): found = e
        }
        // As files/download answers a folder.
        guard found.kind == .file else { return .failure(ThumbnailRefusal(["path", "not_file"])) }
        guard Thumbnailer.hasSupportedExtension(found.name) else { return .failure(ThumbnailRefusal(["unsupported_extension"])) }
        let bytes: [UInt8]
        switch readImageFile(index.realPath(found.components)) {
        case .missing: return .failure(ThumbnailRefusal(["path", "not_found"]))
        case .tooLarge: return .failure(ThumbnailRefusal(["unsupported_image"]))
        case .bytes(let b): bytes = b
        }
        switch Thumbnailer.thumbnail(of: bytes, spec) {
        case .failure(let failure): return .failure(ThumbnailRefusal([failure.rawValue]))
        case .success(let image):
            var entry = index.withHashes([found])[0]
            entry.size = UInt64(bytes.count)
            return .success((entry, image))
        }
    }

    enum ImageFile { case missing, tooLarge, bytes([UInt8]) }

    /// The whole file, unless it is over Dropbox's 20 MB limit, which is judged by its size alone.
    func readImageFile(_ path: String) -> ImageFile {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .missing }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return .missing }
        guard st.st_size <= Thumbnailer.maxBytes else { return .tooLarge }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        var filled = 0
        while filled < bytes.count {
            let n = bytes.withUnsafeMutableBytes { raw in pread(fd, raw.baseAddress! + filled, raw.count - filled, off_t(filled)) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }  // shrank under us: decode what is there
            filled += n
        }
        return .bytes(filled == bytes.count ? bytes : Array(bytes[..<filled]))
    }

    /// `format`, `size`, `mode` and `quality` of a ThumbnailArg or ThumbnailV2Arg, each a tag given
    /// bare ("png") or as an object ({".tag":"png"}), and its optional flags.
    func thumbnailSpec(_ arg: JSON, route: String, place: String) -> Result<ThumbnailSpec, ReplyBox> {
        do {
            var spec = ThumbnailSpec()
            if let t = try optionalTag(arg, "format", of: ThumbnailFormat.allCases.map(\.rawValue), route: route, place: place).get() {
                spec.format = ThumbnailFormat(rawValue: t)!
            }
            if let t = try optionalTag(arg, "size", of: ThumbnailSize.allCases.map(\.rawValue), route: route, place: place).get() {
                spec.size = ThumbnailSize(rawValue: t)!
            }
            if let t = try optionalTag(arg, "mode", of: ThumbnailMode.allCases.map(\.rawValue), route: route, place: place).get() {
                spec.mode = ThumbnailMode(rawValue: t)!
            }
            // Internal-only in the spec, but a client may send it.
            if let t = try optionalTag(arg, "quality", of: ["quality_80", "quality_90"], route: route, place: place).get() {
                spec.jpegQuality = t == "quality_90" ? 90 : 80
            }
            _ = try boolArg(arg, "exclude_media_info", default: false, route: route, place: place).get()
            spec.preserveTransparency = try boolArg(arg, "preserve_transparency", default: false, route: route, place: place).get()
            return .success(spec)
        } catch {
            return .failure(error)
        }
    }

    func optionalTag(_ arg: JSON, _ key: String, of tags: [String], route: String, place: String) -> Result<String?, ReplyBox> {
        guard let value = arg[key], !value.isNull else { return .success(nil) }
        return tag(value, of: tags, route: route, place: "\(place): \(key)").map { $0 }
    }

    /// A union's tag; an unknown one is 400 as Dropbox words it: `size: unknown tag 's'`.
    func tag(_ value: JSON, of tags: [String], route: String, place: String) -> Result<String, ReplyBox> {
        let name: String
        switch value {
        case .string(let s): name = s
        case .object:
            guard let t = value[".tag"] else { return .failure(ReplyBox(.badInput(route, "\(place): missing '.tag' key"))) }
            guard let s = t.stringValue else { return .failure(ReplyBox(.badInput(route, "\(place): '.tag' must be a string, got \(t.typeName)"))) }
            name = s
        default:
            return .failure(ReplyBox(.badInput(route, "\(place): expected object, got \(value.typeName)")))
        }
        guard tags.contains(name) else { return .failure(ReplyBox(.badInput(route, "\(place): unknown tag '\(name)'"))) }
        return .success(name)
    }
}
