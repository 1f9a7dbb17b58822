import ArgumentParser
import Crypto
import Foundation
import Glibc

/// `dbx-mount content-hash FILE...`: Dropbox's content hash of local files, to check a copy against
/// the `user.dropbox.content_hash` attribute of the file in the mount (`getfattr -n ...`).
struct ContentHashCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "content-hash",
        abstract: "Print the Dropbox content hash of local files.",
        discussion: """
            The hash Dropbox shows as content_hash, and a mount as the extended attribute user.dropbox.content_hash: SHA-256 of the concatenated SHA-256 digests of the file's 4 MiB blocks. One line per file, as sha256sum prints them; - reads standard input. Files are read in pieces, never whole. Exit status: 0 all hashed, 1 a file could not be read.
            """
    )

    @Argument(help: ArgumentHelp("Local files to hash (- for standard input).", valueName: "file"))
    var files: [String]

    mutating func run() throws {
        var failed = false
        for path in files {
            do {
                let hash = try Self.hash(path: path)
                print("\(hash)  \(path)")
            } catch {
                FileHandle.standardError.write(Data("dbx-mount: content-hash: \(path): \(error.description)\n".utf8))
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }

    struct ReadError: Error, CustomStringConvertible {
        let description: String
        init(errno code: Int32) { description = String(cString: strerror(code)) }
    }

    static let blockSize = 4 << 20

    /// Streams the file through the block hasher, 1 MiB at a time.
    static func hash(path: String) throws(ReadError) -> String {
        let fd = path == "-" ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ReadError(errno: errno) }
        defer { if fd != STDIN_FILENO { close(fd) } }
        var hasher = ContentHasher()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = read(fd, buffer.baseAddress, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw ReadError(errno: errno)   // EISDIR for a folder
            }
            if count == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
        return hasher.finalize()
    }
}

/// Dropbox's content hash, fed in pieces of any size (docs/dropbox-api.md §4).
struct ContentHasher {
    private var overall = SHA256()
    private var block = SHA256()
    private var inBlock = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(rest.count, ContentHashCommand.blockSize - inBlock)
            block.update(bufferPointer: UnsafeRawBufferPointer(rebasing: rest.prefix(take)))
            inBlock += take
            rest = rest.dropFirst(take)
            if inBlock == ContentHashCommand.blockSize { finishBlock() }
        }
    }

    private mutating func finishBlock() {
        let digest = block.finalize()
        digest.withUnsafeBytes { overall.update(bufferPointer: $0) }
        block = SHA256()
        inBlock = 0
    }

    /// The hash as lowercase hex. An empty input has no blocks: SHA-256 of nothing.
    mutating func finalize() -> String {
        if inBlock > 0 { finishBlock() }
        return overall.finalize().map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
