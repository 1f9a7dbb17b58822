@testable import DropboxFS
import Testing

/// Part size and window from the measured link (issue 16): what the read engine keeps in flight
/// at long round trips, within the one memory budget.
@Suite("Link estimate")
struct LinkEstimateTests {
    static let MiB: UInt64 = 1 << 20
    let options = ReadAheadOptions()
    /// The default read-ahead budget less the reserve for reads fetched on their own.
    let budget: UInt64 = 240 << 20

    @Test func aFreshMountStartsFromTheShortRoundTripSizes() {
        let link = LinkEstimate()
        #expect(link.bytesPerRoundTrip == 0)
        #expect(link.partSize(options, budget: budget) == 8 * Self.MiB)
        #expect(link.window(options, budget: budget) == 64 * Self.MiB)
    }

    @Test func aShortRoundTripKeepsThem() {
        var link = LinkEstimate()
        // 2 ms and 500 MB/s: a megabyte per round trip.
        for _ in 0..<8 { link.record(firstByte: 0.002, bytes: 8 << 20, transfer: 0.0168) }
        #expect(link.partSize(options, budget: budget) == 8 * Self.MiB)
        #expect(link.window(options, budget: budget) == 64 * Self.MiB)
    }

    @Test func aLongRoundTripMeansLargerPartsAndAWiderWindow() {
        var link = LinkEstimate()
        // 100 ms and 300 MB/s per request: 30 MB could have arrived while each request waited.
        for _ in 0..<8 { link.record(firstByte: 0.1, bytes: 16 << 20, transfer: 0.0559) }
        #expect(abs(Double(link.bytesPerRoundTrip) - 30e6) < 1e6)
        // 32 MiB would cover the round trip, but a twelfth of the budget is 20 MiB: 16 MiB parts.
        #expect(link.partSize(options, budget: budget) == 16 * Self.MiB)
        // Four parts transferring, each with its round trip's worth in flight beside it.
        let window = link.window(options, budget: budget)
        #expect(window == 4 * (16 * Self.MiB + link.bytesPerRoundTrip))
        #expect(window > 180_000_000)
    }

    @Test func aLongRoundTripRaisesTheFloorOfAWindowOnASharedLink() {
        // 100 ms, and 37 MB/s per request: eight parts sharing a 300 MB/s link. The parts'
        // formula asks for 4 × (8 MiB + 3.7 MB), under the 64 MiB tuned at 50 ms; the floor is
        // twice that at twice the round trip.
        var shared = LinkEstimate()
        for _ in 0..<8 { shared.record(firstByte: 0.1, bytes: 8 << 20, transfer: 0.2267) }
        #expect(shared.partSize(options, budget: budget) == 8 * Self.MiB)
        #expect(shared.window(options, budget: budget) == 128 * Self.MiB)
        // 300 ms: still twice, not six times (a seek discards what is ahead).
        var far = LinkEstimate()
        for _ in 0..<8 { far.record(firstByte: 0.3, bytes: 8 << 20, transfer: 1.0) }
        #expect(far.window(options, budget: budget) == 128 * Self.MiB)
        // 70 ms: in proportion.
        var nearer = LinkEstimate()
        for _ in 0..<8 { nearer.record(firstByte: 0.07, bytes: 8 << 20, transfer: 1.0) }
        #expect(nearer.window(options, budget: budget) == UInt64(Double(64 * Self.MiB) * 1.4))
    }

    @Test func aLargerBudgetLetsPartsGrowToTheirCeiling() {
        var link = LinkEstimate()
        for _ in 0..<8 { link.record(firstByte: 0.3, bytes: 32 << 20, transfer: 0.1) }
        #expect(link.partSize(options, budget: 1 << 30) == options.maxPartSize)
    }

    @Test func aSmallBudgetKeepsPartsSmall() {
        var link = LinkEstimate()
        for _ in 0..<8 { link.record(firstByte: 0.1, bytes: 16 << 20, transfer: 0.0559) }
        // 16 MiB of read-ahead: twelve parts of at most 1 MiB.
        #expect(link.partSize(options, budget: 16 * Self.MiB) == Self.MiB)
    }

    @Test func shortBodiesMeasureTheRoundTripButNotTheRate() {
        var link = LinkEstimate()
        link.record(firstByte: 0.05, bytes: 4096, transfer: 0.00001)
        #expect(link.latency == 0.05)
        #expect(link.rate == nil, "a 4 KiB body says nothing about the link's rate")
        #expect(link.bytesPerRoundTrip == 0)
    }

    @Test func oneOutlierMovesTheEstimateByAQuarter() {
        var link = LinkEstimate()
        link.record(firstByte: 0.1, bytes: 8 << 20, transfer: 0.1)
        link.record(firstByte: 0.5, bytes: 8 << 20, transfer: 0.1)
        #expect(abs(link.latency! - 0.2) < 1e-9)
        link.record(firstByte: -1, bytes: 8 << 20, transfer: 0.1)
        link.record(firstByte: .nan, bytes: 8 << 20, transfer: 0.1)
        #expect(abs(link.latency! - 0.2) < 1e-9, "impossible samples are ignored")
    }
}
