import Foundation
import MountRuntime

/// `dbx-mount status` as text: one block per mount, one line per concern, a bar while the first
/// listing runs.
struct StatusView {
    let status: MountStatus
    let now: Date

    func render() -> String {
        let s = status
        var lines = ["\(s.mountpoint)  (pid \(s.pid))"]
        func row(_ label: String, _ value: String) { lines.append("  " + label.padding(toLength: 12, withPad: " ", startingAt: 0) + value) }
        row("account", s.account)
        row("source", s.source)
        row("mounted", "\(Self.dateFormatter.string(from: s.mountedAt)) (\(Self.ago(now.timeIntervalSince(s.mountedAt))))")
        if s.changeFeed.state == "none" {
            row("listing", "folder by folder, as each is opened (a shared link)")
        } else if let listing = s.firstListing {
            let counts = "\(Self.count(listing.entries)) entries, \(Self.count(listing.folders)) folders"
            if listing.done {
                row("listing", "done: \(counts) in \(Self.seconds(listing.seconds))")
            } else {
                row("listing", "\(Self.bar(listing.fraction)) \(Int(listing.fraction * 100))%  \(counts), "
                    + "\(listing.listingsDone) of \(listing.listingsStarted) listings, \(Self.seconds(listing.seconds))")
            }
        } else {
            row("listing", "from the saved tree (no first listing needed)")
        }
        var feed = s.changeFeed.state
        if let since = s.changeFeed.downSince {
            feed += " since \(Self.dateFormatter.string(from: since)) (\(Self.ago(now.timeIntervalSince(since))))"
        }
        if let error = s.changeFeed.error, s.changeFeed.state == "down" { feed += ": \(error)" }
        row("changes", feed == "none" ? "none through a shared link: folders are listed again after --ttl" : feed)
        row("cached", "\(Self.count(s.cache.entries)) entries in \(Self.bytes(UInt64(s.cache.treeBytes))) of memory")
        var reads = "\(Self.bytes(s.reads.readaheadBytes)) of \(Self.bytes(s.reads.readaheadBudget)) read ahead, "
            + "\(s.reads.openFiles) open files, \(s.reads.openDirectories) open folders"
        if let latency = s.reads.linkLatencyMs, let rate = s.reads.linkMBPerSecond {
            reads += "; link \(latency) ms, \(rate) MB/s per request"
        }
        row("reads", reads)
        if let used = s.reads.blockCacheBytes, let capacity = s.reads.blockCacheCapacity {
            row("block cache", "\(Self.bytes(used)) of \(Self.bytes(capacity))")
        }
        for pin in s.pins ?? [] {
            let fraction = pin.bytesTotal == 0 ? (pin.listed ? 1 : 0) : Double(pin.bytesDone) / Double(pin.bytesTotal)
            let state = pin.complete ? "complete" : pin.problem.map { "not kept: \($0)" }
                ?? (pin.listed ? "\(Self.bar(fraction)) \(Int(fraction * 100))%" : "waiting for its listing")
            row("pinned", "\(pin.path): \(state), \(Self.bytes(pin.bytesDone)) of \(Self.bytes(pin.bytesTotal)) in \(Self.count(pin.files)) files")
        }
        if let d = s.dropbox {
            row("dropbox", "\(Self.count(Int(d.calls))) calls, \(Self.count(Int(d.failures))) failed, "
                + "\(Self.count(Int(d.rateLimited))) rate-limited, \(Self.bytes(d.bytesDownloaded)) downloaded")
        }
        return lines.joined(separator: "\n")
    }

    static func bar(_ fraction: Double, width: Int = 24) -> String {
        let filled = max(0, min(width, Int((fraction * Double(width)).rounded(.down))))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "]"
    }

    static func count(_ n: Int) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.groupingSeparator = ","
        formatter.usesGroupingSeparator = true
        return formatter.string(from: NSNumber(value: n)) ?? "\(n)"
    }

    static func bytes(_ n: UInt64) -> String {
        let units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(n)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(n) bytes" : String(format: "%.1f %@", value, units[unit])
    }

    static func seconds(_ s: Double) -> String {
        s < 60 ? String(format: "%.1f s", s) : "\(Int(s) / 60) min \(Int(s) % 60) s"
    }

    static func ago(_ s: Double) -> String {
        switch s {
        case ..<60: "\(max(0, Int(s))) s ago"
        case ..<3600: "\(Int(s) / 60) min ago"
        case ..<86400: "\(Int(s) / 3600) h \(Int(s) % 3600 / 60) min ago"
        default: "\(Int(s) / 86400) days ago"
        }
    }

    static let dateFormatter: DateFormatter = {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        formatter.locale = Locale(identifier: "en_US_POSIX")
        return formatter
    }()
}
