// Dropbox's thumbnails in the freedesktop.org thumbnail cache (Thumbnail Managing Standard), where
// GIO (Nautilus, `gio info`), tumbler (Thunar) and KIO (Dolphin) look before they read an image
// (docs/dropbox-api.md §9 says what each of them checks):
// - `<dir>/{normal,large,x-large}/<md5 of the file's URI>.png`, directories 0700, files 0600, for
//   each URI a file manager may use (GLib's and Qt's escaping, the mount point as given and as
//   resolved), and no out-of-date `xx-large` entry left to hide them;
// - PNG tEXt `Thumb::URI` (the URI exactly as GLib writes it), `Thumb::MTime` (whole seconds, as
//   `stat` shows them on the mount: GIO compares digits, tumbler compares a double), `Thumb::Size`
//   and `Thumb::Mimetype`;
// - written to a temporary file and renamed, so a reader never sees half a thumbnail;
// - written as the user the files are shown to, when root mounts for someone else (so they own
//   them, and a symlink in their cache cannot send root's writes elsewhere).

import Crypto
import DropboxFS
import Foundation
import Logging

public final class FreedesktopThumbnailStore: ThumbnailStore {
    /// The cache's root, e.g. `~/.cache/thumbnails`.
    public let directory: String
    /// The mount point's absolute paths, symlinks resolved first: URIs are of paths under each.
    public let mountPoints: [String]
    private let owner: (uid: uid_t, gid: gid_t)?
    private let logger: Logger

    /// - Parameters:
    ///   - mountPoint: absolute, with symlinks resolved: the path KIO (which resolves them) and
    ///     `/proc/mounts` use.
    ///   - alsoReachedAs: other absolute paths of the mount point, such as the one the user gave
    ///     through a symlink: GIO and Thunar file a thumbnail under the path as browsed.
    ///   - owner: who the files are for, when that is not the process's user (root mounting with
    ///     `-o uid=`); nil leaves them the process's.
    public init(directory: String, mountPoint: String, alsoReachedAs: [String] = [],
                owner: (uid: uid_t, gid: gid_t)? = nil, logger: Logger = Logger(label: "dbx-mount.thumbnails")) {
        self.directory = directory
        var mountPoints: [String] = []
        for path in [mountPoint] + alsoReachedAs {
            let trimmed = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
            if !mountPoints.contains(trimmed) { mountPoints.append(trimmed) }
        }
        self.mountPoints = mountPoints
        self.owner = owner
        self.logger = logger
    }

    /// `$XDG_CACHE_HOME/thumbnails`, else `~/.cache/thumbnails` (the standard's location).
    public static func defaultDirectory(environment: [String: String], home: String) -> String {
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") { return cache + "/thumbnails" }
        return home + "/.cache/thumbnails"
    }

    /// `path` made absolute against `directory` and tidied as GLib's `g_canonicalize_filename`
    /// does (no `.`, `..` or doubled slashes; symlinks left as they are): the mount point's path
    /// as a file manager browsing to it writes it.
    public static func absolute(_ path: String, in directory: String) -> String {
        var parts: [Substring] = []
        for part in ((path.hasPrefix("/") ? "" : directory + "/") + path).split(separator: "/") {
            switch part {
            case ".": continue
            case "..": _ = parts.popLast()
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The URI GIO uses for `target` under the mount point with symlinks resolved.
    public func uri(of target: ThumbnailTarget) -> String {
        FileURI.of(mountPoints[0] + target.relativePath)
    }

    /// Every URI a file manager may file `target` under: GLib's and Qt's forms of its path under
    /// each of the mount point's paths. Usually one; entries are written for each.
    public func uris(of target: ThumbnailTarget) -> [String] {
        var uris: [String] = []
        for mountPoint in mountPoints {
            let path = mountPoint + target.relativePath
            for uri in [FileURI.of(path), FileURI.qtForm(of: path)] where !uris.contains(uri) { uris.append(uri) }
        }
        return uris
    }

    /// Where `target`'s `flavor` thumbnail lives, under the URI GIO uses.
    public func path(of target: ThumbnailTarget, flavor: ThumbnailFlavor) -> String {
        path(ofURI: uri(of: target), in: flavor.rawValue)
    }

    /// `<directory>/<size folder>/<md5 of uri>.png`.
    func path(ofURI uri: String, in sizeFolder: String) -> String {
        let digest = Insecure.MD5.hash(data: Array(uri.utf8))
        let hex = digest.map { String(format: "%02x", $0) }.joined()
        return directory + "/" + sizeFolder + "/" + hex + ".png"
    }

    /// The folder of the size above x-large, which dbx-mount does not write: GIO looks there
    /// first and reports only what it finds there, so an out-of-date entry in it would hide the
    /// fresh smaller ones (and Thunar and Dolphin use it at their largest zoom).
    static let xxLarge = "xx-large"

    public func hasCurrent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        uris(of: target).allSatisfy { uri in
            let expected = texts(for: target, uri: uri)
            return flavors.allSatisfy { entry(at: path(ofURI: uri, in: $0.rawValue), expected: expected) == .current }
                && entry(at: path(ofURI: uri, in: Self.xxLarge), expected: expected) != .stale
        }
    }

    public func isPresent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool {
        uris(of: target).allSatisfy { uri in
            flavors.allSatisfy { access(path(ofURI: uri, in: $0.rawValue), F_OK) == 0 }
        }
    }

    enum Entry: Equatable { case missing, current, stale }

    /// Whether the entry at `path` exists and carries `expected`.
    private func entry(at path: String, expected: [(String, String)]) -> Entry {
        guard access(path, F_OK) == 0 else { return .missing }
        guard let handle = FileHandle(forReadingAtPath: path) else { return .stale }
        defer { try? handle.close() }
        // The text chunks come right after the header, within the first few hundred bytes.
        guard let head = try? handle.read(upToCount: 16 << 10), let found = try? PNGText.texts(in: Array(head))
        else { return .stale }
        return expected.allSatisfy { found[$0.0] == $0.1 } ? .current : .stale
    }

    public func save(_ png: [UInt8], flavor: ThumbnailFlavor, for target: ThumbnailTarget) throws(ThumbnailStoreError) {
        try asOwner { () throws(ThumbnailStoreError) in try saveEntries(png, flavor: flavor, for: target) }
    }

    /// Runs `body` with this thread's file-system identity that of `owner`, when root writes for
    /// another user: the cache lives in that user's home, where a symlink they made could
    /// otherwise have root create files wherever it points. The kernel then checks every path as
    /// for the user, and what is created is theirs. (`setfsuid` changes the calling thread only.)
    private func asOwner(_ body: () throws(ThumbnailStoreError) -> Void) throws(ThumbnailStoreError) {
        guard let owner, geteuid() == 0 else { return try body() }
        guard let setfsuid = Self.setfsuid, let setfsgid = Self.setfsgid else {
            throw .unwritable("cannot write as user \(owner.uid): no setfsuid in this C library")
        }
        let group = setfsgid(owner.gid)
        let user = setfsuid(owner.uid)
        defer {
            _ = setfsuid(UInt32(bitPattern: user))
            _ = setfsgid(UInt32(bitPattern: group))
        }
        try body()
    }

    /// glibc's `setfsuid` and `setfsgid`, which Swift's Glibc module does not export (they are in
    /// `<sys/fsuid.h>`); looked up once.
    private typealias SetFileSystemID = @convention(c) (UInt32) -> Int32
    private static let setfsuid = function("setfsuid")
    private static let setfsgid = function("setfsgid")
    private static func function(_ name: String) -> SetFileSystemID? {
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), name).map { unsafeBitCast($0, to: SetFileSystemID.self) }
    }

    private func saveEntries(_ png: [UInt8], flavor: ThumbnailFlavor, for target: ThumbnailTarget) throws(ThumbnailStoreError) {
        let folder = directory + "/" + flavor.rawValue
        try makeDirectory(directory)
        try makeDirectory(folder)
        for uri in uris(of: target) {
            let expected = texts(for: target, uri: uri)
            let stamped: [UInt8]
            do {
                stamped = try PNGText.adding(expected + [("Software", "dbx-mount")], to: png)
            } catch {
                throw .entry("Dropbox's thumbnail is not a PNG (\(error))")
            }
            try writeEntry(stamped, to: path(ofURI: uri, in: flavor.rawValue), folder: folder)
            if flavor == .xLarge {
                let larger = path(ofURI: uri, in: Self.xxLarge)
                if entry(at: larger, expected: expected) == .stale { unlink(larger) }
            }
        }
    }

    /// Writes `bytes` to a temporary file in `folder` and renames it to `final`, so a reader never
    /// sees half a thumbnail.
    private func writeEntry(_ bytes: [UInt8], to final: String, folder: String) throws(ThumbnailStoreError) {
        let temporary = folder + "/.dbx-mount-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).png"
        let failure = WholeFileWrite.write(bytes, to: final, through: temporary)
        guard failure == 0 else { throw classify(failure, doing: "write \(final)") }
    }

    /// The keys a valid entry under `uri` carries, in the order they are written.
    private func texts(for target: ThumbnailTarget, uri: String) -> [(String, String)] {
        [("Thumb::URI", uri), ("Thumb::MTime", String(target.modified)),
         ("Thumb::Size", String(target.size)), ("Thumb::Mimetype", target.mimeType)]
    }

    /// Creates `path` (and missing parents, such as `~/.cache`) 0700, owned like the thumbnails
    /// (the thread's file-system identity, `asOwner`).
    private func makeDirectory(_ path: String) throws(ThumbnailStoreError) {
        if mkdir(path, 0o700) == 0 { return }
        var code = errno
        if code == ENOENT, let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            try makeDirectory(String(path[..<slash]))
            if mkdir(path, 0o700) == 0 { return }
            code = errno
        }
        guard code == EEXIST else { throw .unwritable("cannot create \(path): \(String(cString: strerror(code)))") }
    }

    /// A permission problem stops every later write too, and a full disk every write for a while;
    /// anything else is this entry's.
    private func classify(_ code: Int32, doing what: String) -> ThumbnailStoreError {
        let message = "cannot \(what): \(String(cString: strerror(code)))"
        switch code {
        case EACCES, EPERM, EROFS, ENOTDIR: return .unwritable(message)
        case ENOSPC, EDQUOT: return .full(message)
        default: return .entry(message)
        }
    }
}
