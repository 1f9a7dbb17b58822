// `files/get_thumbnail_batch` (content host, RPC style): Dropbox's own thumbnails of up to 25
// images in one call, each entry answered on its own, success or failure (docs/dropbox-api.md §9).
// A file manager that finds them in its thumbnail cache never reads the photos themselves.

/// The image format Dropbox encodes a thumbnail in.
public enum ThumbnailFormat: String, Sendable, Equatable {
    case jpeg, png, webp
}

/// A box the thumbnail is fitted into, named as Dropbox names it.
public enum ThumbnailSize: String, Sendable, Equatable, CaseIterable {
    case w32h32, w64h64, w128h128, w256h256, w480h320, w640h480, w960h640, w1024h768, w2048h1536
}

/// How the image meets its box: `strict` fits within it; `bestfit` within it or its transpose,
/// whichever is larger; `fitoneBestfit` covers it (or its transpose) completely.
public enum ThumbnailMode: String, Sendable, Equatable {
    case strict, bestfit
    case fitoneBestfit = "fitone_bestfit"
}

/// One image to thumbnail.
public struct ThumbnailRequest: Sendable, Equatable {
    /// `/path`, `id:...` or `rev:...`, as `files/download` takes.
    public var path: String
    public var format: ThumbnailFormat
    public var size: ThumbnailSize
    public var mode: ThumbnailMode

    public init(path: String, format: ThumbnailFormat, size: ThumbnailSize, mode: ThumbnailMode) {
        self.path = path; self.format = format; self.size = size; self.mode = mode
    }
}

/// What Dropbox answered for one entry of a batch.
public enum ThumbnailOutcome: Sendable, Equatable {
    /// The encoded image.
    case image([UInt8])
    /// Dropbox could not thumbnail this file: its `ThumbnailError` tag path, such as
    /// `["unsupported_image"]`, `["unsupported_extension"]` or `["path", "not_found"]`.
    case failed([String])
}

/// The most entries one `get_thumbnail_batch` call takes; more is a `too_many_files` error.
public let maxThumbnailBatch = 25

extension DropboxAPI {
    /// Implementations that make no thumbnails (test fakes, older clients) answer every entry as
    /// Dropbox answers a file type it does not thumbnail.
    public func thumbnails(_ requests: [ThumbnailRequest]) throws(DropboxError) -> [ThumbnailOutcome] {
        requests.map { _ in .failed(["unsupported_extension"]) }
    }
}

extension DropboxHTTPClient {
    /// Largest batch answer accepted: 25 images of up to 480x320, base64-encoded.
    public static let maxThumbnailBatchBytes = 64 << 20

    /// `files/get_thumbnail_batch`: one outcome per request, in order. At most 25 requests.
    public func thumbnails(_ requests: [ThumbnailRequest]) throws(DropboxError) -> [ThumbnailOutcome] {
        guard !requests.isEmpty else { return [] }
        guard requests.count <= maxThumbnailBatch else {
            throw .badInput("get_thumbnail_batch takes at most \(maxThumbnailBatch) entries, not \(requests.count)")
        }
        let entries = requests.map { request -> JSONValue in
            .object(["path": .string(request.path), "format": .string(request.format.rawValue),
                     "size": .string(request.size.rawValue), "mode": .string(request.mode.rawValue)])
        }
        let body = try rpc("files/get_thumbnail_batch", .object(["entries": .array(entries)]), host: endpoints.content,
                           maxResponseBytes: Self.maxThumbnailBatchBytes)
        let answers = try JSONFields(try Decode.json(body, context: "get_thumbnail_batch"), context: "get_thumbnail_batch")
            .array("entries")
        guard answers.count == requests.count else {
            throw .malformedResponse("get_thumbnail_batch: \(answers.count) entries for \(requests.count) asked")
        }
        return try answers.map { answer throws(DropboxError) -> ThumbnailOutcome in
            let fields = try JSONFields(answer, context: "get_thumbnail_batch entry")
            switch try fields.string(".tag") {
            case "success":
                guard let image = Base64.decode(try fields.string("thumbnail")) else {
                    throw .malformedResponse("get_thumbnail_batch: a thumbnail is not valid base64")
                }
                return .image(image)
            case "failure":
                let tags = ErrorDecoding.tagPath(try fields.required("failure"))
                return .failed(tags.isEmpty ? ["other"] : tags)
            default:
                // An open union: a tag this client does not know is a failure of that entry only.
                return .failed([(try? fields.string(".tag")) ?? "other"])
            }
        }
    }
}

extension MeteredDropboxAPI {
    public func thumbnails(_ requests: [ThumbnailRequest]) throws(DropboxError) -> [ThumbnailOutcome] {
        try meter.count(base.routeAnswering("files/get_thumbnail_batch")) { () throws(DropboxError) in try base.thumbnails(requests) }
    }
}
