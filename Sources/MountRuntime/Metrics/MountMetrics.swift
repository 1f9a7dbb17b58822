// A mount's Prometheus metrics (`--metrics-addr`): swift-metrics handles, made through a
// `PrometheusMetricsFactory` of the mount's own (passed explicitly, never a global bootstrap), so
// the exposition format is swift-prometheus's. Every series carries the `mount` label (the mount
// point). Names follow Prometheus' conventions: `dbxmount_` prefix, base units, `_total` counters.
//
// Three sources, so that no figure is counted twice or drifts from the others:
// - Dropbox calls end in `callEnded` (APIMeter's observer): per-route counts and latency histogram.
// - FUSE requests end in `operationEnded` (the adapter's observer): per-operation latency and errors.
// - Totals the stats line and `dbx-mount status` also show (bytes downloaded, calls, 429s) and the
//   state of the mount (entries, memory, first listing, feed) are read from the same counters when
//   Prometheus scrapes (`exposition`).

import CoreMetrics
import DropboxClient
import DropboxFS
import FUSEAdapter
import Prometheus
import Synchronization

public final class MountMetrics: APICallObserver, FUSEOperationObserver {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let mountLabel: (String, String)
    private let routes = Mutex<[String: RouteMetrics]>([:])
    private let operations = Mutex<[UInt: OperationMetrics]>([:])
    /// Totals already added to the exported counters, so each scrape adds only what is new.
    private let exported = Mutex(ExportedTotals())

    private struct RouteMetrics {
        let requests: CoreMetrics.Counter
        let failures: CoreMetrics.Counter
        let duration: CoreMetrics.Timer
    }

    private struct OperationMetrics {
        let duration: CoreMetrics.Timer
        let errors: CoreMetrics.Counter
    }

    private struct ExportedTotals {
        var downloaded: UInt64 = 0
        var rateLimited: UInt64 = 0
        var droppedPages: UInt64 = 0
    }

    static let requestDuration = "dbxmount_dropbox_request_duration_seconds"
    static let operationDuration = "dbxmount_fuse_operation_duration_seconds"

    public init(mountpoint: String) {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Dropbox calls: tens of ms to minutes (a longpoll waits up to 8). FUSE requests: answered
        // from memory in microseconds, or waiting for Dropbox.
        factory.durationHistogramBuckets = [
            Self.requestDuration: [.milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
                                   .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
                                   .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30), .seconds(120),
                                   .seconds(480)],
            Self.operationDuration: [.microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
                                     .milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100),
                                     .milliseconds(500), .seconds(1), .seconds(5), .seconds(30)],
        ]
        self.factory = factory
        mountLabel = ("mount", mountpoint)
    }

    // MARK: - Observers

    public func callEnded(route: String, seconds: Double, failed: Bool) {
        let metrics = routes.withLock { routes in
            if let known = routes[route] { return known }
            let labels = [mountLabel, ("route", route)]
            let made = RouteMetrics(
                requests: CoreMetrics.Counter(label: "dbxmount_dropbox_requests_total", dimensions: labels, factory: factory),
                failures: CoreMetrics.Counter(label: "dbxmount_dropbox_request_failures_total", dimensions: labels, factory: factory),
                duration: CoreMetrics.Timer(label: Self.requestDuration, dimensions: labels, factory: factory))
            routes[route] = made
            return made
        }
        metrics.requests.increment()
        if failed { metrics.failures.increment() }
        metrics.duration.recordNanoseconds(Int64(seconds * 1e9))
    }

    public func operationEnded(_ operation: StaticString, seconds: Double, failed: Bool) {
        // Keyed by the literal's address: no String is made per request (reads come by the
        // thousand per GiB, lookups by the thousand per folder).
        let key = UInt(bitPattern: operation.utf8Start)
        let metrics = operations.withLock { operations in
            if let known = operations[key] { return known }
            let labels = [mountLabel, ("operation", operation.description)]
            let made = OperationMetrics(
                duration: CoreMetrics.Timer(label: Self.operationDuration, dimensions: labels, factory: factory),
                errors: CoreMetrics.Counter(label: "dbxmount_fuse_operation_errors_total", dimensions: labels, factory: factory))
            operations[key] = made
            return made
        }
        metrics.duration.recordNanoseconds(Int64(seconds * 1e9))
        if failed { metrics.errors.increment() }
    }

    // MARK: - Scrape

    /// The Prometheus text exposition, after bringing the totals and the mount's state up to date.
    func exposition(of mount: Mount) -> [UInt8] {
        let usage = mount.filesystem.usage
        let sync = mount.filesystem.syncProgress
        let labels = [mountLabel]
        /// Adds to the counter `name` what `total` grew by since the last scrape.
        func count(_ name: String, _ total: UInt64, exportedAs field: WritableKeyPath<ExportedTotals, UInt64>) {
            let increase = exported.withLock { totals -> UInt64 in
                defer { totals[keyPath: field] = total }
                return total &- totals[keyPath: field]
            }
            CoreMetrics.Counter(label: name, dimensions: labels, factory: factory).increment(by: Int64(increase))
        }
        if let meter = mount.meter {
            count("dbxmount_download_bytes_total", meter.bytesDownloaded, exportedAs: \.downloaded)
            count("dbxmount_dropbox_rate_limited_total", meter.rateLimited, exportedAs: \.rateLimited)
        }
        count("dbxmount_page_cache_dropped_bytes_total", usage.droppedPageBytes, exportedAs: \.droppedPages)
        func gauge(_ name: String, _ value: Double) {
            CoreMetrics.Gauge(label: name, dimensions: labels, factory: factory).record(value)
        }
        gauge("dbxmount_entries", Double(usage.entries))
        gauge("dbxmount_tree_bytes", Double(usage.treeBytes))
        gauge("dbxmount_resident_memory_bytes", Double(ProcessMemory.residentBytes()))
        gauge("dbxmount_readahead_bytes", Double(usage.readAheadBytes))
        gauge("dbxmount_readahead_budget_bytes", Double(usage.readAheadBudget))
        gauge("dbxmount_open_files", Double(usage.openFiles))
        gauge("dbxmount_open_directories", Double(usage.openDirectories))
        if let blocks = usage.blockCacheBytes { gauge("dbxmount_block_cache_bytes", Double(blocks)) }
        if let listing = sync.firstListing {
            gauge("dbxmount_first_listing_entries", Double(listing.entries))
            gauge("dbxmount_first_listing_done", listing.done ? 1 : 0)
        }
        gauge("dbxmount_change_feed_live", sync.feedLive ? 1 : 0)
        gauge("dbxmount_offline", sync.offline ? 1 : 0)
        return Self.withHelp(registry.emitToBuffer())
    }

    /// What each family measures, as its `# HELP` line says (`promtool check metrics` requires
    /// one). swift-metrics' handles carry no help text, so the lines go in before each family's
    /// `# TYPE` line of the exposition.
    static let help: [String: String] = [
        "dbxmount_dropbox_requests_total": "Dropbox API calls made, by route.",
        "dbxmount_dropbox_request_failures_total": "Dropbox API calls that failed for good, after retries, by route.",
        requestDuration: "Time each Dropbox API call took, retries included, by route.",
        operationDuration: "Time the mount took to answer each FUSE request, by operation.",
        "dbxmount_fuse_operation_errors_total": "FUSE requests answered with an error, by operation.",
        "dbxmount_download_bytes_total": "File bytes downloaded from Dropbox.",
        "dbxmount_dropbox_rate_limited_total": "Dropbox answers that asked the mount to slow down (HTTP 429).",
        "dbxmount_page_cache_dropped_bytes_total": "Page cache the kernel was told to drop behind sequential readers.",
        "dbxmount_entries": "Files and folders in the mount's metadata tree.",
        "dbxmount_tree_bytes": "Memory the metadata tree takes.",
        "dbxmount_resident_memory_bytes": "Resident memory of the mount's process.",
        "dbxmount_readahead_bytes": "Read-ahead memory in use.",
        "dbxmount_readahead_budget_bytes": "Read-ahead memory the mount may use.",
        "dbxmount_open_files": "Files open on the mount.",
        "dbxmount_open_directories": "Folders open on the mount.",
        "dbxmount_block_cache_bytes": "Bytes kept in the on-disk block cache.",
        "dbxmount_first_listing_entries": "Entries the first listing of the mount has received.",
        "dbxmount_first_listing_done": "1 once the first listing of the mount is complete.",
        "dbxmount_change_feed_live": "1 while the change feed follows Dropbox's changes.",
        "dbxmount_offline": "1 while Dropbox cannot be reached.",
    ]

    /// `exposition` with a `# HELP` line before each family's `# TYPE` line.
    static func withHelp(_ exposition: [UInt8]) -> [UInt8] {
        let typeLine = Array("# TYPE ".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(exposition.count + 2048)
        for line in exposition.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            if line.starts(with: typeLine) {
                let name = String(decoding: line.dropFirst(typeLine.count).prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)
                if let text = help[name] { out += Array("# HELP \(name) \(text)\n".utf8) }
            }
            out += line
            out.append(UInt8(ascii: "\n"))
        }
        out.removeLast()   // the split's last piece had no newline after it
        return out
    }
}
