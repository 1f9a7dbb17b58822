// The text chunks a freedesktop thumbnail carries (`Thumb::URI`, `Thumb::MTime`, ...), read from
// and written into a PNG's chunk stream. This edits chunks and leaves the image data alone: it
// decodes no pixels. Format: an 8-byte signature, then chunks of a 4-byte big-endian length, a
// 4-byte type, the data and a CRC-32 of type and data (PNG specification, §5).

enum PNGText {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    enum Problem: Error, Equatable {
        case notPNG
        case truncated
    }

    /// `png` with `texts` (keyword, value; Latin-1 text) as tEXt chunks right after IHDR, and any
    /// earlier tEXt chunk with one of those keywords left out.
    static func adding(_ texts: [(String, String)], to png: [UInt8]) throws(Problem) -> [UInt8] {
        let chunks = try self.chunks(png)
        guard chunks.first?.type == "IHDR" else { throw .notPNG }
        let keywords = Set(texts.map(\.0))
        var out = signature
        out.reserveCapacity(png.count + texts.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count + 13 })
        for (index, chunk) in chunks.enumerated() {
            if chunk.type == "tEXt", let keyword = keyword(of: png[chunk.data]), keywords.contains(keyword) { continue }
            out.append(contentsOf: png[chunk.whole])
            if index == 0 {
                for (keyword, value) in texts {
                    append(type: "tEXt", data: Array(keyword.utf8) + [0] + Array(value.utf8), to: &out)
                }
            }
        }
        return out
    }

    /// The tEXt chunks before the image data, as keyword to value. `png` may be only the file's
    /// head: the walk ends at the first chunk that runs past it (an image-data chunk of 32 or
    /// 64 KiB, as many encoders write, or a colour profile), keeping what came before.
    static func texts(in png: [UInt8]) throws(Problem) -> [String: String] {
        var found: [String: String] = [:]
        for chunk in try chunks(png, stopAt: "IDAT", head: true) where chunk.type == "tEXt" {
            let data = png[chunk.data]
            guard let zero = data.firstIndex(of: 0) else { continue }
            found[String(decoding: data[data.startIndex..<zero], as: UTF8.self)] =
                String(decoding: data[(zero + 1)...], as: UTF8.self)
        }
        return found
    }

    private struct Chunk {
        var type: String
        var data: Range<Int>
        var whole: Range<Int>
    }

    /// The chunks of `png`, up to (not including) the first of type `stopAt`, or all of them. With
    /// `head`, `png` is the start of a file, and a chunk that runs past its end ends the list.
    private static func chunks(_ png: [UInt8], stopAt: String? = nil, head: Bool = false) throws(Problem) -> [Chunk] {
        guard png.count >= 8, Array(png[0..<8]) == signature else { throw .notPNG }
        var chunks: [Chunk] = []
        var at = 8
        while at < png.count {
            guard at + 12 <= png.count else {
                if head { break }
                throw .truncated
            }
            let length = png[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
            let type = String(decoding: png[at + 4..<at + 8], as: UTF8.self)
            if type == stopAt { break }
            guard length <= png.count - at - 12 else {
                if head { break }
                throw .truncated
            }
            chunks.append(Chunk(type: type, data: at + 8..<at + 8 + length, whole: at..<at + 12 + length))
            at += 12 + length
            if type == "IEND" { break }
        }
        return chunks
    }

    private static func keyword(of data: ArraySlice<UInt8>) -> String? {
        guard let zero = data.firstIndex(of: 0) else { return nil }
        return String(decoding: data[data.startIndex..<zero], as: UTF8.self)
    }

    private static func append(type: String, data: [UInt8], to out: inout [UInt8]) {
        let length = UInt32(data.count)
        out += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
        let typed = Array(type.utf8) + data
        out += typed
        let crc = CRC32.of(typed)
        out += [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
    }
}

/// CRC-32 as PNG (and zlib) compute it: polynomial 0xEDB88320, reflected, inverted.
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func of(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
