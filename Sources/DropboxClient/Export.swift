// `files/export` (content host): the bytes of a file Dropbox cannot download as it is (Paper and
// other cloud documents, `is_downloadable=false`), converted to its `export_as` format or the one
// asked. No Range: an export is produced whole, so it is bounded and buffered.

/// What `files/export` gave: the exported file's name (`export_metadata.name`) and bytes.
public struct ExportedFile: Sendable, Equatable {
    public var name: String
    public var bytes: [UInt8]

    public init(name: String, bytes: [UInt8]) {
        self.name = name
        self.bytes = bytes
    }
}

extension DropboxAPI {
    /// Implementations that cannot export (test fakes, older clients) answer as Dropbox does for a
    /// file that has no export: a `non_exportable` route error.
    public func export(path: String, format: String?) throws(DropboxError) -> ExportedFile {
        throw .route(tags: ["non_exportable"], summary: "non_exportable")
    }
}

extension DropboxHTTPClient {
    /// Largest export accepted: a document, not a video.
    public static let maxExportBytes = 64 << 20

    /// `files/export` of the file at `path` (`/p` or `id:`); `format` nil uses the file's `export_as`.
    public func export(path: String, format: String?) throws(DropboxError) -> ExportedFile {
        var arg: JSONObject = ["path": .string(path)]
        if let format { arg["export_format"] = .string(format) }
        let header = JSONWriter.encode(.object(arg), headerSafe: true)
        let response = try send(route: "files/export", host: endpoints.content, maxResponseBytes: Self.maxExportBytes,
                                headers: [("Dropbox-API-Arg", header)])
        guard let result = response.headers["dropbox-api-result"] else {
            throw .malformedResponse("export: no Dropbox-API-Result header")
        }
        let fields = try JSONFields(try Decode.json(Array(result.utf8), context: "export"), context: "export")
        let name = try fields.object("export_metadata").string("name")
        if let size = try fields.object("export_metadata").optionalUInt64("size"), size != UInt64(response.body.count) {
            throw .malformedResponse("export: export_metadata says \(size) bytes, body has \(response.body.count)")
        }
        return ExportedFile(name: name, bytes: response.body)
    }
}

extension MeteredDropboxAPI {
    public func export(path: String, format: String?) throws(DropboxError) -> ExportedFile {
        let file = try meter.count("files/export") { () throws(DropboxError) in try base.export(path: path, format: format) }
        meter.addDownloaded(file.bytes.count)
        return file
    }
}
