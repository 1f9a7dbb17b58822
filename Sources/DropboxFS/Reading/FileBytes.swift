import Foundation

/// Bytes of a file handed to the FUSE adapter without copying: slices of the engine's buffers,
/// kept alive as long as this value is.
public struct FileBytes: Sendable {
    let pieces: [(part: Part, offsets: Range<Int>)]

    static let empty = FileBytes(pieces: [])

    public var count: Int { pieces.reduce(0) { $0 + $1.offsets.count } }

    /// Calls `body` with the bytes as one or more slices, valid only during the call.
    public func withSlices<R>(_ body: ([UnsafeRawBufferPointer]) throws -> R) rethrows -> R {
        try withExtendedLifetime(pieces) { try body(pieces.map { $0.part.bytes($0.offsets) }) }
    }

    /// The bytes as one array (a copy).
    public var array: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count)
        withSlices { slices in for slice in slices { out.append(contentsOf: slice) } }
        return out
    }
}

extension FileBytes {
    /// Bytes that are not the read engine's, in the shape the FUSE adapter replies from.
    static func copying(_ bytes: ArraySlice<UInt8>) -> FileBytes {
        guard !bytes.isEmpty else { return .empty }
        let part = Part(range: 0..<UInt64(bytes.count))
        _ = part.claim()
        _ = bytes.withUnsafeBytes { part.append($0) }
        part.finish()
        return FileBytes(pieces: [(part, 0..<bytes.count)])
    }
}
