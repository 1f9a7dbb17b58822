// How fast one stream's bytes have been arriving lately, and the most it may keep in flight for
// that: a couple of seconds of what actually arrives, more while more bytes in flight still bring
// more.
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
// which nothing arrived (waiting for the first byte after a pause). What each part gets comes
// from the parts that received bytes all through the interval (`perPartRate`); the stream's rate
// over its parts would count a part that began or ended within it as whole.
//
// The cap. Settled on a slow link: `rate × (round trip + horizon)`, the rate's seconds, never under
// `minimum`. On a fast link it lies far above the floor and changes nothing (300 MB/s at 100 ms:
// 630 MB).
//
// Growing, then settled. The rate alone cannot tell a slow link from slow connections: when a far
// server gives each connection a few MB/s (a TCP window per round trip), the stream's rate is the
// sum of its parts', and only more parts in flight bring more. Capped at its rate's seconds alone
// such a stream grew by about one part per part's transfer (measured: 160 MiB through 3 MB/s per
// connection at 100 ms, 20 s and more, against 6.1 s with the whole floor in flight). So a stream
// first grows, as TCP's startup does: its cap allows `growthGain` times its rate's seconds, and
// doubles after every round (long enough for the parts just allowed to start arriving) in which
// the rate rose by `growthStep`. What ends the growth tells the two apart:
// - each part receiving bytes got markedly less than before the round (`sharedDrop`): the parts
//   share one link, more of them only slow the one the reader waits for, and the stream settles
//   at its rate's seconds;
// - three rounds in a row brought little more while each part got as much as before: the parts
//   do not share, something else bounds them (the window's floor, the budget), and the stream
//   settles holding the smallest cap that reached nearly its best rate, so that it keeps the
//   parts that brought it (its rate's seconds alone would drop some, then more with the rate
//   they brought).
// Every `probeEvery` seconds a settled stream allows `probeGain` more for a round; if that brings
// more without slowing each part (another stream ended, say), it grows again. A new stream starts
// from the last stream's pace: the link is the same.

import Foundation

struct StreamPace: Sendable {
    /// Shortest interval measured: shorter ones are mostly scheduling noise.
    static let sampleInterval = 0.1
    /// Seconds of the stream's rate kept in flight beyond a round trip.
    static let horizon = 2.0
    /// How much a new sample moves the rate.
    static let weight = 0.5
    /// While growing, the cap allows this many times the rate.
    static let growthGain = 2.0
    /// A round in which the rate rose by less than this factor is flat.
    static let growthStep = 1.25
    /// Flat rounds in a row that end the growth. Three, not two: a new stream's first round is
    /// mostly flat (its ramp's parts have not all begun arriving), and its second rose by 1.33×
    /// in traces of slow connections, close enough to `growthStep` that a slower second round
    /// settled the stream at six parts where sixteen bring more (the real-mount test of slow
    /// connections, about one run in twenty on this machine).
    static let flatRoundsToSettle = 3
    /// Shortest round, and round trips per round: parts allowed at a round's start must have
    /// begun arriving by its end.
    static let shortestRound = 0.5
    static let roundTripsPerRound = 2.0
    /// A settled stream allows this much more for one round every `probeEvery` seconds.
    static let probeGain = 1.25
    static let probeEvery = 8.0
    /// A probe that raised the rate by this factor restarts the growth.
    static let probeStep = 1.1
    /// A round after which each receiving part got less than this fraction of what it got
    /// before: the parts share one link, and more of them only slow the one the reader waits for.
    static let sharedDrop = 0.8
    /// A round whose rate came within this fraction of the best reached it.
    static let nearBest = 0.8
    /// Rounds of a growth remembered: a rate that keeps rising and falling by a quarter (a reader
    /// with pauses) may keep a stream growing for as long as it reads.
    static let roundsKept = 16

    enum Phase: Sendable, Equatable {
        case growing, probing, settled
    }

    /// Bytes per second that arrived in the stream's parts, smoothed; nil before any sample.
    private(set) var rate: Double?
    /// The same per part receiving bytes, smoothed: a slow link divides it among more parts,
    /// slow connections do not.
    private(set) var perPart: Double?
    private(set) var phase = Phase.growing
    /// While growing: the bytes the cap allows, doubled by every round that brought more.
    private var growthCap: Double?
    /// Once settled: the bytes the cap allows at least.
    private(set) var held: Double?
    /// When the current interval began, the stream's arrived bytes then, and its parts not done.
    private var intervalStart: (at: ContinuousClock.Instant, arrived: UInt64, parts: PartsFilled)?
    /// The current round: when it began, the rates then, and the bytes its cap allowed.
    private var round: (start: ContinuousClock.Instant, rate: Double, perPart: Double, cap: Double)?
    private var flatRounds = 0
    /// The rounds of the current growth: the bytes each allowed, and the rate it reached.
    private var grown: [(cap: Double, reached: Double)] = []
    private var settledAt: ContinuousClock.Instant?

    init(rate: Double? = nil) {
        self.rate = rate.flatMap { $0.isFinite && $0 > 0 ? $0 : nil }
    }

    /// The same measures for a new stream over the same link: its intervals and rounds start afresh.
    func continuing() -> StreamPace {
        var pace = self
        pace.intervalStart = nil
        pace.round = nil
        pace.grown = []
        pace.flatRounds = 0
        pace.growthCap = nil
        if pace.phase == .probing { pace.phase = .settled }
        pace.settledAt = nil
        return pace
    }

    /// Seconds of the rate kept in flight at a round trip.
    private static func seconds(_ roundTrip: Double?) -> Double {
        max(0, roundTrip ?? 0) + horizon
    }

    /// The bytes the cap allows now, before its minimum; nil before any sample.
    private func allowed(roundTrip: Double?) -> Double? {
        guard let rate else { return nil }
        let paced = rate * Self.seconds(roundTrip)
        switch phase {
        case .growing: return max(growthCap ?? 0, paced * Self.growthGain)
        case .settled: return max(paced, held ?? 0)
        case .probing: return max(paced, held ?? 0) * Self.probeGain
        }
    }

    /// A stream's parts not done yet (asked for or receiving bytes): each one's bytes filled so
    /// far, by its first offset in the file.
    typealias PartsFilled = [UInt64: Int]

    /// Called at each read with the stream's bytes arrived so far (never decreasing), whether any
    /// of its parts is still being filled, and its parts not done. Returns true when the rate
    /// moved. `downloading` and `parts` ask every part, so they are asked only when an interval
    /// starts or ends, not at every read.
    mutating func observe(arrived: UInt64, downloading: @autoclosure () -> Bool, parts: @autoclosure () -> PartsFilled = [:],
                          roundTrip: Double? = nil, at now: ContinuousClock.Instant) -> Bool {
        if let start = intervalStart, arrived >= start.arrived, (now - start.at).seconds < Self.sampleInterval {
            return false
        }
        guard downloading() else {
            intervalStart = nil
            return false
        }
        let partsNow = parts()
        guard let start = intervalStart, arrived >= start.arrived else {
            intervalStart = (now, arrived, partsNow)
            return false
        }
        let elapsed = (now - start.at).seconds
        intervalStart = (now, arrived, partsNow)
        guard arrived > start.arrived else { return false }
        let sample = Double(arrived - start.arrived) / elapsed
        rate = rate.map { $0 + Self.weight * (sample - $0) } ?? sample
        let partSample = Self.perPartRate(from: start.parts, to: partsNow, elapsed: elapsed)
            ?? sample / Double(max(1, Self.partsThatReceived(from: start.parts, to: partsNow)))
        perPart = perPart.map { $0 + Self.weight * (partSample - $0) } ?? partSample
        endRoundIfDue(at: now, roundTrip: roundTrip)
        return true
    }

    private mutating func endRoundIfDue(at now: ContinuousClock.Instant, roundTrip: Double?) {
        guard let rate, let perPart else { return }
        guard let current = round else {
            if phase == .settled, settledAt == nil { settledAt = now }
            if phase == .growing {
                // Where the growth starts from: if more in flight never brings more, the stream
                // settles back here, at its rate's seconds.
                grown = [(rate * Self.seconds(roundTrip), rate)]
                growthCap = allowed(roundTrip: roundTrip)
            }
            round = (now, rate, perPart, allowed(roundTrip: roundTrip) ?? 0)
            return
        }
        let length = max(Self.shortestRound, Self.roundTripsPerRound * max(0, roundTrip ?? 0))
        guard (now - current.start).seconds >= length else { return }
        let shared = perPart < current.perPart * Self.sharedDrop
        switch phase {
        case .growing:
            // The cap follows the rate within a round too: the most it allowed is what the round's
            // rate came from.
            grown.append((max(current.cap, allowed(roundTrip: roundTrip) ?? 0), rate))
            if grown.count > Self.roundsKept { grown.removeFirst() }
            if shared {
                // The parts share one link: the stream's rate is all there is, and its seconds are
                // what the stream keeps.
                settle(at: now, holding: nil)
            } else if rate >= current.rate * Self.growthStep {
                flatRounds = 0
                growthCap = current.cap * 2
            } else {
                flatRounds += 1
                if flatRounds >= Self.flatRoundsToSettle { settle(at: now, holding: smallestCapNearBest) }
            }
        case .probing:
            if !shared, rate >= current.rate * Self.probeStep {
                phase = .growing
                flatRounds = 0
                grown = [(current.cap, rate)]
                growthCap = current.cap * 2
            } else {
                // Nothing more there. A rate that fell since (another stream on the link) lowers
                // what is held, never under what growing from it would allow.
                held = held.map { min($0, rate * Self.seconds(roundTrip) * Self.growthGain) }
                phase = .settled
                settledAt = now
            }
        case .settled:
            if let settledAt, (now - settledAt).seconds >= Self.probeEvery { phase = .probing }
        }
        round = (now, rate, perPart, allowed(roundTrip: roundTrip) ?? 0)
    }

    /// What each part got over an interval, from the parts that received bytes all through it
    /// (some already at its start, not done at its end). A part that began or ended within the
    /// interval got bytes for only some of it. Dividing the stream's rate by the parts receiving
    /// at the interval's end counts a part just begun as whole and the bytes of one just ended in
    /// no part: 4 MB/s connections seemed to get 6.2 MB/s in one interval and 4.3 in the next,
    /// the stream took its connections for a shared link and stopped at five parts (traced in
    /// ReadEngineTests, slow connections; with `--direct-io`, whose reads come one at a time,
    /// 128 MiB at 3 MB/s per connection took 41 s instead of 6.2). Nil when no part received all
    /// through it.
    static func perPartRate(from start: PartsFilled, to end: PartsFilled, elapsed: Double) -> Double? {
        var parts = 0
        var bytes = 0
        for (offset, filled) in end {
            guard let before = start[offset], before > 0, filled >= before else { continue }
            parts += 1
            bytes += filled - before
        }
        guard parts > 0, elapsed > 0 else { return nil }
        return Double(bytes) / Double(parts) / elapsed
    }

    /// The parts that received bytes within an interval, whole or not: where no part received all
    /// through it (reads and refills, which observe the pace, may come a second apart on a slow
    /// link), the stream's rate over these stands in for each part's, below what each got.
    static func partsThatReceived(from start: PartsFilled, to end: PartsFilled) -> Int {
        let doneSince = start.keys.count { end[$0] == nil }
        let grew = end.count { offset, filled in filled > (start[offset] ?? 0) }
        return doneSince + grew
    }

    /// Once more in flight brings no more, the least that brought nearly the best rate: more was
    /// not needed, less would lose parts that brought bytes.
    private var smallestCapNearBest: Double? {
        let best = grown.map(\.reached).max() ?? 0
        return grown.filter { $0.reached >= Self.nearBest * best }.map(\.cap).min()
    }

    private mutating func settle(at now: ContinuousClock.Instant, holding: Double?) {
        held = holding
        grown = []
        flatRounds = 0
        growthCap = nil
        phase = .settled
        settledAt = now
    }

    /// The most bytes the stream should keep ahead of its reader; nil before any sample.
    func windowCap(roundTrip: Double?, minimum: UInt64) -> UInt64? {
        guard let allowed = allowed(roundTrip: roundTrip) else { return nil }
        return max(minimum, UInt64(min(allowed, Double(UInt64.max >> 2))))
    }
}
