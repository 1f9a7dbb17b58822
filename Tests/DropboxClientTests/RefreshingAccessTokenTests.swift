// RefreshingAccessToken against the emulator's /oauth2/token with short-lived access tokens: the
// first refresh, refresh before expiry, refresh on 401, single-flight under concurrency, and a
// refused refresh token (revoked or unknown) failing with `.auth` and one log line.

@testable import CurlTransport
@testable import DropboxClient
import DropboxEmulator
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

private let appKey = "test-app-key"
private let refreshToken = "R3fresh-SECRET-refresh-token"

/// An emulator that grants access tokens living `lifetime`, and a client whose tokens come from a
/// `RefreshingAccessToken` on the emulator's refresh token.
private final class RefreshFixture: Sendable {
    let emulator: EmulatorFixture
    let provider: RefreshingAccessToken
    let client: DropboxHTTPClient
    let log = LogRecorder()

    init(lifetime: Duration, refresh: String = refreshToken, initial: (token: String, expiresIn: Int)? = nil,
         files: [String: [UInt8]] = ["a.txt": Array("hello\n".utf8)]) throws {
        emulator = try EmulatorFixture(files: files) { c in
            c.refreshToken = refreshToken
            c.appKey = appKey
            c.accessTokenLifetime = lifetime
        }
        provider = RefreshingAccessToken(refreshToken: refresh, endpoint: emulator.endpoint, initial: initial,
                                         retryPolicy: .fast, logger: log.logger())
        client = DropboxHTTPClient(endpoints: DropboxEndpoints(baseURL: emulator.server.baseURL), tokens: provider,
                                   transport: emulator.transport, retryPolicy: .fast)
    }
}

extension EmulatorFixture {
    var endpoint: OAuthTokenEndpoint {
        OAuthTokenEndpoint(endpoints: DropboxEndpoints(baseURL: server.baseURL), appKey: appKey, transport: transport)
    }

    /// The emulator's request count for `route` (e.g. `oauth2/token`).
    func requests(_ route: String) throws -> Int {
        let response = try transport.send(HTTPRequest(method: .get, url: server.baseURL + "/__stats"))
        let json = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        return (json?["requests"] as? [String: Any])?[route] as? Int ?? 0
    }
}

/// Runs `body` on `count` threads at once (real threads, released together: `concurrentPerform`
/// would run only as many at a time as there are cores).
func concurrently(_ count: Int, _ body: @Sendable @escaping (Int) -> Void) {
    let start = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for i in 0..<count {
        done.enter()
        Thread {
            start.wait()
            body(i)
            done.leave()
        }.start()
    }
    for _ in 0..<count { start.signal() }
    done.wait()
}

@Suite("RefreshingAccessToken against the emulator")
struct RefreshingAccessTokenTests {
    @Test func firstCallRefreshesThenReusesTheToken() throws {
        let f = try RefreshFixture(lifetime: .seconds(3600))
        let account = try f.client.currentAccount()
        #expect(!account.accountID.isEmpty)
        _ = try f.client.listFolder(path: "", recursive: false, limit: nil)
        #expect(f.provider.refreshCount == 1)
        #expect(try f.emulator.requests("oauth2/token") == 1)
    }

    @Test func concurrentCallersShareOneRefresh() throws {
        let f = try RefreshFixture(lifetime: .seconds(3600))
        let failures = Mutex(0)
        concurrently(32) { _ in
            do { _ = try f.client.listFolder(path: "", recursive: false, limit: nil) } catch {
                failures.withLock { $0 += 1 }
            }
        }
        #expect(failures.withLock { $0 } == 0)
        #expect(f.provider.refreshCount == 1)
        #expect(try f.emulator.requests("oauth2/token") == 1)
    }

    @Test func refreshesBeforeExpiry() throws {
        // A 2 s token is replaced after 1.5 s (a quarter of its life before expiry), so a call at
        // 1.7 s gets a new token without ever meeting a 401.
        let f = try RefreshFixture(lifetime: .seconds(2))
        let first = try f.provider.accessToken()
        _ = try f.client.currentAccount()
        Thread.sleep(forTimeInterval: 1.7)
        let second = try f.provider.accessToken()
        #expect(second != first)
        #expect(f.provider.refreshCount == 2)
        _ = try f.client.currentAccount()
        #expect(try f.emulator.requests("oauth2/token") == 2)
    }

    @Test func expiredTokenIsRefreshedOnceOn401() throws {
        // An access token the emulator has already expired, handed in as if it had an hour left:
        // only the server's 401 `expired_access_token` can reveal it.
        let setup = try RefreshFixture(lifetime: .seconds(1))
        let stale = try setup.emulator.endpoint.refresh(refreshToken: refreshToken).accessToken
        Thread.sleep(forTimeInterval: 1.2)
        let provider = RefreshingAccessToken(refreshToken: refreshToken, endpoint: setup.emulator.endpoint,
                                             initial: (stale, 3600), retryPolicy: .fast)
        let client = DropboxHTTPClient(endpoints: DropboxEndpoints(baseURL: setup.emulator.server.baseURL),
                                       tokens: provider, transport: setup.emulator.transport, retryPolicy: .fast)
        _ = try client.currentAccount()
        #expect(provider.refreshCount == 1)
    }

    @Test func concurrent401sShareOneRefresh() throws {
        let setup = try RefreshFixture(lifetime: .seconds(1))
        let stale = try setup.emulator.endpoint.refresh(refreshToken: refreshToken).accessToken
        Thread.sleep(forTimeInterval: 1.2)
        let before = try setup.emulator.requests("oauth2/token")
        let provider = RefreshingAccessToken(refreshToken: refreshToken, endpoint: setup.emulator.endpoint,
                                             initial: (stale, 3600), retryPolicy: .fast)
        let client = DropboxHTTPClient(endpoints: DropboxEndpoints(baseURL: setup.emulator.server.baseURL),
                                       tokens: provider, transport: setup.emulator.transport, retryPolicy: .fast)
        let failures = Mutex<[String]>([])
        concurrently(24) { _ in
            do { _ = try client.listFolder(path: "", recursive: false, limit: nil) } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(provider.refreshCount == 1)
        #expect(try setup.emulator.requests("oauth2/token") == before + 1)
    }

    @Test func readsInFlightSurviveManyRefreshes() throws {
        // 1 s tokens, eight threads reading for 3.5 s: several refreshes, not one failed call.
        let f = try RefreshFixture(lifetime: .seconds(1), files: ["big.bin": Array(repeating: 7, count: 1 << 20)])
        let failures = Mutex<[String]>([])
        let deadline = Date().addingTimeInterval(3.5)
        concurrently(8) { i in
            while Date() < deadline {
                do {
                    if i.isMultiple(of: 2) {
                        _ = try f.client.download(path: "/big.bin", range: 0..<(1 << 20))
                    } else {
                        _ = try f.client.listFolder(path: "", recursive: true, limit: nil)
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(f.provider.refreshCount >= 3)
    }

    @Test func unknownRefreshTokenFailsWithAuthAndAsksOnce() throws {
        let f = try RefreshFixture(lifetime: .seconds(3600), refresh: "not-the-SECRET-refresh-token")
        for _ in 0..<5 {
            let error = thrown { () throws(DropboxError) -> Account in try f.client.currentAccount() }
            guard case .auth(let tag, _)? = error else {
                Issue.record("expected an auth error, got \(String(describing: error))")
                return
            }
            #expect(tag == "invalid_grant")
            #expect(!"\(error!)".contains("SECRET"))
        }
        // Refused once, then remembered: no second call to the token endpoint. Never having worked,
        // the refusal is the caller's to report: no log line.
        #expect(try f.emulator.requests("oauth2/token") == 1)
        #expect(f.log.at(.error).isEmpty)
        #expect(!f.log.lines.contains { $0.text.contains("SECRET") })
    }

    @Test func revokedRefreshTokenFailsWithAuthAndLogsOnce() throws {
        let f = try RefreshFixture(lifetime: .seconds(1))
        let access = try f.provider.accessToken()
        try OAuthTokenEndpoint.revoke(accessToken: access, endpoints: DropboxEndpoints(baseURL: f.emulator.server.baseURL),
                                      transport: f.emulator.transport)
        Thread.sleep(forTimeInterval: 1.1)
        let error = thrown { () throws(DropboxError) -> Account in try f.client.currentAccount() }
        guard case .auth(let tag, _)? = error else {
            Issue.record("expected an auth error, got \(String(describing: error))")
            return
        }
        #expect(tag == "invalid_grant")
        for _ in 0..<5 { _ = thrown { () throws(DropboxError) -> Account in try f.client.currentAccount() } }
        let errors = f.log.at(.error)
        #expect(errors.count == 1)
        #expect(errors.first?.text.contains("invalid_grant") == true)
        #expect(!f.log.lines.contains { $0.text.contains(refreshToken) || $0.text.contains(access) })
    }

    @Test func descriptionsNeverShowATokenAndReflectionHasNoChildren() throws {
        let f = try RefreshFixture(lifetime: .seconds(3600))
        _ = try f.provider.accessToken()
        var dumped = ""
        dump(f.provider, to: &dumped)
        #expect(!dumped.contains("SECRET"))
        #expect(!"\(f.provider)".contains("SECRET"))
        let grant = try f.emulator.endpoint.refresh(refreshToken: refreshToken)
        var grantDump = ""
        dump(grant, to: &grantDump)
        #expect(!grantDump.contains(grant.accessToken))
        #expect(!"\(grant)".contains(grant.accessToken))
    }
}

@Suite("RefreshingAccessToken with a fake token endpoint")
struct RefreshingAccessTokenFakeTests {
    private func endpoint(_ transport: FakeTransport) -> OAuthTokenEndpoint {
        OAuthTokenEndpoint(tokenURL: "https://api.test/oauth2/token", appKey: "k", transport: transport)
    }

    @Test func refreshRequestIsFormEncodedWithoutSecret() throws {
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in
            response(#"{"access_token":"sl.A","token_type":"bearer","expires_in":14400}"#)
        }
        let provider = RefreshingAccessToken(refreshToken: "r+/=", endpoint: endpoint(transport), retryPolicy: .fast)
        #expect(try provider.accessToken() == "sl.A")
        let request = try #require(transport.requests.first)
        #expect(request.url == "https://api.test/oauth2/token")
        #expect(request.header("Content-Type") == "application/x-www-form-urlencoded")
        #expect(request.bodyText == "grant_type=refresh_token&refresh_token=r%2B%2F%3D&client_id=k")
        #expect(request.header("Authorization") == nil)
    }

    @Test(arguments: [("1e19", 365 * 86_400), ("1e400", nil), ("9223372036854775807", 365 * 86_400),
                      ("-5", 0), ("14400.5", 14_400)] as [(String, Int?)])
    func anyNumberAsALifetimeIsClampedNotTrapped(_ text: String, _ expected: Int?) throws {
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in
            response(#"{"access_token":"sl.A","expires_in":\#(text)}"#)
        }
        let grant = try endpoint(transport).refresh(refreshToken: "r")
        #expect(grant.expiresIn == expected)
        let provider = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), retryPolicy: .fast)
        #expect(try provider.accessToken() == "sl.A")
    }

    @Test func transientFailuresAreRetried() throws {
        let transport = FakeTransport(script: [
            .success(response(503, "busy")),
            .failure(.failed(code: 7, message: "refused")),
            .success(response(#"{"access_token":"sl.B","expires_in":100}"#)),
        ])
        let provider = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), retryPolicy: .fast)
        #expect(try provider.accessToken() == "sl.B")
        #expect(transport.requests.count == 3)
    }

    @Test func oldTokenServesWhileRefreshFailsTransiently() throws {
        // The proactive refresh (a quarter-life before expiry) fails; the old token is still good.
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in response(500, "down") }
        let provider = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), initial: ("sl.old", 0),
                                             retryPolicy: .never)
        // Lifetime 0: expired at once, so with no usable token the failure surfaces.
        #expect(thrown { () throws(DropboxError) -> String in try provider.accessToken() } == .server(status: 500, body: "down"))
        // Lifetime 1 s: refreshed from 0.75 s on; at 0.8 s the refresh fails but the token still serves.
        let fresh = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), initial: ("sl.old", 1),
                                          retryPolicy: .never)
        Thread.sleep(forTimeInterval: 0.8)
        let before = transport.requests.count
        #expect(try fresh.accessToken() == "sl.old")
        #expect(transport.requests.count == before + 1)
        // And the failed refresh is not retried on every call.
        #expect(try fresh.accessToken() == "sl.old")
        #expect(transport.requests.count == before + 1)
    }

    @Test func waitersShareAFailedRefresh() throws {
        // Dropbox is down and slow: everyone waiting for the one refresh gets its error, instead of
        // each leading another attempt in turn.
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in
            Thread.sleep(forTimeInterval: 0.3)
            return response(503, "down")
        }
        let provider = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), retryPolicy: .never)
        let errors = Mutex<[DropboxError?]>([])
        concurrently(8) { _ in
            let error = thrown { () throws(DropboxError) -> String in try provider.accessToken() }
            errors.withLock { $0.append(error) }
        }
        #expect(errors.withLock { $0 }.allSatisfy { $0 == .server(status: 503, body: "down") })
        #expect(transport.requests.count <= 2)
    }

    @Test func waitersShareAFailedRefreshAlsoWhenTheOldTokenIsStillHeldPastItsExpiry() throws {
        // The token ran out on its own (no 401 dropped it) and the token endpoint is down: the
        // waiters fail with the one flight's error, and callers right after fail at once.
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in
            Thread.sleep(forTimeInterval: 0.3)
            return response(503, "down")
        }
        let provider = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), initial: ("sl.old", 0),
                                             retryPolicy: .never)
        let errors = Mutex<[DropboxError?]>([])
        concurrently(8) { _ in
            let error = thrown { () throws(DropboxError) -> String in try provider.accessToken() }
            errors.withLock { $0.append(error) }
        }
        #expect(errors.withLock { $0 }.allSatisfy { $0 == .server(status: 503, body: "down") })
        #expect(transport.requests.count <= 2, "one flight, not one per waiter")
        let asked = transport.requests.count
        #expect(thrown { () throws(DropboxError) -> String in try provider.accessToken() } == .server(status: 503, body: "down"))
        #expect(transport.requests.count == asked, "within the cool-down, no new attempt")
    }

    @Test func aRefreshIsNotFailedForItsWaitersWhenTheCallerLeadingItIsInterrupted() throws {
        // The refresh is led by whichever FUSE request needed a token first. Killing that reader
        // cancels its calls; the refresh others wait for (and the 5 s cool-down after a failure)
        // must not end with it: a `cat` killed at the wrong moment failed every request for 5 s.
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in
            let until = ContinuousClock.now + .seconds(1)
            while ContinuousClock.now < until {
                if CallCancellation.isCurrentCallCancelled { throw .stopped }
                Thread.sleep(forTimeInterval: 0.01)
            }
            return response(#"{"access_token":"sl.A","expires_in":14400}"#)
        }
        let provider = RefreshingAccessToken(refreshToken: "r", endpoint: endpoint(transport), retryPolicy: .never)
        let interrupt = CallCancellation()
        let tokens = Mutex<[Int: Result<String, DropboxError>]>([:])
        concurrently(3) { i in
            // 0 leads (and is interrupted at 0.3 s), 1 waits for its refresh, 2 comes after it.
            if i > 0 { Thread.sleep(forTimeInterval: i == 1 ? 0.15 : 1.5) }
            if i == 0 {
                Thread { Thread.sleep(forTimeInterval: 0.3); interrupt.cancel() }.start()
            }
            let result = CallCancellation.obeying(i == 0 ? interrupt : nil) {
                Result { () throws(DropboxError) in try provider.accessToken() }
            }
            tokens.withLock { $0[i] = result }
        }
        let results = tokens.withLock { $0 }
        #expect(try results[1]?.get() == "sl.A", "the waiter gets the refresh its leader's caller gave up on")
        #expect(try results[2]?.get() == "sl.A", "and the next caller is not failed by a cool-down")
        #expect(transport.requests.count == 1)
    }

    @Test func aRevokedTokensInvalidAccessTokenLeadsToTheRefreshThatSaysSignInAgain() throws {
        // `dbx-mount logout` (or unlinking the app) revokes the access token with the refresh
        // token: Dropbox answers 401 invalid_access_token, and only a refresh learns it is final.
        let f = try RefreshFixture(lifetime: .seconds(14_400))
        let access = try f.provider.accessToken()
        Thread.sleep(forTimeInterval: 1.05)   // past `youngestRefreshed`
        try OAuthTokenEndpoint.revoke(accessToken: access, endpoints: DropboxEndpoints(baseURL: f.emulator.server.baseURL),
                                      transport: f.emulator.transport)
        let error = thrown { () throws(DropboxError) -> Account in try f.client.currentAccount() }
        guard case .auth(let tag, _)? = error else {
            Issue.record("expected an auth error, got \(String(describing: error))")
            return
        }
        #expect(tag == "invalid_grant", "the refresh's refusal, not the access token's 401, hours before it expires")
        #expect(f.log.at(.error).count == 1, "one line: sign in again")
    }

    @Test func refusedGrantIsAnAuthErrorWithTheTokenCutOut() throws {
        let transport = FakeTransport { _, _ throws(HTTPTransportError) in
            response(400, #"{"error":"invalid_grant","error_description":"token r-SECRET is revoked"}"#)
        }
        let provider = RefreshingAccessToken(refreshToken: "r-SECRET", endpoint: endpoint(transport), retryPolicy: .fast)
        let error = thrown { () throws(DropboxError) -> String in try provider.accessToken() }
        guard case .auth(let tag, let summary)? = error else {
            Issue.record("expected .auth, got \(String(describing: error))")
            return
        }
        #expect(tag == "invalid_grant")
        #expect(!summary.contains("SECRET"))
        #expect(thrown { () throws(DropboxError) in try provider.tokenExpired("anything") } == error)
        #expect(transport.requests.count == 1)
    }
}
