// When to try a call again. All of dbx-mount's calls are reads, so every one is idempotent and may
// be repeated; what limits retrying is time and politeness, not safety.
//
// - 429: wait what the server asked (`Retry-After`); rate-limited requests still count against the
//   limit (perf), so retrying sooner only digs deeper.
// - 5xx and transport failures: exponential backoff with jitter, as py does (`2^n * rand` s), so a
//   thousand FUSE threads do not return in lockstep.
// - Everything else (409 route errors, 400, 401, malformed answers) is an answer, not a hiccup.
//
// The whole call, attempts and waits together, has a deadline: a FUSE request should fail with EIO
// in bounded time rather than hang a user's `ls`. A 429 also pauses every other caller of the same
// client until its Retry-After has passed (DropboxHTTPClient's pacer); the per-call decision stays
// in `delay(after:attempt:transportFailures:remaining:)`.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

public struct RetryPolicy: Sendable {
    /// Attempts per call, the first included.
    public var maxAttempts: Int
    /// Of those, attempts that may end in a transport error (refused, reset, timed out, a body cut
    /// short). Lower than `maxAttempts`: a server that answers 5xx or 429 is reachable and says to
    /// come back, and outlasting a run of those is cheap insurance against a mount-wide EIO; an
    /// unreachable server is an outage, which should surface as EIO (or a cached answer) quickly.
    public var maxTransportAttempts: Int
    /// First backoff for 5xx and transport errors, in seconds; doubles per attempt.
    public var baseDelay: Double
    /// Upper bound on one backoff, in seconds.
    public var maxDelay: Double
    /// Seconds a whole call may take, all attempts and waits included (a longpoll adds its own
    /// long transport timeout on top).
    public var callDeadline: Double
    /// Blocks the calling thread; tests replace it to record waits instead.
    public var sleep: @Sendable (Double) -> Void

    public init(maxAttempts: Int = 8, maxTransportAttempts: Int? = nil, baseDelay: Double = 0.5, maxDelay: Double = 8,
                callDeadline: Double = 120, sleep: @escaping @Sendable (Double) -> Void = RetryPolicy.threadSleep) {
        self.maxAttempts = maxAttempts; self.maxTransportAttempts = maxTransportAttempts ?? maxAttempts
        self.baseDelay = baseDelay; self.maxDelay = maxDelay
        self.callDeadline = callDeadline; self.sleep = sleep
    }

    /// What a mount uses: up to 8 attempts, of which up to 4 may be transport failures, so 10% of
    /// answers failing costs no reader an error while an outage still fails within seconds.
    public static let standard = RetryPolicy(maxAttempts: 8, maxTransportAttempts: 4)

    /// One attempt, no waiting.
    public static let never = RetryPolicy(maxAttempts: 1)

    /// curl's codes (the one transport's, `HTTPTransportError.failed`) for a server whose
    /// certificate does not verify or a CA bundle that cannot be read: 58 (local certificate),
    /// 60 (peer verification), 77 (CA file), 83 (issuer), 90 (pinned key), 91 (certificate status).
    static let untrustedServerCodes: Set<Int> = [58, 60, 77, 83, 90, 91]

    /// Seconds to wait before trying again after `error` ended attempt number `attempt` (1-based),
    /// or nil to give up and throw it. `remaining` is what is left of the call's deadline;
    /// `transportFailures` counts the call's attempts so far that ended in a transport error.
    public func delay(after error: DropboxError, attempt: Int, transportFailures: Int = 0,
                      remaining: Double) -> Double? {
        guard attempt < maxAttempts else { return nil }
        if case .transport = error, transportFailures >= maxTransportAttempts { return nil }
        let wait: Double
        switch error {
        case .transport(let code, _) where Self.untrustedServerCodes.contains(code):
            // The server's certificate did not verify: asking again gets the same certificate.
            return nil
        case .rateLimited(let retryAfter):
            // A little jitter on top, never below what the server asked.
            wait = Double(retryAfter) * Double.random(in: 1.0...1.1)
        case .server, .transport, .route(["retry_error"], _):
            // `retry_error` is files/export's "not yet available, please retry later" (spec
            // `ExportError`): a document just made is exported a moment later.
            let exponential = min(maxDelay, baseDelay * Double(1 << min(attempt - 1, 20)))
            wait = exponential * Double.random(in: 0.5...1.0)
        case .route, .auth, .badInput, .unexpectedStatus, .malformedResponse, .stopped:
            return nil
        }
        // Waiting past the deadline only to fail is worse than failing now.
        return wait < remaining ? wait : nil
    }

    /// Sleeps the calling thread (FUSE worker threads are plain threads, not tasks), in slices of
    /// at most a quarter second: a call cancelled meanwhile (`CallCancellation`: the mount stops,
    /// the reader was killed) wakes within one, not at the end of a long backoff or Retry-After.
    public static let threadSleep: @Sendable (Double) -> Void = { seconds in
        var left = seconds
        while left > 0 && !CallCancellation.isCurrentCallCancelled {
            let slice = min(left, 0.25)
            left -= slice
            let whole = slice.rounded(.down)
            var request = timespec(tv_sec: Int(whole), tv_nsec: Int((slice - whole) * 1_000_000_000))
            var remaining = timespec()
            while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
        }
    }
}
