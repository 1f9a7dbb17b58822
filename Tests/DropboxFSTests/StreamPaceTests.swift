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

    @Test func aSlowStreamKeepsItsRoundTripAndTwoSecondsOfItsRateInFlight() {
        var pace = StreamPace()
        _ = pace.observe(arrived: 0, downloading: true, at: at(0))
        #expect(observe(&pace, arrived: 3_000_000, downloading: true, at: at(0.5)))
        #expect(pace.rate == 6e6)
        #expect(pace.windowCap(roundTrip: 0.1, minimum: 8 * Self.MiB) == 12_600_000)
        // Never under the minimum, however slow.
        #expect(pace.windowCap(roundTrip: 0.1, minimum: 16 * Self.MiB) == 16 * Self.MiB)
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
