// Standard base64 (RFC 4648 §4), for the thumbnails `get_thumbnail_batch` returns inside JSON.
// Here rather than Foundation's, because this module does not import Foundation.

enum Base64 {
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() {
            table[Int(c)] = UInt8(i)
        }
        return table
    }()

    /// The bytes `text` encodes, or nil if it is not base64. Padding is optional; whitespace
    /// (which some encoders wrap lines with) is skipped.
    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        var padding = 0
        for c in text.utf8 {
            if c == UInt8(ascii: "=") { padding += 1; continue }
            if c == UInt8(ascii: " ") || c == UInt8(ascii: "\n") || c == UInt8(ascii: "\r") || c == UInt8(ascii: "\t") { continue }
            guard padding == 0 else { return nil }   // data after padding
            let value = values[Int(c)]
            guard value != 0xFF else { return nil }
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero padding of the last byte, and at most two '=' may follow.
        guard padding <= 2, bits < 6, accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}
