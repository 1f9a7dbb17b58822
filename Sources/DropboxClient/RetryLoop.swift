// Sending one Dropbox call until it succeeds, the retry policy gives up, or the call's deadline
// passes: the shared pacer after a 429, one token refresh after `expired_access_token`, and one
// log line for a call that failed for good.

import Logging

extension DropboxHTTPClient {
    /// Sends the request `build` makes (given the current token) until a status in `accept`
    /// arrives, the policy gives up, or the deadline passes. Other statuses become typed errors.
    func perform(route: String, auth: Bool, accept: Set<Int>, extraDeadline: Double = 0,
                         send: ((HTTPRequest) throws(DropboxError) -> HTTPResponse)? = nil,
                         _ build: (String?) throws(DropboxError) -> HTTPRequest) throws(DropboxError) -> HTTPResponse {
        // The transport's stop also ends a backoff (`RetryPolicy.threadSleep`) under way.
        try CallCancellation.obeying(transport.stopSignal) { () throws(DropboxError) -> HTTPResponse in
            try attempts(route: route, auth: auth, accept: accept, extraDeadline: extraDeadline, send: send, build)
        }
    }

    private func attempts(route: String, auth: Bool, accept: Set<Int>, extraDeadline: Double,
                          send: ((HTTPRequest) throws(DropboxError) -> HTTPResponse)?,
                          _ build: (String?) throws(DropboxError) -> HTTPRequest) throws(DropboxError) -> HTTPResponse {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = retryPolicy.callDeadline + extraDeadline
        func remaining() -> Double {
            let elapsed = (clock.now - start).components
            return deadline - (Double(elapsed.seconds) + Double(elapsed.attoseconds) * 1e-18)
        }
        var attempt = 0
        var transportFailures = 0
        var refreshed = false
        // The id Dropbox gave the last answer, so a failure can be traced on Dropbox's side.
        var requestID: String?
        while true {
            // Cancelled (the mount stops, the caller is gone): no attempt after a backoff.
            if CallCancellation.isCurrentCallCancelled { throw .stopped }
            attempt += 1
            // A 429 seen by any caller holds every caller back until its Retry-After has passed.
            if let until = pausedUntil.withLock({ $0 }), until > clock.now {
                let wait = until - clock.now
                let seconds = Double(wait.components.seconds) + Double(wait.components.attoseconds) * 1e-18
                if seconds >= remaining() {
                    // Dropbox asked for a pause longer than this call may take. Waiting it out
                    // only to send a request it asked not to get (which counts against the
                    // limit) and then fail anyway is worse than failing now.
                    let error = DropboxError.rateLimited(retryAfter: Int(seconds.rounded(.up)))
                    logFailure(route: route, error: error, requestID: requestID, attempts: attempt)
                    throw error
                }
                retryPolicy.sleep(seconds)
            }
            let token = auth ? try tokens.accessToken() : nil
            var request = try build(token)
            request.timeout = max(1, min(request.timeout, remaining()))
            let error: DropboxError
            do {
                let response: HTTPResponse
                if let send { response = try send(request) } else { response = try transport.exchange(request) }
                if accept.contains(response.status) { return response }
                requestID = response.headers["x-dropbox-request-id"]
                error = ErrorDecoding.error(for: response).redacting(token)
            } catch let transportError {
                requestID = nil
                error = transportError
            }
            if case .auth(let tag, _) = error, tag == "expired_access_token" || tag == "invalid_access_token",
               let token, !refreshed {
                // One refresh per call (py does the same); a provider that cannot refresh hands
                // back the same token and the 401 stands. `invalid_access_token` too: a token
                // revoked with its refresh token (`logout`, the app unlinked) gets it, and only a
                // refresh finds that out, refused with `invalid_grant`, the signal to sign in again.
                refreshed = true
                try tokens.tokenExpired(token)
                if try tokens.accessToken() != token {
                    attempt -= 1
                    continue
                }
            }
            if case .transport = error { transportFailures += 1 }
            if case .rateLimited(let retryAfter) = error {
                onRateLimited()
                let until = clock.now + .seconds(retryAfter)
                pausedUntil.withLock { $0 = max($0 ?? until, until) }
            }
            guard let wait = retryPolicy.delay(after: error, attempt: attempt, transportFailures: transportFailures,
                                               remaining: remaining()) else {
                logFailure(route: route, error: error, requestID: requestID, attempts: attempt)
                throw error
            }
            logger.debug("retrying Dropbox call", metadata: [
                "route": "\(route)", "attempt": "\(attempt)", "error": "\(error)",
                "wait_s": "\((wait * 1000).rounded() / 1000)"])
            retryPolicy.sleep(wait)
        }
    }

    /// One line per call that failed for good. Answers the caller handles as a normal outcome
    /// (a past-the-end range, a feed `reset`, no such path for `get_metadata`, which the core asks
    /// whether a name exists) are not failures. The line carries no token:
    /// `DropboxError`'s description never holds one.
    private func logFailure(route: String, error: DropboxError, requestID: String?, attempts: Int) {
        if error.isRoute("range", "not_satisfiable") || error.isRoute("reset") || error == .stopped { return }
        if route == "files/get_metadata" && error.isRoute("path", "not_found") { return }
        var metadata: Logger.Metadata = ["route": "\(route)", "error": "\(error)"]
        if let requestID { metadata["request_id"] = "\(requestID)" }
        if attempts > 1 { metadata["attempts"] = "\(attempts)" }
        logger.log(level: failureLogLevel, "Dropbox call failed", metadata: metadata)
    }
}
