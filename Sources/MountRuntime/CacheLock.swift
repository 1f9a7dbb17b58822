// One mount per cache. Two mounts writing one saved tree, or evicting each other's blocks, would
// corrupt what both read back, so a mount takes an exclusive lock on each cache it uses before it
// mounts, and a second mount of the same cache fails with one line instead.
//
// flock(2) on a `.lock` file beside the cache: the lock belongs to the open file, which libfuse's
// daemonizing fork shares with the child, so it lasts exactly as long as the mount's process, and a
// killed mount leaves no stale lock. The file holds the owner's pid, for the message, and says
// when the owner has unmounted and is only saving its tree: a mount started right after an unmount
// waits for that save instead of failing.

import Foundation
import Glibc

public enum CacheLock {
    public struct Busy: Error, CustomStringConvertible {
        public let path: String
        public let owner: String?
        public var description: String {
            "\(path) is in use by another dbx-mount" + (owner.map { " (pid \($0))" } ?? "")
        }
    }

    /// How long a new mount waits for a process that has unmounted and is saving its tree.
    static let savingWait: Double = 60
    /// How long a held lock without that mark is watched for it: `fusermount3 -u` returns before
    /// the old process has seen the unmount and written it (on a loaded machine, a second can
    /// pass), and a script may mount at once.
    static let unmountNoticeWait: Double = 2

    /// Locks `path` (creating it, and its folder 0700), or throws `Busy` if another process holds
    /// it, and is not a mount that has unmounted and is only saving (waited for, `savingWait` at
    /// most). Returns the descriptor, which stays open for the life of the process (nil when no lock
    /// file can be made); programs the mount runs (fusermount3) do not inherit it.
    @discardableResult
    public static func acquire(_ path: String) throws(Busy) -> Int32? {
        let folder = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        // A cache that cannot even hold a lock file is the cache's own problem, reported when used.
        guard fd >= 0 else { return nil }
        let started = Date()
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let text = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            let fields = text?.split(separator: " ") ?? []
            let waited = Date().timeIntervalSince(started)
            if waited < (fields.last == Self.unmountedMark ? savingWait : unmountNoticeWait) {
                usleep(100_000)
                continue
            }
            close(fd)
            throw Busy(path: path, owner: fields.first.map(String.init))
        }
        recordOwner(fd)
        return fd
    }

    private static let unmountedMark: Substring = "unmounted"

    /// Says in the lock file that this process has released its mount point and only saves now.
    public static func markUnmounted(_ fd: Int32) { write("\(getpid()) \(unmountedMark)\n", to: fd) }

    /// Writes this process's pid into the lock file: again after daemonizing, when the pid changed.
    public static func recordOwner(_ fd: Int32) { write("\(getpid())\n", to: fd) }

    private static func write(_ text: String, to fd: Int32) {
        let bytes = Array(text.utf8)
        _ = ftruncate(fd, 0)
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }
}
