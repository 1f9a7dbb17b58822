import NIOCore
import Synchronization

/// The knobs that can change while the server runs (see `POST /__admin/knobs`).
struct Knobs: Sendable {
    var latency: Duration
    var bandwidthBytesPerSecond: Int?
    var connectionBandwidthBytesPerSecond: Int?
    var failureRate: Double
    var truncateRate: Double
    var requestsPerSecond: Int?
    var pageSizeCap: Int
    var rangePastEnd: RangePastEnd
    var longpollBackoff: Int?
    var longpollMaxWait: Int?
    /// Whether sharing/get_shared_link_file honours Range (false: a whole 200, which a client must cope with).
    var linkRange: Bool

    init(_ c: EmulatorConfiguration) {
        latency = c.latency
        bandwidthBytesPerSecond = c.bandwidthBytesPerSecond
        connectionBandwidthBytesPerSecond = c.connectionBandwidthBytesPerSecond
        failureRate = c.failureRate
        truncateRate = c.truncateRate
        requestsPerSecond = c.requestsPerSecond
        pageSizeCap = c.pageSizeCap
        rangePastEnd = c.rangePastEnd
        longpollBackoff = c.longpollBackoff
        longpollMaxWait = c.longpollMaxWait
        linkRange = c.sharedLinkRange
    }

    var json: JSON {
        .object([
            ("latency_ms", .int(Int64(latency.components.seconds * 1000 + latency.components.attoseconds / 1_000_000_000_000_000))),
            ("bandwidth", bandwidthBytesPerSecond.map { .int(Int64($0)) } ?? .null),
            ("connection_bandwidth", connectionBandwidthBytesPerSecond.map { .int(Int64($0)) } ?? .null),
            ("fail_rate", .double(failureRate)),
            ("truncate_rate", .double(truncateRate)),
            ("rate_limit", requestsPerSecond.map { .int(Int64($0)) } ?? .null),
            ("page_size", .int(Int64(pageSizeCap))),
            ("range_past_end", .string(rangePastEnd.rawValue)),
            ("longpoll_backoff", longpollBackoff.map { .int(Int64($0)) } ?? .null),
            ("longpoll_max_wait", longpollMaxWait.map { .int(Int64($0)) } ?? .null),
            ("link_range", .bool(linkRange)),
        ])
    }

    /// Applies the fields present in `patch`; `null` clears an optional knob.
    mutating func apply(_ patch: JSON) -> String? {
        guard case .object(let pairs) = patch else { return "expected a JSON object" }
        for (key, value) in pairs {
            func optionalInt() -> Int?? {
                if value.isNull { return .some(nil) }
                guard let i = value.intValue, i >= 0 else { return nil }
                return .some(Int(i))
            }
            func rate() -> Double? {
                let d: Double? = switch value { case .double(let d): d; case .int(let i): Double(i); default: nil }
                guard let d, d >= 0, d <= 1 else { return nil }
                return d
            }
            switch key {
            case "latency_ms":
                guard let ms = value.intValue, ms >= 0 else { return "latency_ms: expected a non-negative integer" }
                latency = .milliseconds(ms)
            case "bandwidth":
                guard let v = optionalInt() else { return "bandwidth: expected a non-negative integer or null" }
                bandwidthBytesPerSecond = v == 0 ? nil : v
            case "connection_bandwidth":
                guard let v = optionalInt() else { return "connection_bandwidth: expected a non-negative integer or null" }
                connectionBandwidthBytesPerSecond = v == 0 ? nil : v
            case "fail_rate":
                guard let r = rate() else { return "fail_rate: expected a number in [0, 1]" }
                failureRate = r
            case "truncate_rate":
                guard let r = rate() else { return "truncate_rate: expected a number in [0, 1]" }
                truncateRate = r
            case "rate_limit":
                guard let v = optionalInt() else { return "rate_limit: expected a non-negative integer or null" }
                requestsPerSecond = v == 0 ? nil : v
            case "page_size":
                guard let v = value.intValue, v >= 1 else { return "page_size: expected a positive integer" }
                pageSizeCap = Int(v)
            case "link_range":
                guard let b = value.boolValue else { return "link_range: expected a boolean" }
                linkRange = b
            case "range_past_end":
                guard let s = value.stringValue, let r = RangePastEnd(rawValue: s) else { return "range_past_end: expected \"416\" or \"409\"" }
                rangePastEnd = r
            case "longpoll_backoff":
                guard let v = optionalInt() else { return "longpoll_backoff: expected a non-negative integer or null" }
                longpollBackoff = v
            case "longpoll_max_wait":
                guard let v = optionalInt() else { return "longpoll_max_wait: expected a non-negative integer or null" }
                longpollMaxWait = v
            default:
                return "unknown knob \(key)"
            }
        }
        return nil
    }
}

/// SplitMix64: tiny, fast and fully determined by the seed, so a failing run can be replayed.
struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}

enum InjectedFault: Sendable { case status500, status503, status429 }

/// Counters, fault dice, the rate limiter and the bandwidth bucket: the server-wide state that
/// every connection shares. Each piece has its own lock; none is held across I/O.
final class ServerState: Sendable {
    let knobs: Mutex<Knobs>
    private let dice: Mutex<SeededGenerator>
    private let stats = Mutex(Stats())
    private let window = Mutex<(second: Int64, count: Int)>((0, 0))
    private let bucket = Mutex<NIODeadline>(.uptimeNanoseconds(0))

    struct Stats {
        var requests: [String: Int] = [:]
        var bytesSent: Int = 0
        var downloadBytes: Int = 0
        var connections: Int = 0
        /// Requests answered 429 by the rate limit (`--rate-limit`), not by injected faults.
        var rateLimited: Int = 0
        /// Faults `--fail-rate` and `--truncate-rate` injected, so a test can tell they happened.
        var injectedFailures: Int = 0
        var truncatedBodies: Int = 0
        /// Download bodies being sent now, and the most at once: how many Range requests a client
        /// keeps in flight.
        var downloadsInFlight: Int = 0
        var downloadPeak: Int = 0
    }

    init(configuration: EmulatorConfiguration) {
        knobs = Mutex(Knobs(configuration))
        dice = Mutex(SeededGenerator(seed: configuration.seed))
    }

    var currentKnobs: Knobs { knobs.withLock { $0 } }

    func countRequest(_ route: String) { stats.withLock { $0.requests[route, default: 0] += 1 } }
    func countConnection() { stats.withLock { $0.connections += 1 } }
    func countBytes(_ n: Int, download: Bool) {
        stats.withLock { s in
            s.bytesSent += n
            if download { s.downloadBytes += n }
        }
    }
    /// Bodies still being sent stay counted: they are still going.
    func resetStats() {
        stats.withLock { s in s = Stats(connections: 0, downloadsInFlight: s.downloadsInFlight, downloadPeak: s.downloadsInFlight) }
    }

    func downloadStarted() {
        stats.withLock { s in
            s.downloadsInFlight += 1
            s.downloadPeak = max(s.downloadPeak, s.downloadsInFlight)
        }
    }

    func downloadEnded() { stats.withLock { $0.downloadsInFlight -= 1 } }

    var statsJSON: JSON {
        stats.withLock { s in
            .object([
                ("requests", .object(s.requests.sorted { $0.key < $1.key }.map { ($0.key, .int(Int64($0.value))) })),
                ("bytes_sent", .int(Int64(s.bytesSent))),
                ("download_bytes", .int(Int64(s.downloadBytes))),
                ("connections", .int(Int64(s.connections))),
                ("rate_limited", .int(Int64(s.rateLimited))),
                ("injected_failures", .int(Int64(s.injectedFailures))),
                ("truncated_bodies", .int(Int64(s.truncatedBodies))),
                ("download_peak", .int(Int64(s.downloadPeak))),
            ])
        }
    }

    /// One draw per API request, in arrival order, so a seed replays the same faults.
    func drawFault() -> InjectedFault? {
        let rate = knobs.withLock { $0.failureRate }
        guard rate > 0 else { return nil }
        let fault: InjectedFault? = dice.withLock { rng in
            guard rng.unit() < rate else { return nil }
            switch rng.next() % 3 {
            case 0: return .status500
            case 1: return .status503
            default: return .status429
            }
        }
        if fault != nil { stats.withLock { $0.injectedFailures += 1 } }
        return fault
    }

    /// For a download body of `length` bytes: where to cut it, or nil to send it whole.
    func drawTruncation(length: Int64) -> Int64? {
        let rate = knobs.withLock { $0.truncateRate }
        guard rate > 0, length > 0 else { return nil }
        let cut: Int64? = dice.withLock { rng in
            guard rng.unit() < rate else { return nil }
            return Int64(rng.next() % UInt64(length))
        }
        if cut != nil { stats.withLock { $0.truncatedBodies += 1 } }
        return cut
    }

    /// Fixed one-second windows; rejected requests count too, as on Dropbox.
    func admitRequest() -> Bool {
        guard let limit = knobs.withLock({ $0.requestsPerSecond }) else { return true }
        let second = Int64(NIODeadline.now().uptimeNanoseconds / 1_000_000_000)
        let admitted = window.withLock { w in
            if w.second != second { w = (second, 0) }
            w.count += 1
            return w.count <= limit
        }
        if !admitted { stats.withLock { $0.rateLimited += 1 } }
        return admitted
    }

    /// Reserves `bytes` of the global bandwidth budget; returns how long to wait before sending.
    func reserveBandwidth(_ bytes: Int) -> TimeAmount {
        guard let rate = knobs.withLock({ $0.bandwidthBytesPerSecond }), rate > 0 else { return .zero }
        let now = NIODeadline.now()
        return bucket.withLock { next in
            let start = max(next, now)
            next = start + .nanoseconds(Int64(Double(bytes) / Double(rate) * 1e9))
            return start - now
        }
    }
}
