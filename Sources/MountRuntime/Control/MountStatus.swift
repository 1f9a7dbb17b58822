// What `dbx-mount status` shows of a running mount, as the control socket sends it
// (docs/CONTROL.md). One Codable type for both sides: the mount encodes it, the command decodes it,
// so the two cannot drift apart. Keys are snake_case in JSON; optional figures are absent rather
// than null when unknown.

import DropboxClient
import DropboxFS
import Foundation

public struct MountStatus: Codable, Sendable, Equatable {
    /// Bumped when a field changes meaning; new fields may appear at any time.
    public var version = 1
    public var pid: Int32
    public var mountpoint: String
    public var account: String
    /// The mounted Dropbox folder ("/" for the whole account).
    public var source: String
    public var mountedAt: Date
    public var firstListing: FirstListing?
    public var changeFeed: ChangeFeed
    public var cache: Cache
    public var reads: Reads
    public var dropbox: Dropbox?
    /// Folders kept available offline (`dbx-mount pin`), with their progress.
    public var pins: [Pin]?

    public struct FirstListing: Codable, Sendable, Equatable {
        public var done: Bool
        public var entries: Int
        public var folders: Int
        public var listingsDone: Int
        public var listingsStarted: Int
        public var seconds: Double
        /// 0 to 1: finished listings of those known so far.
        public var fraction: Double
    }

    public struct ChangeFeed: Codable, Sendable, Equatable {
        /// "live", "catching up", "starting" (the first listing runs), "offline" (Dropbox cannot be
        /// reached: the saved tree and the block cache are served), "down", or "none" (a shared
        /// link: no change feed; folders are listed again once their TTL ends).
        public var state: String
        public var downSince: Date?
        public var error: String?
    }

    public struct Cache: Codable, Sendable, Equatable {
        public var entries: Int
        public var treeBytes: Int
    }

    public struct Reads: Codable, Sendable, Equatable {
        public var readaheadBytes: UInt64
        public var readaheadBudget: UInt64
        public var openFiles: Int
        public var openDirectories: Int
        public var blockCacheBytes: UInt64?
        public var blockCacheCapacity: UInt64?
        public var linkLatencyMs: Int?
        public var linkMBPerSecond: Int?
    }

    public struct Pin: Codable, Sendable, Equatable {
        public var path: String
        /// Everything below is listed; before, the totals are not known yet.
        public var listed: Bool
        public var files: Int
        public var bytesTotal: UInt64
        public var bytesDone: UInt64
        public var complete: Bool
        /// Why the pin is not kept (no such folder, more than the block cache holds, a cache that
        /// cannot be written); absent while it is.
        public var problem: String?

        init(_ status: PinStatus) {
            path = status.path; listed = status.listed; files = status.files
            bytesTotal = status.bytesTotal; bytesDone = status.bytesDone; complete = status.complete
            problem = status.problem
        }

        func jsonObject() -> Any? {
            guard let data = try? MountStatus.encoder.encode(self) else { return nil }
            return try? JSONSerialization.jsonObject(with: data)
        }
    }

    public struct Dropbox: Codable, Sendable, Equatable {
        public var calls: UInt64
        public var failures: UInt64
        /// Answers 429 (retried ones included).
        public var rateLimited: UInt64
        public var bytesDownloaded: UInt64
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    /// As a JSON object, for the control socket's answer.
    public func jsonObject() -> Any? {
        guard let data = try? Self.encoder.encode(self) else { return nil }
        return try? JSONSerialization.jsonObject(with: data)
    }

    public func json(pretty: Bool = false) -> String {
        let encoder = Self.encoder
        if pretty { encoder.outputFormatting = [.sortedKeys, .prettyPrinted] }
        defer { encoder.outputFormatting = [.sortedKeys] }
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

}

extension MountStatus {
    /// Decodes the control socket's `status` object; nil if it is not one.
    public init?(jsonObject: Any) {
        guard JSONSerialization.isValidJSONObject(jsonObject),
              let data = try? JSONSerialization.data(withJSONObject: jsonObject),
              let status = try? Self.decoder.decode(MountStatus.self, from: data) else { return nil }
        self = status
    }

    /// The status of `mount` now.
    init(of mount: Mount, identity: MountIdentity, now: Date = Date()) {
        let usage = mount.filesystem.usage
        let sync = mount.filesystem.syncProgress
        let feedState = if !mount.filesystem.followsChanges {
            "none"
        } else if sync.offline {
            "offline"
        } else if sync.feedLive {
            sync.catchingUp ? "catching up" : "live"
        } else if sync.feedDownForSeconds != nil {
            "down"
        } else {
            sync.catchingUp ? "catching up" : "starting"
        }
        self.init(
            pid: getpid(), mountpoint: identity.mountpoint, account: identity.account, source: identity.source,
            mountedAt: identity.mountedAt,
            firstListing: sync.firstListing.map {
                FirstListing(done: $0.done, entries: $0.entries, folders: $0.folders, listingsDone: $0.listingsDone,
                             listingsStarted: $0.listingsStarted, seconds: $0.seconds, fraction: $0.fraction)
            },
            changeFeed: ChangeFeed(state: feedState,
                                   downSince: sync.feedDownForSeconds.map { now.addingTimeInterval(-$0) },
                                   error: sync.feedError),
            cache: Cache(entries: usage.entries, treeBytes: usage.treeBytes),
            reads: Reads(readaheadBytes: usage.readAheadBytes, readaheadBudget: usage.readAheadBudget,
                         openFiles: usage.openFiles, openDirectories: usage.openDirectories,
                         blockCacheBytes: usage.blockCacheBytes, blockCacheCapacity: usage.blockCacheCapacity,
                         linkLatencyMs: usage.linkLatency.map { Int(($0 * 1000).rounded()) },
                         linkMBPerSecond: usage.linkRate.map { Int(($0 / 1e6).rounded()) }),
            dropbox: mount.meter.map {
                Dropbox(calls: $0.calls, failures: $0.failures, rateLimited: $0.rateLimited, bytesDownloaded: $0.bytesDownloaded)
            },
            pins: usage.blockCacheBytes == nil ? nil : mount.filesystem.pinStatus.map(Pin.init))
    }
}

extension MountStatus {
    /// One line for systemd's `STATUS=` (`systemctl status` shows it): how the tree stands, then
    /// what the mount holds and serves.
    public var summary: String {
        let listing = firstListing.flatMap { $0.done ? nil : $0 }
        var line = switch changeFeed.state {
        case "live": "live: following changes"
        case "catching up": "catching up with the changes since the last mount"
        case "offline": "offline: Dropbox cannot be reached; serving the saved tree and the block cache"
        case "down": "change feed down" + (changeFeed.error.map { ": \($0)" } ?? "") + "; retrying"
        case "none": "shared link: folders are listed again after --ttl"
        default: "starting"
        }
        if let listing {
            line = "listing Dropbox: \(Int(listing.fraction * 100))% (\(listing.entries) entries, \(listing.folders) folders)"
        }
        line += "; \(cache.entries) entries, \(reads.openFiles) open files"
        if let pins, !pins.isEmpty {
            line += "; \(pins.count { $0.complete }) of \(pins.count) pinned folders complete"
        }
        // One line: an error text from Dropbox must not end the datagram's STATUS field.
        return String(line.map { $0.isNewline ? " " : $0 })
    }
}

/// What a mount is, as the command line set it up: for `status`.
public struct MountIdentity: Sendable {
    public var mountpoint: String
    public var account: String
    public var source: String
    public var mountedAt: Date

    public init(mountpoint: String, account: String, source: String, mountedAt: Date = Date()) {
        self.mountpoint = mountpoint
        self.account = account
        self.source = source
        self.mountedAt = mountedAt
    }
}
