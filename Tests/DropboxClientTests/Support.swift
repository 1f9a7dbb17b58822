// Test doubles of this target: a refreshing token provider, a recorder for the retry policy's
// waits, canned answers. The fake transport is TestSupport's.

@testable import DropboxClient
import TestSupport
import Synchronization

extension HTTPRequest {
    func header(_ name: String) -> String? {
        headers.last { $0.0.lowercased() == name.lowercased() }?.1
    }
    var bodyText: String { String(decoding: body, as: UTF8.self) }
}

func response(_ text: String, headers: [String: String] = [:]) -> HTTPResponse {
    response(200, text, headers: headers)
}

func response(_ status: Int, _ text: String, headers: [String: String] = [:]) -> HTTPResponse {
    var headers = headers
    if headers["content-type"] == nil { headers["content-type"] = "application/json" }
    return HTTPResponse(status: status, headers: headers, body: Array(text.utf8))
}

func bytesResponse(_ status: Int, _ body: [UInt8], headers: [String: String] = [:]) -> HTTPResponse {
    HTTPResponse(status: status, headers: headers, body: body)
}

/// Records the policy's waits instead of sleeping.
final class SleepRecorder: Sendable {
    private let waits = Mutex<[Double]>([])
    var recorded: [Double] { waits.withLock { $0 } }
    var policy: RetryPolicy {
        RetryPolicy(maxAttempts: 4, baseDelay: 0.5, maxDelay: 8, callDeadline: 120,
                    sleep: { [self] s in waits.withLock { $0.append(s) } })
    }
}

let testToken = "sl.SECRET-token-value"

func makeClient(_ transport: FakeTransport, sleeps: SleepRecorder = SleepRecorder(), pathRoot: String? = nil,
                tokens: (any AccessTokenProvider)? = nil) -> DropboxHTTPClient {
    DropboxHTTPClient(endpoints: DropboxEndpoints(api: "https://api.test", content: "https://content.test",
                                                  notify: "https://notify.test"),
                      tokens: tokens ?? StaticAccessToken(testToken), transport: transport,
                      pathRoot: pathRoot, retryPolicy: sleeps.policy)
}

/// Runs `body` and returns the error it threw, or nil.
func thrown<T, E: Error>(_ body: () throws(E) -> T) -> E? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

/// Hands out "token-1", then "token-2" after the first `tokenExpired`.
final class RefreshingTokens: AccessTokenProvider {
    private let generation = Mutex(1)
    var refreshes: Int { generation.withLock { $0 - 1 } }
    func accessToken() throws(DropboxError) -> String { "token-\(generation.withLock { $0 })" }
    func tokenExpired(_ token: String) throws(DropboxError) {
        generation.withLock { g in if token == "token-\(g)" { g += 1 } }
    }
}

let fileJSON = """
{".tag":"file","name":"Prime_Numbers.txt","id":"id:a4ayc_80_OEAAAAAAAAAXw",
 "path_lower":"/homework/math/prime_numbers.txt","path_display":"/Homework/math/Prime_Numbers.txt",
 "client_modified":"2015-05-12T15:50:38Z","server_modified":"2015-05-12T15:50:39Z",
 "rev":"a1c10ce0dd78","size":7212,"is_downloadable":true,
 "content_hash":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
"""
