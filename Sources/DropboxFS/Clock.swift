/// The current time as seconds on a monotonic clock. Injected so tests can drive TTLs.
public typealias MonotonicSeconds = @Sendable () -> Double

public enum SystemClock {
    private static let origin = ContinuousClock.now
    /// Seconds since process start on the continuous clock, which never jumps with wall time.
    public static let monotonic: MonotonicSeconds = {
        let elapsed = ContinuousClock.now - origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}
