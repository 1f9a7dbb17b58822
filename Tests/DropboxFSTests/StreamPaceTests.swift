@testable import DropboxFS
import Testing

/// A stream keeps a couple of seconds of what actually arrives in flight, so that on a slow link
/// the part its reader waits for is not starved by the parts behind it.
@Suite("Stream pace")
struct StreamPaceTests {
    static let MiB: UInt64 = 1 << 20
    let t0 = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant {
        t0 + .nanoseconds(Int64(seconds * 1e9))
    }

    /// `pace.observe`, outside `#expect` (which cannot call a mutating method).
    func observe(_ pace: inout StreamPace, arrived: UInt64, downloading: Bool, at now: ContinuousClock.Instant) -> Bool {
        pace.observe(arrived: arrived, downloading: downloading, at: now)
    }

    @Test func aStreamNotYetMeasuredIsNotCapped() {
        var pace = StreamPace()
        #expect(pace.windowCap(roundTrip: 0.05, minimum: 8 * Self.MiB) == nil)
        #expect(!observe(&pace, arrived: 0, downloading: true, at: at(0)))
        #expect(!observe(&pace, arrived: 500_000, downloading: true, at: at(0.05)), "shorter than a sample")
        #expect(pace.windowCap(roundTrip: 0.05, minimum: 8 * Self.MiB) == nil)
    }

    @Test func aGrowingStreamAllowsTwiceItsRatesSeconds() {
        var pace = StreamPace()
        #expect(pace.phase == .growing)
        _ = pace.observe(arrived: 0, downloading: true, at: at(0))
        #expect(observe(&pace, arrived: 3_000_000, downloading: true, at: at(0.5)))
        #expect(pace.rate == 6e6)
        // 6 MB/s x (100 ms + 2 s), twice while it grows.
        #expect(pace.windowCap(roundTrip: 0.1, minimum: 8 * Self.MiB) == 25_200_000)
        // Never under the minimum, however slow.
        #expect(pace.windowCap(roundTrip: 0.1, minimum: 32 * Self.MiB) == 32 * Self.MiB)
    }

    /// A model of the link: for the bytes a stream keeps in flight, the rate that arrives and the
    /// parts receiving it. Parts of 1 MiB, so that the bytes in flight make whole parts closely.
    typealias Link = (_ inFlight: UInt64) -> (rate: Double, receiving: Int)

    /// A link of `rate` shared by every part: more parts, each gets less.
    static func shared(_ rate: Double) -> Link {
        { inFlight in (rate, max(1, Int(inFlight / MiB))) }
    }

    /// A far server: each connection (part) gets `perPart`, whatever the others; the stream keeps
    /// at most `floor` in flight (the window's floor).
    static func slowConnections(_ perPart: Double, floor: UInt64 = 64 * MiB) -> Link {
        { inFlight in
            let parts = max(1, Int(min(inFlight, floor) / MiB))
            return (Double(parts) * perPart, parts)
        }
    }

    /// Feeds `pace` a sample every 0.125 s from `from` to `to` seconds, of what `link` delivers
    /// for the window the pace allows then. Returns the caps it allowed, by time.
    func drive(_ pace: inout StreamPace, from: Double, to: Double, arrived: inout Double, link: Link) -> [(at: Double, cap: UInt64)] {
        var caps: [(Double, UInt64)] = []
        var t = from
        // Each receiving part's bytes, by its place among them: parts beyond the count stop.
        var parts: StreamPace.PartsFilled = [:]
        while t < to {
            let cap = pace.windowCap(roundTrip: 0.1, minimum: 8 * Self.MiB) ?? 8 * Self.MiB
            caps.append((t, cap))
            let (rate, receiving) = link(cap)
            arrived += rate * 0.125
            parts = parts.filter { $0.key < UInt64(receiving) }
            for key in 0..<UInt64(receiving) { parts[key, default: 0] += Int(rate * 0.125) / receiving }
            t += 0.125
            _ = pace.observe(arrived: UInt64(arrived), downloading: true, parts: parts, roundTrip: 0.1, at: at(t))
        }
        return caps
    }

    @Test func aStreamWhosePartsShareOneLinkSettlesAtItsRatesSeconds() {
        // 6 MB/s shared by the stream's parts: more in flight brings nothing, and each part less.
        var pace = StreamPace()
        var arrived = 0.0
        let caps = drive(&pace, from: 0, to: 4, arrived: &arrived, link: Self.shared(6e6))
        #expect(pace.phase == .settled)
        // One round (half a second) showed it: back at 6 MB/s x 2.1 s.
        #expect(caps.filter { $0.at >= 1 }.allSatisfy { $0.cap == 12_600_000 }, "\(caps)")
        #expect(caps.map(\.cap).max()! <= 25_200_000, "growing never allowed more than twice")
    }

    @Test func aStreamWhoseRateFollowsItsBytesInFlightGrowsAndKeepsThem() {
        // Each connection 0.4 MB/s: a 1 MiB part spends 2.6 s in flight, longer than the pace's
        // 2.1 s, and only more parts bring more, up to the 64 MiB floor.
        let floor = 64 * Self.MiB
        var pace = StreamPace()
        var arrived = 0.0
        let caps = drive(&pace, from: 0, to: 20, arrived: &arrived, link: Self.slowConnections(0.4e6, floor: floor))
        let reachedFloor = caps.first { $0.cap >= floor }?.at
        #expect(reachedFloor != nil && reachedFloor! <= 4, "the cap doubled per round that brought more: \(caps)")
        #expect(pace.phase != .growing, "found what the link gives and settled")
        // Settled, it keeps the parts that brought the rate: the rate alone (25.6 MB/s x 2.1 s,
        // 51 MiB) would lose some of them, then more with the rate they brought, down to one.
        #expect(caps.filter { $0.at >= 6 }.allSatisfy { $0.cap >= floor }, "\(caps.map { "\($0.at):\($0.cap >> 20)" })")
    }

    @Test func aSettledStreamProbesAndGrowsAgainWhenMoreInFlightBringsMore() {
        var pace = StreamPace()
        var arrived = 0.0
        _ = drive(&pace, from: 0, to: 3, arrived: &arrived, link: Self.shared(6e6))
        #expect(pace.phase == .settled)
        // The link changes: now each part brings its own 0.5 MB/s (a far server), at first just
        // the 6 MB/s the settled cap's 12 parts bring.
        let caps = drive(&pace, from: 3, to: 20, arrived: &arrived, link: Self.slowConnections(0.5e6))
        let probed = caps.first { $0.cap > 13_000_000 }?.at
        #expect(probed != nil && probed! >= StreamPace.probeEvery, "no probe before \(StreamPace.probeEvery) s settled")
        #expect(caps.last!.cap >= 4 * 12_600_000, "grew again after the probe: \(caps.suffix(20))")
    }

    @Test func aProbeThatBringsNothingSettlesAgain() {
        var pace = StreamPace()
        var arrived = 0.0
        let caps = drive(&pace, from: 0, to: 20, arrived: &arrived, link: Self.shared(6e6))
        // Probed (a quarter more for a round) and settled again, at the same cap.
        #expect(caps.contains { $0.at > 8 && $0.cap == 15_750_000 }, "\(caps.map(\.cap))")
        #expect(caps.last!.cap == 12_600_000)
        #expect(pace.phase == .settled)
    }

    @Test func aNewStreamStartsFromTheLastOnesPace() {
        var pace = StreamPace()
        var arrived = 0.0
        _ = drive(&pace, from: 0, to: 3, arrived: &arrived, link: Self.shared(6e6))
        let next = pace.continuing()
        #expect(next.phase == .settled && next.rate == pace.rate)
        #expect(next.windowCap(roundTrip: 0.1, minimum: 8 * Self.MiB) == 12_600_000,
                "a second file on the same slow link is not requested as if it were fast")
    }

    @Test func eachPartsRateCountsOnlyThePartsThatReceivedAllThroughTheInterval() {
        // Parts at 0 and 8 MiB got 400 kB each in 0.1 s. The one at 16 MiB began within it, the
        // one at 24 MiB ended within it, the one at 32 MiB waits for its first byte.
        let start: StreamPace.PartsFilled = [0: 1_000_000, 8 << 20: 200_000, 16 << 20: 0, 24 << 20: 7_000_000, 32 << 20: 0]
        let end: StreamPace.PartsFilled = [0: 1_400_000, 8 << 20: 600_000, 16 << 20: 50_000, 32 << 20: 0]
        #expect(StreamPace.perPartRate(from: start, to: end, elapsed: 0.1) == 4e6)
        #expect(StreamPace.partsThatReceived(from: start, to: end) == 4, "all but the one still waiting")
        let begun: StreamPace.PartsFilled = [0: 0, 8 << 20: 0]
        #expect(StreamPace.perPartRate(from: begun, to: end, elapsed: 0.1) == nil, "no part received all through it")
        #expect(StreamPace.perPartRate(from: [0: 900], to: [0: 100], elapsed: 0.1) == nil, "a new part at the same offset")
    }

    @Test func aFastStreamIsCappedFarAboveTheWindowsFloor() {
        var pace = StreamPace()
        _ = pace.observe(arrived: 0, downloading: true, at: at(0))
        _ = pace.observe(arrived: 300_000_000, downloading: true, at: at(1))
        // 300 MB/s at 100 ms: 630 MB, well above the 128 MiB floor at that round trip.
        #expect(pace.windowCap(roundTrip: 0.1, minimum: 8 * Self.MiB)! > 600_000_000)
    }

    @Test func aSampleMovesTheRateHalfway() {
        var pace = StreamPace(rate: 10e6)
        _ = pace.observe(arrived: 0, downloading: true, at: at(0))
        _ = pace.observe(arrived: 2_000_000, downloading: true, at: at(1))
        #expect(pace.rate == 6e6)
    }

    @Test func waitingOnTheReaderOrForAFirstByteIsNotASample() {
        var pace = StreamPace()
        _ = pace.observe(arrived: 0, downloading: true, at: at(0))
        _ = pace.observe(arrived: 6_000_000, downloading: true, at: at(1))
        #expect(pace.rate == 6e6)
        // Every part arrived; the reader paused for 10 s. Those seconds say nothing of the link.
        #expect(!observe(&pace, arrived: 6_000_000, downloading: false, at: at(1.5)))
        #expect(!observe(&pace, arrived: 6_000_000, downloading: true, at: at(11)))
        // The next part's round trip: nothing arrives for 0.3 s.
        #expect(!observe(&pace, arrived: 6_000_000, downloading: true, at: at(11.3)))
        #expect(pace.rate == 6e6)
        // Then bytes flow at the same rate: the rate stays.
        #expect(observe(&pace, arrived: 7_200_000, downloading: true, at: at(11.5)))
        #expect(pace.rate == 6e6)
    }

    @Test func impossibleSeedsAndCountsAreIgnored() {
        #expect(StreamPace(rate: .nan).rate == nil)
        #expect(StreamPace(rate: -1).rate == nil)
        var pace = StreamPace()
        _ = pace.observe(arrived: 5_000_000, downloading: true, at: at(0))
        // A count that went back (it never should) restarts the interval instead of underflowing.
        #expect(!observe(&pace, arrived: 1_000_000, downloading: true, at: at(1)))
        #expect(pace.rate == nil)
    }
}
