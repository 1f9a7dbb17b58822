#if canImport(Glibc)
import Glibc
#endif

/// Writes a file whole: the bytes go to a new file under a temporary name in the same folder,
/// which is then renamed over the old one, so a reader, or the next mount after a crash, sees the
/// old file or the new one and never half of it. Shared by everything the mount keeps on disk
/// (blocks, pins, thumbnails, the account config). Not Foundation's atomic write: its file comes
/// out with the umask's mode (0644) and could only be narrowed after the rename, while this one
/// has its mode before anyone can open it.
public enum WholeFileWrite {
    /// Writes `bytes` to `path` through `temporary` (a name in `path`'s folder that nobody else
    /// uses), with exactly `mode`. `synced`: on disk before the rename (a file that is written
    /// rarely and must survive a power cut). Returns 0, or the errno of the step that failed;
    /// the temporary file is gone either way. Never writes through a file or link someone else
    /// put at `temporary` (`O_EXCL`, `O_NOFOLLOW`).
    public static func write(_ bytes: UnsafeRawBufferPointer, to path: String, through temporary: String,
                             mode: mode_t = 0o600, synced: Bool = false) -> Int32 {
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard descriptor >= 0 else { return errno }
        // The umask may have taken bits from `mode`.
        var failure = fchmod(descriptor, mode) == 0 ? 0 : errno
        var done = 0
        while failure == 0 && done < bytes.count {
            let put = Glibc.write(descriptor, bytes.baseAddress! + done, bytes.count - done)
            if put < 0 && errno == EINTR { continue }
            guard put > 0 else {
                failure = put < 0 ? errno : EIO
                break
            }
            done += put
        }
        if failure == 0 && synced && fsync(descriptor) != 0 { failure = errno }
        if close(descriptor) != 0 && failure == 0 { failure = errno }
        if failure == 0 && rename(temporary, path) != 0 { failure = errno }
        if failure != 0 { unlink(temporary) }
        return failure
    }

    /// A suffix that makes a temporary name beside a file: the process id and a random number, so
    /// that a temporary file left by a crash is never in the way of a later write (a process
    /// started at boot often has the same id every time).
    public static var temporarySuffix: String { ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

    /// The same for bytes in an array.
    public static func write(_ bytes: [UInt8], to path: String, through temporary: String, mode: mode_t = 0o600,
                             synced: Bool = false) -> Int32 {
        bytes.withUnsafeBytes { write($0, to: path, through: temporary, mode: mode, synced: synced) }
    }
}
