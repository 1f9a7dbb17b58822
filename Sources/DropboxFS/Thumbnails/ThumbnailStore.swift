// What the core needs from a thumbnail cache, and what it tells it about a file. The freedesktop
// cache itself (file names, PNG text chunks, permissions) is the `ThumbnailCache` module's.

import DropboxClient

/// The sizes of the freedesktop.org thumbnail cache, each with how it is asked of Dropbox.
public enum ThumbnailFlavor: String, Sendable, CaseIterable, Hashable {
    /// At most 128 px.
    case normal
    /// At most 256 px.
    case large
    /// At most 512 px.
    case xLarge = "x-large"

    /// Dropbox's box for this flavor. `bestfit` in 480x320 fits portrait photos in 320x480, so no
    /// side passes 512 and none needs scaling here.
    var request: (size: ThumbnailSize, mode: ThumbnailMode) {
        switch self {
        case .normal: (.w128h128, .strict)
        case .large: (.w256h256, .strict)
        case .xLarge: (.w480h320, .bestfit)
        }
    }
}

/// One file whose thumbnails are kept: what the cache entry must match.
public struct ThumbnailTarget: Sendable, Hashable {
    /// Dropbox's id and rev of the file (a new rev needs new thumbnails).
    public var id: String
    public var rev: String
    /// Display path below the mounted folder, e.g. `/2024/IMG_0001.jpg`.
    public var relativePath: String
    public var size: UInt64
    /// Whole seconds, exactly as `stat` shows them on the mount.
    public var modified: Int64
    public var mimeType: String

    public init(id: String, rev: String, relativePath: String, size: UInt64, modified: Int64, mimeType: String) {
        self.id = id; self.rev = rev; self.relativePath = relativePath; self.size = size
        self.modified = modified; self.mimeType = mimeType
    }
}

/// Why a thumbnail could not be saved.
public enum ThumbnailStoreError: Error, Sendable, Equatable {
    /// The cache directory cannot be written at all: saving more is pointless this mount.
    case unwritable(String)
    /// The disk (or the user's quota) is full: saving more is pointless for a while.
    case full(String)
    /// This one entry could not be saved (its bytes are not a PNG, a rename failed, ...).
    case entry(String)
}

/// Where thumbnails are kept. Implementations are safe to call from many threads.
public protocol ThumbnailStore: Sendable {
    /// True when every one of `flavors` of `target` is saved and matches its URI, mtime and size.
    func hasCurrent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool
    /// True when every one of `flavors` of `target` still has a file, whatever it holds: the cheap
    /// check, for entries this mount wrote and knows to be current unless someone removed them.
    func isPresent(_ target: ThumbnailTarget, flavors: [ThumbnailFlavor]) -> Bool
    /// Saves `png` (Dropbox's PNG, without the cache's text chunks yet) as `target`'s `flavor`.
    func save(_ png: [UInt8], flavor: ThumbnailFlavor, for target: ThumbnailTarget) throws(ThumbnailStoreError)
}

/// Which files Dropbox thumbnails (docs/dropbox-api.md §9): by extension, and at most 20 MB.
enum ThumbnailableImage {
    static let maxBytes: UInt64 = 20 * 1024 * 1024

    private static let mimeTypes: [String: String] = [
        "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif",
        "webp": "image/webp", "tif": "image/tiff", "tiff": "image/tiff", "bmp": "image/bmp",
        "ppm": "image/x-portable-pixmap",
    ]

    /// The MIME type of an image Dropbox can thumbnail, or nil for any other file.
    static func mimeType(name: String, size: UInt64) -> String? {
        guard size > 0, size <= maxBytes, let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        return mimeTypes[name[name.index(after: dot)...].lowercased()]
    }
}
