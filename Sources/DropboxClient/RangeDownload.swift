// Ranged downloads (`files/download`, `sharing/get_shared_link_file`): one call's bytes, streamed to a
// consumer across as many attempts as the retry loop makes, each asking only for what has not arrived yet.

extension DropboxHTTPClient {
    /// Partial answers one download call follows before it gives up on the server.
    static let mostPiecesPerDownload = 1024

    /// The bytes of `range`, buffered: the streaming download below with a consumer that collects,
    /// so both share one set of Content-Range checks and resume a cut body the same way.
    public func download(path: String, range: Range<UInt64>) throws(DropboxError) -> [UInt8] {
        try collectingDownload(path: path, range: range)
    }

    public func download(path: String, range: Range<UInt64>,
                         into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        // A `rev:` path names the bytes it wants, and the answer's `Dropbox-API-Result` must be of
        // that rev: a server that resolved it loosely would mix versions across a file's parts.
        let rev = path.hasPrefix("rev:") ? String(path.dropFirst(4)) : nil
        return try rangedDownload(route: "files/download", arg: .object(["path": .string(path)]), expectedRev: rev,
                                  range: range, into: consumer)
    }

    /// `range` of a download-style route's file (`files/download`, `sharing/get_shared_link_file`),
    /// streamed to `consumer`: a 206 is checked and streamed, a whole-file 200 (a server that
    /// ignores Range) is cut to the range, a cut body is resumed from where it stopped, and a 206
    /// that covers less than was asked is followed by a request for the rest.
    func rangedDownload(route: String, arg argument: JSONValue, expectedRev: String? = nil, range: Range<UInt64>,
                        into consumer: (UnsafeRawBufferPointer) -> Bool) throws(DropboxError) -> UInt64 {
        guard !range.isEmpty else { return 0 }
        let wanted = range.upperBound - range.lowerBound
        let cap = max(min(wanted, Self.maxDownloadBytes), Self.wholeFileAllowance)
        let arg = JSONWriter.encode(argument, headerSafe: true)
        let url = endpoints.url(endpoints.content, route: route)
        return try withoutActuallyEscaping(consumer) { consumer throws(DropboxError) -> UInt64 in
            let receiver = RangeReceiver(range: range, expectedRev: expectedRev, consumer: consumer)
            var response: HTTPResponse
            var pieces = 0
            repeat {
                pieces += 1
                // A server may cap its answers (a CDN's 1 MiB, say); one that sends a part in
                // thousands of slivers would keep a reader's worker busy for good.
                guard pieces <= Self.mostPiecesPerDownload else {
                    throw .malformedResponse("download: the server sent bytes \(range.lowerBound)-\(range.upperBound - 1) in more than \(Self.mostPiecesPerDownload) partial answers")
                }
                do throws(DropboxError) {
                    // A retry after a body was cut short asks only for the rest: `nextOffset` moves
                    // with every byte handed over, and each attempt's Range starts there.
                    response = try perform(route: route, auth: true, accept: [200, 206, 416], send: { request throws(DropboxError) in
                        try receiver.attempt { () throws(DropboxError) in try self.transport.exchange(request, streamingTo: receiver) }
                    }) { token throws(DropboxError) in
                        var headers = try commonHeaders(token: token)
                        headers.append(("Dropbox-API-Arg", arg))
                        headers.append(("Range", "bytes=\(receiver.nextOffset)-\(range.upperBound - 1)"))
                        // File bytes as they are: a coded body would be handed on as content.
                        headers.append(("Accept-Encoding", "identity"))
                        return HTTPRequest(method: .get, url: url, headers: headers, timeout: requestTimeout,
                                           maxResponseBytes: Int(cap))
                    }
                } catch let error where error.isRoute("range", "not_satisfiable") {
                    return receiver.delivered
                }
                // A 206 may enclose less than was asked (RFC 9110 §15.3.7: the client must see
                // whether more requests are needed). Each such answer delivered at least a byte,
                // so this ends.
            } while receiver.endedShortOfRange
            // 200: a server that ignored Range sent the whole file, which the receiver streamed
            // through, handing on only the range (and stopping the transfer at its end).
            if receiver.finished || response.status == 206 || response.status == 200 { return receiver.delivered }
            let first = receiver.nextOffset
            // 416: the range starts at or past the end of the file.
            if let header = response.headers["content-range"], let total = ContentRange.unsatisfiedTotal(header),
               total > first {
                throw .malformedResponse("download: 416 for bytes \(first)-\(range.upperBound - 1) of a \(total)-byte file")
            }
            return receiver.delivered
        }
    }
}

/// Takes one streamed download, across the attempts of one call. Each 206 is checked before any
/// of its body is handed on: its `Content-Range` must start exactly where the last attempt stopped
/// and end where asked (or at end of file), and its body may not run past what it promised. A
/// whole-file 200 (Range ignored, as a server may: RFC 9110 §14.2) is streamed too, its bytes
/// before the range dropped and the transfer stopped at the range's end, never buffered whole,
/// and checked against the size `Dropbox-API-Result` gives. A body cut short hands on what
/// arrived, and the next attempt asks for the rest.
final class RangeReceiver: HTTPBodyReceiver {
    let range: Range<UInt64>
    private let consumer: (UnsafeRawBufferPointer) -> Bool
    /// Bytes handed to the consumer over all attempts.
    private(set) var delivered: UInt64 = 0
    /// The consumer asked to stop, or every byte of the range has been handed over.
    private(set) var finished = false
    /// Why this attempt's answer cannot be used; thrown instead of the transport's abort error.
    private var problem: DropboxError?
    /// Bytes the current 206 promised, and how many of them arrived.
    private var promised: UInt64?
    private var received: UInt64 = 0
    /// The current 206 stops before the range's end, and the file goes on (or its size is not given).
    private var promisedShort = false
    /// A whole-file 200 is being streamed: its bytes before `nextOffset` are dropped. Its size
    /// from `Dropbox-API-Result`, when given.
    private var wholeFile = false
    private var wholeFileSize: UInt64?

    /// The rev the bytes must be of, for a route that cannot be asked for one (shared links).
    let expectedRev: String?

    init(range: Range<UInt64>, expectedRev: String? = nil, consumer: @escaping (UnsafeRawBufferPointer) -> Bool) {
        self.range = range
        self.expectedRev = expectedRev
        self.consumer = consumer
    }

    var nextOffset: UInt64 { range.lowerBound + delivered }

    /// The last attempt's 206 delivered all it promised, which was less than the range: the rest
    /// must be asked for.
    var endedShortOfRange: Bool {
        !finished && promisedShort && promised == received
    }

    /// Runs one attempt. An answer that was streamed but ended short is a transport error, so the
    /// retry loop tries again (from `nextOffset`).
    func attempt(_ send: () throws(DropboxError) -> HTTPResponse) throws(DropboxError) -> HTTPResponse {
        problem = nil
        promised = nil
        promisedShort = false
        received = 0
        wholeFile = false
        wholeFileSize = nil
        if finished { return HTTPResponse(status: 206, headers: [:], body: []) }
        do throws(DropboxError) {
            let response = try send()
            if let problem { throw problem }
            if let promised, received < promised, !finished {
                throw .transport(code: 18, message: "download: body ended \(promised - received) bytes short of its Content-Range")
            }
            if wholeFile, let size = wholeFileSize, received != size, !finished {
                throw .malformedResponse("download: Dropbox-API-Result says \(size) bytes, body has \(received)")
            }
            return response
        } catch {
            if let problem { throw problem }
            if finished { return HTTPResponse(status: 206, headers: [:], body: []) }
            throw error
        }
    }

    func responseStarted(status: Int, headers: [String: String]) -> HTTPBodyDisposition {
        if status == 200 || status == 206, let coding = headers["content-encoding"]?.trimmingSpaces.lowercased(),
           !coding.isEmpty, coding != "identity" {
            problem = .malformedResponse("download: body sent with Content-Encoding \(coding.prefix(40)) though identity was asked for")
            return .abort
        }
        // What the answer says of the file: its rev (checked when the route could not be asked
        // for one) and, for a whole-file 200, its size.
        let result = status == 200 || status == 206 ? headers["dropbox-api-result"].map { header in
            (try? Decode.json(Array(header.utf8), context: "Dropbox-API-Result")).flatMap { try? JSONFields($0, context: "Dropbox-API-Result") }
        } : nil
        if let expectedRev, let fields = result ?? nil {
            // A rev that differs is refused; an answer that names none cannot be checked and is taken.
            let rev = try? fields.optionalString("rev")
            guard rev == nil || rev == expectedRev else {
                problem = .route(tags: ["path", "not_found"], summary: "path/not_found/ (the file changed since it was listed)")
                return .abort
            }
        }
        if status == 200 {
            wholeFile = true
            if let result {
                guard let fields = result, let size = try? fields.optionalUInt64("size") else {
                    problem = .malformedResponse("download: 200 with an unreadable Dropbox-API-Result")
                    return .abort
                }
                wholeFileSize = size
            }
            return .stream
        }
        guard status == 206 else { return .buffer }   // errors and 416s: small, decoded whole
        let first = nextOffset, last = range.upperBound - 1
        guard let header = headers["content-range"], let cr = ContentRange.parse(header) else {
            problem = .malformedResponse("download: 206 without a valid Content-Range")
            return .abort
        }
        guard cr.first == first, cr.last <= last else {
            problem = .malformedResponse("download: asked for bytes \(first)-\(last), got \(cr.first)-\(cr.last)")
            return .abort
        }
        if let total = cr.total, cr.last >= total {
            problem = .malformedResponse("download: range \(cr.first)-\(cr.last) beyond the \(total)-byte file")
            return .abort
        }
        promised = cr.last - cr.first + 1
        promisedShort = cr.last < last && cr.total.map { $0 > cr.last + 1 } ?? true
        return .stream
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
        if wholeFile { return receiveWholeFile(chunk) }
        guard let promised else { return false }
        let room = promised - received
        guard UInt64(chunk.count) <= room else {
            // Never hand on more than the Content-Range promised.
            problem = .malformedResponse("download: body longer than its Content-Range (\(promised) bytes)")
            return false
        }
        received += UInt64(chunk.count)
        delivered += UInt64(chunk.count)
        if !consumer(chunk) { finished = true; return false }
        if nextOffset == range.upperBound { finished = true }
        return true
    }

    /// A chunk of a whole-file 200: the part inside the range is handed on.
    private func receiveWholeFile(_ chunk: UnsafeRawBufferPointer) -> Bool {
        let start = received   // file offset of the chunk's first byte
        received += UInt64(chunk.count)
        if let size = wholeFileSize, received > size {
            problem = .malformedResponse("download: body longer than Dropbox-API-Result's \(size) bytes")
            return false
        }
        let from = max(start, nextOffset), to = min(received, range.upperBound)
        guard from < to else { return received < range.upperBound }
        let piece = UnsafeRawBufferPointer(rebasing: chunk[Int(from - start)..<Int(to - start)])
        delivered += UInt64(piece.count)
        if !consumer(piece) { finished = true; return false }
        if nextOffset == range.upperBound { finished = true; return false }
        return true
    }
}

/// `Content-Range: bytes first-last/total` (RFC 9110 §14.4), `total` possibly `*`.
struct ContentRange: Equatable {
    var first: UInt64
    var last: UInt64
    var total: UInt64?

    static func parse(_ header: String) -> ContentRange? {
        let value = header.trimmingSpaces
        // The unit is case-insensitive (RFC 9110 §14.1).
        guard value.prefix(6).lowercased() == "bytes " else { return nil }
        let spec = value.dropFirst(6)
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let bounds = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = UInt64(bounds[0]), let last = UInt64(bounds[1]), first <= last
        else { return nil }
        let total: UInt64?
        if halves[1] == "*" { total = nil } else {
            guard let t = UInt64(halves[1]) else { return nil }
            total = t
        }
        return ContentRange(first: first, last: last, total: total)
    }

    /// The size in `bytes */size`, the form a 416 carries.
    static func unsatisfiedTotal(_ header: String) -> UInt64? {
        let value = header.trimmingSpaces
        guard value.prefix(8).lowercased() == "bytes */" else { return nil }
        return UInt64(value.dropFirst(8))
    }
}
