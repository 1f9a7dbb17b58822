// Dropbox's thumbnails in the freedesktop.org thumbnail cache (Thumbnail Managing Standard), where
// GIO (Nautilus, `gio info`), tumbler (Thunar) and KIO (Dolphin) look before they read an image
// (docs/dropbox-api.md §9 says what each of them checks):
// - `<dir>/{normal,large,x-large}/<md5 of the file's URI>.png`, directories 0700, files 0600;
// - PNG tEXt `Thumb::URI` (the URI exactly as GLib writes it), `Thumb::MTime` (whole seconds, as
//   `stat` shows them on the mount: GIO compares digits, tumbler compares a double), `Thumb::Size`
//   and `Thumb::Mimetype`;
// - written to a temporary file and renamed, so a reader never sees half a thumbnail;
// - owned by the user the files are shown to, when root mounts for someone else.

import Crypto
import DropboxFS
import Foundation
import Logging

public final class FreedesktopThumbnailStore: ThumbnailStore {
    /// The cache's root, e.g. `~/.cache/thumbnails`.
    public let directory: String
    /// The mount point, absolute and with symlinks resolved: URIs are of paths under it.
    public let mountPoint: String
    private let owner: (uid: uid_t, gid: gid_t)?
    private let logger: Logger

    /// - Parameter owner: who the files are for, when that is not the process's user (root
    ///   mounting with `-o uid=`); nil leaves them the process's.
    public init(directory: String, mountPoint: String, owner: (uid: uid_t, gid: gid_t)? = nil,
                logger: Logger = Logger(label: "dbx-mount.thumbnails")) {
        self.directory = directory
        self.mountPoint = mountPoint.count > 1 && mountPoint.hasSuffix("/") ? String(mountPoint.dropLast()) : mountPoint
        self.owner = owner
        self.logger = logger
    }

    /// `$XDG_CACHE_HOME/thumbnails`, else `~/.cache/thumbnails` (the standard's location).
    public static func defaultDirectory(environment: [String: String], home: String) -> String {
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") { return cache + "/thumbnails" }
        return home + "/.cache/thumbnails"
    }

    /// The URI a file manager uses for `target`.
    public func uri(of target: ThumbnailTarget) -> String {
        FileURI.of(mountPoint + target.relativePath)
    }

    /// Where `target`'s `flavor` thumbnail lives.
    public func path(of target: ThumbnailTarget, flavor: ThumbnailFlavor) -> String {
        let digest = Insecure.MD5.hash(data: Array(uri(of: target).utf8))
        let hex = digest.map { String(format: "%02x", $0) }.joined()
        return directory + "/" + flavor.rawValue + "/" + hex + ".png"
    }

    public func hasCurrent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        let expected = texts(for: target)
        return flavors.allSatisfy { flavor in
            // The text chunks come before the image data, within the first few KiB.
            guard let handle = FileHandle(forReadingAtPath: path(of: target, flavor: flavor)) else { return false }
            defer { try? handle.close() }
            guard let head = try? handle.read(upToCount: 16 << 10), let found = try? PNGText.texts(in: Array(head))
            else { return false }
            return expected.allSatisfy { found[$0.0] == $0.1 }
        }
    }

    public func save(_ png: [UInt8], flavor: ThumbnailFlavor, for target: ThumbnailTarget) throws(ThumbnailStoreError) {
        let stamped: [UInt8]
        do {
            stamped = try PNGText.adding(texts(for: target) + [("Software", "dbx-mount")], to: png)
        } catch {
            throw .entry("Dropbox's thumbnail is not a PNG (\(error))")
        }
        let folder = directory + "/" + flavor.rawValue
        try makeDirectory(directory)
        try makeDirectory(folder)
        let final = path(of: target, flavor: flavor)
        let temporary = folder + "/.dbx-mount-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).png"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw classify(errno, doing: "create \(temporary)") }
        var ok = stamped.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == stamped.count
        if ok, let owner { ok = fchown(fd, owner.uid, owner.gid) == 0 }
        close(fd)
        guard ok, rename(temporary, final) == 0 else {
            let code = errno
            unlink(temporary)
            throw classify(code, doing: "write \(final)")
        }
    }

    /// The keys a valid entry carries, in the order they are written.
    private func texts(for target: ThumbnailTarget) -> [(String, String)] {
        [("Thumb::URI", uri(of: target)), ("Thumb::MTime", String(target.modified)),
         ("Thumb::Size", String(target.size)), ("Thumb::Mimetype", target.mimeType)]
    }

    /// Creates `path` (and missing parents, such as `~/.cache`) 0700, owned like the thumbnails.
    private func makeDirectory(_ path: String) throws(ThumbnailStoreError) {
        if mkdir(path, 0o700) == 0 {
            if let owner { _ = chown(path, owner.uid, owner.gid) }
            return
        }
        var code = errno
        if code == ENOENT, let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            try makeDirectory(String(path[..<slash]))
            if mkdir(path, 0o700) == 0 {
                if let owner { _ = chown(path, owner.uid, owner.gid) }
                return
            }
            code = errno
        }
        guard code == EEXIST else { throw .unwritable("cannot create \(path): \(String(cString: strerror(code)))") }
    }

    /// A permission or space problem stops every later write too; anything else is this entry's.
    private func classify(_ code: Int32, doing what: String) -> ThumbnailStoreError {
        let message = "cannot \(what): \(String(cString: strerror(code)))"
        switch code {
        case EACCES, EPERM, EROFS, ENOSPC, EDQUOT, ENOTDIR: return .unwritable(message)
        default: return .entry(message)
        }
    }
}
