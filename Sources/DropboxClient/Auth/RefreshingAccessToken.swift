// Access tokens from a refresh token (OAuth 2 offline access, DROPBOX_API.md §1).
//
// Dropbox access tokens live four hours; a mount lives for months. This provider keeps one access
// token and replaces it:
//
// - before it expires: the first caller after `expiry - lead` refreshes, while every other caller
//   keeps using the old token, which is still good, so a proactive refresh never blocks a read;
// - when the server refuses it (401 `expired_access_token`, or `invalid_access_token`, which is what
//   a token revoked with its refresh token gets; reported via `tokenExpired`): the old token is
//   dropped, and callers wait for the one refresh under way, whose `invalid_grant` then says to
//   sign in again;
// - never twice at once: one caller leads a refresh, the rest wait for its answer (single-flight),
//   so a thousand FUSE threads hitting an expired token make one `/oauth2/token` call.
//
// A refresh token the server refuses (400 `invalid_grant`: revoked, or the app was unlinked) is
// final: it is logged once (if it had worked before), and from then on every call fails at once with `.auth(invalid_grant)`,
// which the filesystem answers with EACCES, without asking the server again. Transient failures
// (network, 5xx, 429) are retried briefly; if they persist the old token is used while it lasts,
// and past it every caller fails at once with the failure for a few seconds (`failureCooldown`)
// before one tries again.
//
// The state lives under a pthread mutex because waiting for the leader needs a condition variable
// (`Synchronization.Mutex` has none, and this module does not import Foundation, whose
// NSCondition the rest of the project uses for waits). The mutex guards
// only short critical sections; the leader releases it before talking to the server.

import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

public final class RefreshingAccessToken: AccessTokenProvider, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    private struct State {
        var token: String?
        /// After this instant the next caller refreshes (others keep using `token`).
        var refreshAt: ContinuousClock.Instant
        /// After this instant `token` is not used at all.
        var expiresAt: ContinuousClock.Instant
        var refreshing = false
        /// Final: the refresh token was refused.
        var failure: DropboxError?
        var refreshes = 0
        /// Refreshes finished, successful or not: a waiter knows its flight landed when this moves.
        var landed = 0
        /// Why the last refresh failed, if it failed transiently, and when; shared with everyone
        /// who waited for it, and with every caller for `failureCooldown` after.
        var lastFailure: DropboxError?
        var lastFailureAt: ContinuousClock.Instant?
        /// When the current token was granted.
        var grantedAt: ContinuousClock.Instant?
    }

    /// How long after a refresh failed (transiently) a caller with no usable token fails at once
    /// with that failure instead of trying again: while the token endpoint is down, each FUSE
    /// request would otherwise pay a whole refresh with its retries, one after another.
    static let failureCooldown: Duration = .seconds(5)

    /// A token granted less than this long ago is not refreshed on a 401: the refusal is not
    /// about its age, and refreshing again would only ask the token endpoint at every call.
    static let youngestRefreshed: Duration = .seconds(1)

    private let endpoint: OAuthTokenEndpoint
    private let refreshToken: String
    private let retryPolicy: RetryPolicy
    private let logger: Logger
    private let clock = ContinuousClock()
    private let lock = ConditionLock()
    // Guarded by `lock`; read and written only inside `lock.withLock`.
    nonisolated(unsafe) private var state: State

    /// - Parameters:
    ///   - initial: an access token already in hand (e.g. from the code exchange) and its lifetime
    ///     in seconds; without it the first call refreshes.
    public init(refreshToken: String, endpoint: OAuthTokenEndpoint, initial: (token: String, expiresIn: Int)? = nil,
                retryPolicy: RetryPolicy = .standard, logger: Logger = Logger(label: "dbx-mount.auth")) {
        self.refreshToken = refreshToken
        self.endpoint = endpoint
        // A refresh blocks the FUSE request that needs it: keep its retries short.
        self.retryPolicy = RetryPolicy(maxAttempts: retryPolicy.maxAttempts,
                                       maxTransportAttempts: retryPolicy.maxTransportAttempts, baseDelay: retryPolicy.baseDelay,
                                       maxDelay: retryPolicy.maxDelay, callDeadline: min(retryPolicy.callDeadline, 30),
                                       sleep: retryPolicy.sleep)
        self.logger = logger
        let now = clock.now
        if let initial {
            state = State(token: initial.token,
                          refreshAt: now + Self.refreshLead(lifetime: initial.expiresIn).remaining,
                          expiresAt: now + .seconds(initial.expiresIn))
        } else {
            state = State(token: nil, refreshAt: now, expiresAt: now)
        }
    }

    /// How long before expiry to refresh: five minutes (py's choice) for Dropbox's four-hour tokens,
    /// a quarter of the lifetime for short ones, so a 3 s token is replaced after about 2.25 s.
    /// `remaining` is the lifetime minus that lead.
    static func refreshLead(lifetime seconds: Int) -> (lead: Duration, remaining: Duration) {
        let lifetime = Duration.seconds(max(seconds, 0))
        let lead = min(Duration.seconds(300), lifetime / 4)
        return (lead, lifetime - lead)
    }

    /// Number of successful refreshes so far (for tests and debug logs).
    public var refreshCount: Int { lock.withLock { state.refreshes } }

    public func accessToken() throws(DropboxError) -> String {
        enum Step { case use(String), fail(DropboxError), lead }
        while true {
            let step: Step = lock.withLock {
                while true {
                    if let failure = state.failure { return .fail(failure) }
                    let now = clock.now
                    if let token = state.token, now < state.refreshAt { return .use(token) }
                    let usable = state.token != nil && now < state.expiresAt
                    if state.refreshing {
                        // Someone is refreshing: use the old token while it is still good rather
                        // than wait; wait only when there is no usable token.
                        if usable, let token = state.token { return .use(token) }
                        let flight = state.landed
                        while state.refreshing && state.landed == flight { lock.wait() }
                        // The flight failed: its waiters share the failure rather than each
                        // leading another attempt in turn while Dropbox is unreachable (a token
                        // held past its expiry is no token).
                        let usableNow = state.token != nil && clock.now < state.expiresAt
                        if !usableNow, let failure = state.lastFailure { return .fail(failure) }
                        continue
                    }
                    if !usable, let failure = state.lastFailure, let at = state.lastFailureAt,
                       now - at < Self.failureCooldown {
                        return .fail(failure)
                    }
                    state.refreshing = true
                    return .lead
                }
            }
            switch step {
            case .use(let token): return token
            case .fail(let error): throw error
            case .lead:
                if let token = try lead() { return token }
                // The refresh failed transiently but the old token is still valid: loop and use it.
            }
        }
    }

    public func tokenExpired(_ token: String) throws(DropboxError) {
        lock.withLock {
            // Only the current token: a stale report (the token was already replaced) changes nothing.
            guard state.token == token else { return }
            if let granted = state.grantedAt, clock.now - granted < Self.youngestRefreshed { return }
            state.token = nil
            state.refreshAt = clock.now
            state.expiresAt = clock.now
        }
        // Refresh now, so the client's next `accessToken()` gets the new token (or this throws).
        _ = try accessToken()
    }

    /// Performs the refresh this thread leads, publishes the outcome and wakes the waiters. Returns
    /// the new token, or nil if the refresh failed transiently while an old token is still valid.
    private func lead() throws(DropboxError) -> String? {
        // Shared: the caller leading the refresh may be a FUSE request whose reader is killed
        // meanwhile; its cancellation must not fail the refresh everyone else waits for (nor start
        // the cool-down). The transport's own stop still ends it.
        let outcome = CallCancellation.shared { fetch() }
        return try lock.withLock { () throws(DropboxError) -> String? in
            state.refreshing = false
            state.landed += 1
            defer { lock.broadcast() }
            let now = clock.now
            switch outcome {
            case .success(let grant):
                let lifetime = grant.expiresIn ?? 14_400
                state.token = grant.accessToken
                state.refreshAt = now + Self.refreshLead(lifetime: lifetime).remaining
                state.expiresAt = now + .seconds(lifetime)
                state.refreshes += 1
                state.lastFailure = nil
                state.lastFailureAt = nil
                state.grantedAt = now
                return grant.accessToken
            case .failure(let error):
                state.lastFailure = error
                state.lastFailureAt = now
                if case .auth = error {
                    state.failure = error
                    state.token = nil
                    throw error
                }
                if state.token != nil, now < state.expiresAt {
                    // Try again in a few seconds, not on every call.
                    state.refreshAt = min(now + .seconds(5), state.expiresAt)
                    return nil
                }
                throw error
            }
        }
    }

    /// One refresh with brief retries for transient failures. Never called with the lock held.
    private func fetch() -> Result<TokenGrant, DropboxError> {
        let start = clock.now
        var attempt = 0
        while true {
            attempt += 1
            let error: DropboxError
            do {
                let grant = try endpoint.refresh(refreshToken: refreshToken)
                logger.debug("refreshed the Dropbox access token",
                             metadata: ["expires_in_s": "\(grant.expiresIn.map(String.init) ?? "?")"])
                return .success(grant)
            } catch let e {
                error = e
            }
            if case .auth(let tag, let summary) = error {
                // A refusal after the token has worked means it was revoked under a running mount,
                // and only a log line can say so: logged here, once, as later calls fail from
                // `state.failure` without reaching this. A refusal on the first refresh is the
                // caller's to report (the CLI prints it as its one line of error).
                if lock.withLock({ state.refreshes > 0 }) {
                    logger.error("Dropbox refused the refresh token (\(tag): \(summary)); every operation now fails with EACCES. Sign in again with 'dbx-mount auth', then remount")
                }
                return .failure(error)
            }
            let elapsed = clock.now - start
            let remaining = retryPolicy.callDeadline
                - (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18)
            guard let wait = retryPolicy.delay(after: error, attempt: attempt, remaining: remaining) else {
                logger.warning("cannot refresh the Dropbox access token", metadata: ["error": "\(error)"])
                return .failure(error)
            }
            retryPolicy.sleep(wait)
        }
    }

    /// Never a token, so logging a provider cannot leak one.
    public var description: String { "RefreshingAccessToken(<redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// A pthread mutex with its condition variable. Owns both; `deinit` destroys them.
final class ConditionLock: @unchecked Sendable {
    // Sendable: the pointers never change after init, and pthread makes the objects they point to
    // safe to use from any thread.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Only inside `withLock`: releases the mutex until `broadcast`, then holds it again.
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Only inside `withLock`.
    func broadcast() { pthread_cond_broadcast(condition) }
}
