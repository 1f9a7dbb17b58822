// How fast one stream's bytes have been arriving lately, and the most it may keep in flight for
// that: a couple of seconds of what actually arrives.
//
// Why. The window's floor (`LinkEstimate.window`) keeps 64–128 MiB ahead of a reader, tuned for
// links of hundreds of MB/s. All of a window's parts are requested at once, and on a slower link
// they share it: each gets its fraction, so the part the reader waits for arrives at a fraction
// of the link's rate while the ones behind it take the rest. Measured through a 6 MB/s cap: a
// reader got 15 MiB in its first 11 s (1.4 MB/s), the rest arriving in one burst once the whole
// 64 MiB window had. Bytes in flight beyond what the link delivers in a few seconds buy nothing
// there: they only delay the front.
//
// The measure. The rate is the stream's own: bytes that arrived in its parts (downloaded or read
// from the block cache), counted as they arrive, over intervals of at least `sampleInterval`
// that begin and end with some part of the stream still being filled. An interval that ends with
// the stream waiting on its reader (every part already there) says how fast the reader reads,
// not the link; it is not a sample, and a paused reader leaves the rate as it was. Nor is one in
// which nothing arrived (waiting for the first byte after a pause).
//
// The cap. `rate × (round trip + horizon)`, never under `minimum`. On a fast link it lies far above
// the floor and changes nothing (300 MB/s at 100 ms: 630 MB). A window held at the cap still
// grows whenever more bytes in flight bring more: if each connection is slow rather than the
// link (a far server, each TCP connection limited by its window), a part spends its round trip
// plus its transfer in flight, and as long as that is under `horizon` plus a round trip, the
// bytes the cap allows deliver faster than the rate it was computed from, and the next sample
// raises it (`horizon` is 2 s so that an 8 MiB part at 4 MB/s per connection still grows).

import Foundation

struct StreamPace: Sendable {
    /// Shortest interval measured: shorter ones are mostly scheduling noise.
    static let sampleInterval = 0.1
    /// Seconds of the stream's rate kept in flight beyond a round trip.
    static let horizon = 2.0
    /// How much a new sample moves the rate.
    static let weight = 0.5

    /// Bytes per second that arrived in the stream's parts, smoothed; nil before any sample.
    private(set) var rate: Double?
    /// When the current interval began, and the stream's arrived bytes then.
    private var intervalStart: (at: ContinuousClock.Instant, arrived: UInt64)?

    init(rate: Double? = nil) {
        self.rate = rate.flatMap { $0.isFinite && $0 > 0 ? $0 : nil }
    }

    /// Called at each read with the stream's bytes arrived so far (never decreasing) and whether
    /// any of its parts is still being filled. Returns true when the rate moved. `downloading`
    /// asks every part, so it is asked only when an interval starts or ends, not at every read.
    mutating func observe(arrived: UInt64, downloading: @autoclosure () -> Bool, at now: ContinuousClock.Instant) -> Bool {
        if let start = intervalStart, arrived >= start.arrived, (now - start.at).seconds < Self.sampleInterval {
            return false
        }
        guard downloading() else {
            intervalStart = nil
            return false
        }
        guard let start = intervalStart, arrived >= start.arrived else {
            intervalStart = (now, arrived)
            return false
        }
        let elapsed = (now - start.at).seconds
        intervalStart = (now, arrived)
        guard arrived > start.arrived else { return false }
        let sample = Double(arrived - start.arrived) / elapsed
        rate = rate.map { $0 + Self.weight * (sample - $0) } ?? sample
        return true
    }

    /// The most bytes the stream should keep ahead of its reader; nil before any sample.
    func windowCap(roundTrip: Double?, minimum: UInt64) -> UInt64? {
        guard let rate else { return nil }
        let seconds = max(0, roundTrip ?? 0) + Self.horizon
        return max(minimum, UInt64(min(rate * seconds, Double(UInt64.max >> 2))))
    }
}
