// What the read engine has measured of the link to Dropbox, and the part size and window it
// derives from that, instead of fixed constants.
//
// A Range request spends one round trip (`latency`: request sent to first byte) waiting, then
// transfers its part at `rate` bytes per second. Two consequences:
// - Part size. With parts of at least `rate × latency` bytes, a request spends at most half its
//   time waiting, so the number of requests (and Dropbox's per-request cost and rate limit) stays
//   low at long round trips. Parts are never smaller than `ReadAheadOptions.basePartSize`, the
//   size tuned at short round trips, nor larger than `maxPartSize`, nor than a twelfth of the
//   memory budget: a part's buffer returns to the budget only once the reader has read all of it,
//   so with fewer, larger parts a full budget frees in large steps and the stream stalls between
//   them (measured at 100 ms: 32 MiB parts in a 240 MiB budget left the link idle for 170 ms
//   after the first window; 16 MiB parts did not).
// - Window. To keep `partsTransferring` parts moving at every moment, as at a short round trip,
//   a stream needs that many more in flight for every part's worth of round trip: its window
//   (bytes scheduled ahead of the reader, all of them in flight) is
//   `partsTransferring × (part + rate × latency)`, the bandwidth-delay product per transferring
//   part plus the part itself. It is always within the stream's share of the one memory budget,
//   and never below `maxWindow` (the window tuned at round trips up to 50 ms) grown in
//   proportion to a longer round trip, up to twice. That floor is for a link shared by the parts
//   in flight: each then measures a fraction of the link's rate, so the formula above asks for
//   too little, and the reader waits on the part ahead of it (measured through a 300 MB/s cap at
//   100 ms, medians of 3 in alternating runs: 230–232 MB/s with 64 MiB, 250–253 with 128).
//   Sizing the window from the link's whole rate instead feeds back on itself (a wider window
//   puts more parts on the link, each measures less, and the window grows again) until the
//   budget is full. Twice, not more: on a slow, far link a window is bytes downloaded ahead that
//   a seek throws away. On a link slower than the floor is wide (tens of MB/s), each stream's
//   own pace caps its window below the floor (`StreamPace`).
// A fresh mount knows nothing yet: it starts from the short-round-trip sizes, and the first parts'
// measurements move it within a few requests (each sample weighs a quarter).

import Foundation

struct LinkEstimate: Sendable, Equatable {
    /// Seconds from sending a request to its first body byte, smoothed; nil before any sample.
    private(set) var latency: Double?
    /// Bytes per second of one request once its body flows, smoothed; nil before any sample.
    private(set) var rate: Double?

    /// How much a new sample moves the estimate.
    static let weight = 0.25
    /// Bodies shorter than this say more about scheduling than about the link's rate.
    static let shortestRateSample = 256 << 10

    /// One finished request: `bytes` of body, `firstByte` seconds after it was sent, the last byte
    /// `transfer` seconds after the first.
    mutating func record(firstByte: Double, bytes: Int, transfer: Double) {
        guard firstByte.isFinite, firstByte >= 0 else { return }
        latency = Self.smooth(latency, firstByte)
        if bytes >= Self.shortestRateSample, transfer.isFinite, transfer > 0 {
            rate = Self.smooth(rate, Double(bytes) / transfer)
        }
    }

    private static func smooth(_ old: Double?, _ sample: Double) -> Double {
        guard let old else { return sample }
        return old + weight * (sample - old)
    }

    /// Bytes one request could have transferred in the time it waited for its first byte.
    var bytesPerRoundTrip: UInt64 {
        guard let latency, let rate else { return 0 }
        return UInt64(min(latency * rate, Double(UInt64.max >> 2)))
    }

    /// Parts a full budget holds at least.
    static let partsPerBudget: UInt64 = 12

    /// The largest part a stream grows to now, with `budget` bytes of read-ahead for all streams.
    func partSize(_ options: ReadAheadOptions, budget: UInt64) -> UInt64 {
        let wanted = bytesPerRoundTrip
        var size = options.basePartSize
        while size < wanted && size < options.maxPartSize { size <<= 1 }
        var budgetCap = options.initialWindow
        while budgetCap * 2 <= budget / Self.partsPerBudget { budgetCap <<= 1 }
        return min(size, options.maxPartSize, budgetCap)
    }

    /// The most a stream reads ahead now, before its share of the budget.
    func window(_ options: ReadAheadOptions, budget: UInt64) -> UInt64 {
        let perPart = partSize(options, budget: budget) + bytesPerRoundTrip
        return max(windowFloor(options), UInt64(options.partsTransferring) * perPart)
    }

    /// The round trip `ReadAheadOptions.maxWindow` was tuned at; longer ones raise the floor.
    static let tunedRoundTrip = 0.05
    /// The most a long round trip multiplies the floor by.
    static let floorGrowth = 2.0

    /// `maxWindow`, grown in proportion to a round trip longer than the one it was tuned at, up
    /// to `floorGrowth` times.
    private func windowFloor(_ options: ReadAheadOptions) -> UInt64 {
        guard let latency, latency > Self.tunedRoundTrip else { return options.maxWindow }
        return UInt64(Double(options.maxWindow) * min(latency / Self.tunedRoundTrip, Self.floorGrowth))
    }
}
