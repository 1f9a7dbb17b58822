import Crypto

#if canImport(Glibc)
import Glibc
#endif

/// Dropbox's `content_hash`: SHA-256 over the concatenated SHA-256 digests of 4 MiB blocks.
public enum ContentHash {
    public static let blockSize = 4 * 1024 * 1024

    /// Hashes bytes already in memory (tests, small files).
    public static func hex<Bytes: Collection>(of data: Bytes) -> String where Bytes.Element == UInt8 {
        var hasher = Hasher()
        hasher.update(Array(data))
        return hasher.finalize()
    }

    /// Streams a file from disk in blocks; never holds more than one block. Blocking: call it
    /// only off the event loops.
    static func hex(ofFileAt path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var hasher = Hasher()
        // Sized to the file (up to one block): a zeroed 4 MiB buffer for each of a million small
        // files made the emulator's start take two minutes.
        var info = stat()
        let size = fstat(fd, &info) == 0 ? Int(info.st_size) : blockSize
        let capacity = max(1, min(blockSize, size))
        var buffer = [UInt8](repeating: 0, count: capacity)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, capacity) }
            if n < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if n == 0 { break }
            hasher.update(buffer[0..<n])
        }
        return hasher.finalize()
    }

    /// Incremental form, so callers can feed arbitrary chunk sizes.
    struct Hasher {
        private var overall = SHA256()
        private var block = SHA256()
        private var filled = 0

        mutating func update<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
            var rest = bytes[...]
            while !rest.isEmpty {
                let take = min(ContentHash.blockSize - filled, rest.count)
                let head = rest.prefix(take)
                Array(head).withUnsafeBytes { block.update(bufferPointer: $0) }
                filled += take
                rest = rest.dropFirst(take)
                if filled == ContentHash.blockSize { finishBlock() }
            }
        }

        private mutating func finishBlock() {
            let digest = block.finalize()
            digest.withUnsafeBytes { overall.update(bufferPointer: $0) }
            block = SHA256()
            filled = 0
        }

        mutating func finalize() -> String {
            if filled > 0 { finishBlock() }
            return overall.finalize().map { byte in
                let s = String(byte, radix: 16)
                return byte < 16 ? "0" + s : s
            }.joined()
        }
    }
}
