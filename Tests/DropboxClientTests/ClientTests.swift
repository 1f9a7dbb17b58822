// The client against an in-memory transport: what goes on the wire, how answers and errors map,
// and when it retries.

@testable import DropboxClient
import TestSupport
import Testing

@Suite("DropboxHTTPClient requests")
struct RequestShapeTests {
    @Test func rpcRequestShape() throws {
        let fake = FakeTransport { _, _ in response(#"{"entries":[],"cursor":"c1","has_more":false}"#) }
        let page = try makeClient(fake).listFolder(path: "/Grüße", recursive: true, limit: 5000)
        #expect(page == ListFolderPage(entries: [], cursor: "c1", hasMore: false))
        let r = try #require(fake.requests.first)
        #expect(r.method == .post)
        #expect(r.url == "https://api.test/2/files/list_folder")
        #expect(r.header("Authorization") == "Bearer \(testToken)")
        #expect(r.header("Content-Type") == "application/json")
        #expect(r.header("Dropbox-API-Path-Root") == nil)
        #expect(r.maxResponseBytes == DropboxHTTPClient.maxRPCResponseBytes)
        let arg = try JSONReader.parse(r.body)
        #expect(arg["path"] == .string("/Grüße"))
        #expect(arg["recursive"] == .bool(true))
        #expect(arg["limit"] == .number("2000"))
        #expect(arg["include_mounted_folders"] == .bool(true))
        #expect(arg["include_non_downloadable_files"] == .bool(true))
    }

    @Test func aPagesCursorIsHandedOnBeforeItsEntriesAreDecoded() throws {
        // The entries are not a list, so decoding fails: the cursor was read before them, once.
        let fake = FakeTransport { _, _ in response(#"{"entries":7,"cursor":"c9","has_more":true}"#) }
        var known: [String] = []
        let error = thrown { () throws(DropboxError) in
            try makeClient(fake).listFolderContinue(cursor: "c8") { cursor, hasMore in known.append("\(cursor) \(hasMore)") }
        }
        #expect(known == ["c9 true"])
        guard case .malformedResponse? = error else { Issue.record("expected malformedResponse, got \(String(describing: error))"); return }
        // A page that decodes hands its cursor on once too.
        let plain = FakeTransport { _, _ in response(#"{"entries":[],"cursor":"c1","has_more":false}"#) }
        var late: [String] = []
        _ = try makeClient(plain).listFolder(path: "", recursive: false, limit: nil) { cursor, _ in late.append(cursor) }
        #expect(late == ["c1"])
    }

    @Test func voidArgumentIsNull() throws {
        let fake = FakeTransport { _, _ in response(#"{"used":1,"allocation":{".tag":"individual","allocated":2}}"#) }
        _ = try makeClient(fake).spaceUsage()
        #expect(fake.requests.first?.bodyText == "null")
        #expect(fake.requests.first?.url == "https://api.test/2/users/get_space_usage")
    }

    @Test func otherRoutes() throws {
        let fake = FakeTransport { r, _ in
            switch r.url {
            case "https://api.test/2/files/list_folder/continue": response(#"{"entries":[],"cursor":"c2","has_more":true}"#)
            case "https://api.test/2/files/list_folder/get_latest_cursor": response(#"{"cursor":"c3"}"#)
            case "https://api.test/2/files/get_metadata": response(fileJSON)
            default: response(404, "no")
            }
        }
        let client = makeClient(fake)
        #expect(try client.listFolderContinue(cursor: "c1").cursor == "c2")
        #expect(try JSONReader.parse(fake.requests[0].body) == .object(["cursor": .string("c1")]))
        #expect(try client.latestCursor(path: "", recursive: false) == "c3")
        #expect(try JSONReader.parse(fake.requests[1].body)["path"] == .string(""))
        #expect(try client.metadata(path: "/homework/math/prime_numbers.txt").name == "Prime_Numbers.txt")
        #expect(try JSONReader.parse(fake.requests[2].body)["include_deleted"] == .bool(false))
    }

    @Test func longpollHasNoAuthorizationAndALongTimeout() throws {
        let fake = FakeTransport { _, _ in response(#"{"changes":true,"backoff":3}"#) }
        let result = try makeClient(fake, pathRoot: #"{".tag":"home"}"#).longpoll(cursor: "cur", timeout: 5)
        #expect(result == LongpollResult(changes: true, backoff: 3))
        let r = try #require(fake.requests.first)
        #expect(r.url == "https://notify.test/2/files/list_folder/longpoll")
        #expect(r.header("Authorization") == nil)
        #expect(r.header("Dropbox-API-Path-Root") == nil)
        #expect(try JSONReader.parse(r.body) == .object(["cursor": .string("cur"), "timeout": .number("30")]))
        #expect(r.timeout >= 30 + 90)
        _ = try makeClient(fake).longpoll(cursor: "cur", timeout: 10_000)
        #expect(try JSONReader.parse(fake.requests[1].body)["timeout"] == .number("480"))
        #expect(fake.requests[1].timeout >= 480 + 90)
    }

    @Test func pathRootIsSentHeaderSafe() throws {
        let fake = FakeTransport { _, _ in response(fileJSON) }
        _ = try makeClient(fake, pathRoot: #"{".tag": "namespace_id", "namespace_id": "ü1"}"#).metadata(path: "/a")
        #expect(fake.requests[0].header("Dropbox-API-Path-Root") == #"{".tag":"namespace_id","namespace_id":"\u00fc1"}"#)
    }

    @Test func invalidPathRootFailsEveryCallWithoutSending() {
        let fake = FakeTransport { _, _ in response(fileJSON) }
        let error = thrown { () throws(DropboxError) in try makeClient(fake, pathRoot: "{not json").metadata(path: "/a") }
        guard case .badInput? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(fake.requests.isEmpty)
    }

    @Test func endpointsTrimTrailingSlashes() {
        let e = DropboxEndpoints(baseURL: "http://127.0.0.1:8080//")
        #expect(e.api == "http://127.0.0.1:8080" && e.content == e.api && e.notify == e.api)
        #expect(DropboxEndpoints.dropbox.content == "https://content.dropboxapi.com")
    }
}

@Suite("DropboxHTTPClient errors")
struct ErrorMappingTests {
    @Test func routeErrorTagPath() {
        let fake = FakeTransport { _, _ in
            response(409, #"{"error_summary":"path/not_found/...","error":{".tag":"path","path":{".tag":"not_found"}}}"#)
        }
        let error = thrown { () throws(DropboxError) in try makeClient(fake).metadata(path: "/missing") }
        #expect(error == .route(tags: ["path", "not_found"], summary: "path/not_found"))
        #expect(error?.isRoute("path", "not_found") == true)
        #expect(fake.requests.count == 1)
    }

    @Test func routeErrorVariants() {
        let cases: [(String, DropboxError)] = [
            (#"{"error_summary":"reset/..","error":{".tag":"reset"}}"#, .route(tags: ["reset"], summary: "reset")),
            (#"{"error":{".tag":"path","path":{".tag":"not_file"}}}"#, .route(tags: ["path", "not_file"], summary: "path/not_file")),
            (#"{"error_summary":"path/restricted_content/.","error":{}}"#,
             .route(tags: ["path", "restricted_content"], summary: "path/restricted_content")),
            (#"{"error_summary":"x","error":{".tag":"unsupported_file"},"user_message":{"text":"t","locale":"en"}}"#,
             .route(tags: ["unsupported_file"], summary: "x")),
            ("not json", .unexpectedStatus(409, body: "not json")),
        ]
        for (body, expected) in cases {
            let fake = FakeTransport { _, _ in response(409, body) }
            #expect(thrown { () throws(DropboxError) in try makeClient(fake).metadata(path: "/a") } == expected)
        }
    }

    @Test func authBadInputServerAndOthers() {
        let cases: [(HTTPResponse, DropboxError, Int)] = [
            (response(401, #"{"error_summary":"invalid_access_token/..","error":{".tag":"invalid_access_token"}}"#),
             .auth(tag: "invalid_access_token", summary: "invalid_access_token"), 1),
            (response(401, #"{"error_summary":"missing_scope/.","error":{".tag":"missing_scope","required_scope":"files.content.read"}}"#),
             .auth(tag: "missing_scope", summary: "missing_scope"), 1),
            (response(401, "plain"), .auth(tag: "unknown", summary: "plain"), 1),
            (response(400, "Error in call to API function \"files/get_metadata\": bad path"),
             .badInput("Error in call to API function \"files/get_metadata\": bad path"), 1),
            (response(403, "{}"), .unexpectedStatus(403, body: "{}"), 1),
            (response(404, "nope"), .unexpectedStatus(404, body: "nope"), 1),
            (response(503, "busy"), .server(status: 503, body: "busy"), 4),
            // A 503 that says when to come back is a wait, not a failure to back off from.
            (response(503, "busy", headers: ["retry-after": "600"]), .rateLimited(retryAfter: 600), 1),
            (response(500, ""), .server(status: 500, body: ""), 4),
        ]
        for (answer, expected, attempts) in cases {
            let fake = FakeTransport { _, _ in answer }
            #expect(thrown { () throws(DropboxError) in try makeClient(fake).currentAccount() } == expected)
            #expect(fake.requests.count == attempts, "status \(answer.status)")
        }
    }

    @Test func rateLimitRetryAfterSources() {
        let cases: [(HTTPResponse, Int)] = [
            (response(429, "too many", headers: ["retry-after": "7", "content-type": "text/plain"]), 7),
            (response(429, #"{"error_summary":"too_many_requests/..","error":{"reason":{".tag":"too_many_requests"},"retry_after":3}}"#), 3),
            (response(429, #"{"error":{"retry_after":3}}"#, headers: ["retry-after": " 2 "]), 2),
            (response(429, ""), ErrorDecoding.defaultRetryAfter),
            (response(429, "", headers: ["retry-after": "99999999999"]), 86_400),
            (response(429, "", headers: ["retry-after": "-5"]), 0),
        ]
        for (answer, seconds) in cases {
            #expect(ErrorDecoding.error(for: answer) == .rateLimited(retryAfter: seconds))
        }
    }

    @Test func malformedSuccessBodies() {
        for body in ["", "<html>", "{\"used\":\"1\"}", "null", "[]"] {
            let fake = FakeTransport { _, _ in response(body) }
            let error = thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
            guard case .malformedResponse? = error else { Issue.record("\(body): \(String(describing: error))"); continue }
            #expect(fake.requests.count == 1)
        }
    }

    @Test func errorBodiesAreBounded() {
        let fake = FakeTransport { _, _ in response(400, String(repeating: "x", count: 100_000)) }
        guard case .badInput(let text)? = thrown({ () throws(DropboxError) in try makeClient(fake).spaceUsage() }) else {
            Issue.record("not badInput"); return
        }
        #expect(text.count <= ErrorDecoding.maxBodyText + 1)
    }

    @Test func noErrorDescriptionContainsTheToken() {
        let answers = [response(401, "{}"), response(400, "bad"), response(409, "{}"), response(429, ""),
                       response(500, ""), response(418, ""), response("garbage")]
        for answer in answers {
            let fake = FakeTransport { _, _ in answer }
            let error = thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
            #expect(error != nil)
            #expect(!"\(String(describing: error))".contains(testToken))
        }
        // Bodies that quote the token back, as Dropbox's 400 does for a header value it cannot parse.
        let echoes = [
            response(400, #"Error in call to API function "users/get_space_usage": Invalid authorization value in HTTP header "Authorization": "Bearer \#(testToken)".  Expecting "Bearer <oauth2-access-token>"."#),
            response(400, "token \(testToken) rejected"), response(500, "oops \(testToken)"), response(418, testToken),
            response(409, #"{"error_summary":"x/\#(testToken)/..","error":{".tag":"x"}}"#),
        ]
        for answer in echoes {
            let fake = FakeTransport { _, _ in answer }
            let error = thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
            #expect(error != nil)
            #expect(!"\(String(describing: error))".contains("SECRET"), "\(String(describing: error))")
        }
        // The quoted value goes whatever it holds, even a value that is not our token.
        let quoted = ErrorDecoding.text(Array(#"Invalid authorization value in HTTP header "Authorization": "Bearer {\"a\": \"sl.x y\"}".  Expecting "Bearer <oauth2-access-token>"."#.utf8))
        #expect(quoted == #"Invalid authorization value in HTTP header "Authorization": "<redacted>".  Expecting "Bearer <oauth2-access-token>"."#)
        let provider = StaticAccessToken(testToken)
        var dumped = ""
        dump(provider, to: &dumped)
        for text in ["\(provider)", String(reflecting: provider), dumped] {
            #expect(!text.contains(testToken))
        }
    }
}

@Suite("Static access tokens")
struct StaticAccessTokenTests {
    @Test func onlyABearerTokenAloneIsWellFormed() {
        for token in [testToken, "abc", "A-b.c_d~e+f/g", "abc==", "sl.u.AbC123"] {
            #expect(StaticAccessToken.isWellFormed(token), "\(token)")
        }
        for token in ["", "Bearer sl.abc", "sl.abc def", #"{"access_token":"sl.abc"}"#, "\"sl.abc\"", "a=b", "=", "é",
                      "sl.abc\tdef", "sl.abc\u{7f}"] {
            #expect(!StaticAccessToken.isWellFormed(token), "\(token.debugDescription)")
        }
    }
}

@Suite("DropboxHTTPClient retries")
struct RetryTests {
    @Test func serverErrorsAreRetriedWithGrowingJitteredBackoff() throws {
        let sleeps = SleepRecorder()
        let fake = FakeTransport { _, i in
            i < 3 ? response(500 + i, "oops") : response(#"{"cursor":"ok"}"#)
        }
        #expect(try makeClient(fake, sleeps: sleeps).latestCursor(path: "", recursive: false) == "ok")
        #expect(fake.requests.count == 4)
        let waits = sleeps.recorded
        #expect(waits.count == 3)
        for (i, w) in waits.enumerated() {
            let full = 0.5 * Double(1 << i)
            #expect(w >= full * 0.5 && w <= full, "wait \(i): \(w)")
        }
    }

    @Test func aCallCancelledDuringItsBackoffMakesNoFurtherAttempt() {
        let token = CallCancellation()
        let fake = FakeTransport { _, _ in response(500, "oops") }
        let client = DropboxHTTPClient(endpoints: DropboxEndpoints(api: "https://api.test", content: "https://content.test",
                                                                   notify: "https://notify.test"),
                                       tokens: StaticAccessToken(testToken), transport: fake,
                                       retryPolicy: RetryPolicy(maxAttempts: 8, sleep: { _ in token.cancel() }))
        let error = thrown { () throws(DropboxError) in
            try CallCancellation.obeying(token) { () throws(DropboxError) in
                try client.latestCursor(path: "", recursive: false)
            }
        }
        #expect(error == .stopped)
        #expect(fake.requests.count == 1, "the backoff was cut short and nothing sent after it")
    }

    @Test func transportErrorsAreRetried() throws {
        let fake = FakeTransport { _, i throws(HTTPTransportError) in
            if i == 0 { throw .failed(code: 7, message: "connection refused") }
            if i == 1 { throw .failed(code: 18, message: "partial file") }
            return response(#"{"cursor":"ok"}"#)
        }
        #expect(try makeClient(fake).latestCursor(path: "", recursive: false) == "ok")
        #expect(fake.requests.count == 3)
    }

    @Test func givesUpAfterMaxAttempts() {
        let fake = FakeTransport { _, _ throws(HTTPTransportError) in throw .failed(code: 28, message: "timeout") }
        #expect(thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
                == .transport(code: 28, message: "timeout"))
        #expect(fake.requests.count == 4)
    }

    @Test func rateLimitWaitsWhatTheServerAsks() throws {
        let sleeps = SleepRecorder()
        let fake = FakeTransport { _, i in
            i == 0 ? response(429, "", headers: ["retry-after": "3"]) : response(#"{"cursor":"ok"}"#)
        }
        #expect(try makeClient(fake, sleeps: sleeps).latestCursor(path: "", recursive: false) == "ok")
        let wait = try #require(sleeps.recorded.first)
        #expect(wait >= 3 && wait <= 3.3)
    }

    @Test func rateLimitBeyondTheDeadlineFailsAtOnce() {
        let sleeps = SleepRecorder()
        let fake = FakeTransport { _, _ in response(429, "", headers: ["retry-after": "600"]) }
        #expect(thrown { () throws(DropboxError) in try makeClient(fake, sleeps: sleeps).spaceUsage() }
                == .rateLimited(retryAfter: 600))
        #expect(fake.requests.count == 1)
        #expect(sleeps.recorded.isEmpty)
    }

    @Test func aPauseLongerThanTheCallMayTakeFailsTheNextCallWithoutSendingIt() {
        let sleeps = SleepRecorder()
        let fake = FakeTransport { _, _ in response(429, "", headers: ["retry-after": "600"]) }
        let client = makeClient(fake, sleeps: sleeps)
        _ = thrown { () throws(DropboxError) in try client.spaceUsage() }
        // Another caller, while the pause holds: nothing is sent, nothing waited for.
        let error = thrown { () throws(DropboxError) in try client.latestCursor(path: "", recursive: false) }
        guard case .rateLimited(let seconds)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(seconds > 590 && seconds <= 600)
        #expect(fake.requests.count == 1)
        #expect(sleeps.recorded.isEmpty)
    }

    @Test func a503WithRetryAfterWaitsWhatItSays() throws {
        let sleeps = SleepRecorder()
        let fake = FakeTransport { _, i in
            i == 0 ? response(503, "", headers: ["retry-after": "7"]) : response(#"{"cursor":"ok"}"#)
        }
        #expect(try makeClient(fake, sleeps: sleeps).latestCursor(path: "", recursive: false) == "ok")
        #expect((sleeps.recorded.first ?? 0) >= 7)
    }

    @Test func aCertificateThatDoesNotVerifyIsNotAskedForAgain() {
        let fake = FakeTransport { _, _ throws(HTTPTransportError) in
            throw .failed(code: 60, message: "curl error 60: SSL peer certificate or SSH remote key was not OK")
        }
        _ = thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
        #expect(fake.requests.count == 1)
    }

    @Test func answersAreNotRetried() {
        for status in [400, 401, 403, 409] {
            let fake = FakeTransport { _, _ in response(status, "{}") }
            _ = thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
            #expect(fake.requests.count == 1, "status \(status)")
        }
    }

    @Test func policyDecisions() {
        let p = RetryPolicy(maxAttempts: 3, baseDelay: 1, maxDelay: 3, callDeadline: 100, sleep: { _ in })
        #expect(p.delay(after: .server(status: 502, body: ""), attempt: 3, remaining: 100) == nil)
        #expect(p.delay(after: .route(tags: ["reset"], summary: ""), attempt: 1, remaining: 100) == nil)
        // files/export's "not yet available, please retry later" is retried; other export errors are answers.
        #expect(p.delay(after: .route(tags: ["retry_error"], summary: ""), attempt: 1, remaining: 100) != nil)
        #expect(p.delay(after: .route(tags: ["non_exportable"], summary: ""), attempt: 1, remaining: 100) == nil)
        #expect(p.delay(after: .malformedResponse("x"), attempt: 1, remaining: 100) == nil)
        #expect(p.delay(after: .server(status: 502, body: ""), attempt: 1, remaining: 0.1) == nil)
        let capped = p.delay(after: .server(status: 502, body: ""), attempt: 2, remaining: 100) ?? -1
        #expect(capped >= 1 && capped <= 2)
        let big = RetryPolicy(maxAttempts: 40, baseDelay: 1, maxDelay: 3, callDeadline: 100, sleep: { _ in })
        #expect((big.delay(after: .transport(code: 7, message: ""), attempt: 39, remaining: 100) ?? 99) <= 3)
        #expect(RetryPolicy.never.delay(after: .server(status: 500, body: ""), attempt: 1, remaining: 100) == nil)
        // The mount's policy outlasts a run of 5xx/429 longer than a run of transport failures.
        let standard = RetryPolicy(maxAttempts: 8, maxTransportAttempts: 4, sleep: { _ in })
        #expect(standard.delay(after: .server(status: 503, body: ""), attempt: 7, remaining: 100) != nil)
        #expect(standard.delay(after: .server(status: 503, body: ""), attempt: 8, remaining: 100) == nil)
        #expect(standard.delay(after: .transport(code: 7, message: ""), attempt: 5, transportFailures: 3, remaining: 100) != nil)
        #expect(standard.delay(after: .transport(code: 7, message: ""), attempt: 4, transportFailures: 4, remaining: 100) == nil)
        #expect(RetryPolicy.standard.maxTransportAttempts == 4)
    }

    @Test func a429PausesEveryCallerNotOnlyTheOneThatGotIt() throws {
        let sleeps = SleepRecorder()
        let fake = FakeTransport { _, i in
            i == 0 ? response(429, #"{"error_summary":"too_many_requests/"}"#, headers: ["retry-after": "3"])
                   : response(#"{"cursor":"ok"}"#)
        }
        let client = makeClient(fake, sleeps: sleeps)
        _ = try client.latestCursor(path: "", recursive: false)   // got the 429, waited, succeeded
        let before = sleeps.recorded.count
        _ = try client.latestCursor(path: "/other", recursive: false)   // a different caller
        let waits = sleeps.recorded.dropFirst(before)
        // The recorder does not really sleep, so the pause is still on: the second call waits too.
        #expect(waits.count == 1 && (waits.first ?? 0) > 2 && (waits.first ?? 99) <= 3)
        #expect(fake.requests.count == 3)
    }

    @Test func deadlineBoundsEachAttemptsTimeout() throws {
        let fake = FakeTransport { _, _ in response(#"{"cursor":"ok"}"#) }
        let client = DropboxHTTPClient(endpoints: .dropbox, tokens: StaticAccessToken("t"), transport: fake,
                                       retryPolicy: RetryPolicy(callDeadline: 5, sleep: { _ in }), requestTimeout: 60)
        _ = try client.latestCursor(path: "", recursive: false)
        #expect(fake.requests[0].timeout <= 5)
    }

    @Test func expiredTokenIsRefreshedOnce() throws {
        let tokens = RefreshingTokens()
        let fake = FakeTransport { r, _ in
            r.header("Authorization") == "Bearer token-2"
                ? response(#"{"cursor":"ok"}"#)
                : response(401, #"{"error_summary":"expired_access_token/..","error":{".tag":"expired_access_token"}}"#)
        }
        #expect(try makeClient(fake, tokens: tokens).latestCursor(path: "", recursive: false) == "ok")
        #expect(tokens.refreshes == 1)
        #expect(fake.requests.map { $0.header("Authorization") } == ["Bearer token-1", "Bearer token-2"])
    }

    @Test func expiredStaticTokenFails() {
        let fake = FakeTransport { _, _ in
            response(401, #"{"error_summary":"expired_access_token/","error":{".tag":"expired_access_token"}}"#)
        }
        #expect(thrown { () throws(DropboxError) in try makeClient(fake).spaceUsage() }
                == .auth(tag: "expired_access_token", summary: "expired_access_token"))
        #expect(fake.requests.count == 1)
    }
}

@Suite("DropboxHTTPClient downloads")
struct DownloadTests {
    static let file: [UInt8] = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) }

    /// A server that honours ranges the way Dropbox does.
    static func rangeServer(_ file: [UInt8] = file) -> FakeTransport {
        FakeTransport { r, _ in
            guard let range = r.header("Range"), range.hasPrefix("bytes=") else { return bytesResponse(200, file) }
            let parts = range.dropFirst(6).split(separator: "-").map { UInt64($0)! }
            let first = parts[0], last = min(parts[1], UInt64(file.count) - 1)
            guard first < UInt64(file.count) else {
                return bytesResponse(416, [], headers: ["content-range": "bytes */\(file.count)"])
            }
            return bytesResponse(206, Array(file[Int(first)...Int(last)]),
                                 headers: ["content-range": "bytes \(first)-\(last)/\(file.count)"])
        }
    }

    @Test func requestShape() throws {
        let fake = Self.rangeServer()
        _ = try makeClient(fake).download(path: "/dir/Grüße 😀.txt", range: 10..<20)
        let r = try #require(fake.requests.first)
        #expect(r.method == .get)
        #expect(r.url == "https://content.test/2/files/download")
        #expect(r.header("Range") == "bytes=10-19")
        #expect(r.header("Authorization") == "Bearer \(testToken)")
        let arg = try #require(r.header("Dropbox-API-Arg"))
        #expect(arg == #"{"path":"/dir/Gr\u00fc\u00dfe \ud83d\ude00.txt"}"#)
        #expect(arg.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F })
    }

    @Test func ranges() throws {
        let client = makeClient(Self.rangeServer())
        #expect(try client.download(path: "rev:0123456789", range: 0..<1000) == Self.file)
        #expect(try client.download(path: "/f", range: 100..<200) == Array(Self.file[100..<200]))
        #expect(try client.download(path: "/f", range: 990..<5000) == Array(Self.file[990...]))
        #expect(try client.download(path: "/f", range: 1000..<2000) == [])
        #expect(try client.download(path: "/f", range: 5000..<5001) == [])
        #expect(try client.download(path: "/f", range: 7..<7) == [])
    }

    @Test func emptyRangeSendsNothing() throws {
        let fake = Self.rangeServer()
        #expect(try makeClient(fake).download(path: "/f", range: 3..<3) == [])
        #expect(fake.requests.isEmpty)
    }

    @Test func wholeFile200IsSliced() throws {
        let fake = FakeTransport { _, _ in
            bytesResponse(200, Self.file, headers: ["dropbox-api-result": #"{"name":"f","size":1000}"#])
        }
        let client = makeClient(fake)
        #expect(try client.download(path: "/f", range: 10..<15) == Array(Self.file[10..<15]))
        #expect(try client.download(path: "/f", range: 995..<1500) == Array(Self.file[995...]))
        #expect(try client.download(path: "/f", range: 1000..<1500) == [])
    }

    @Test func wholeFile200WithWrongSizeIsRejected() throws {
        let fake = FakeTransport { _, _ in
            bytesResponse(200, Array(Self.file[..<500]), headers: ["dropbox-api-result": #"{"size":1000}"#])
        }
        // The whole file is streamed, not buffered: a range its short body still covers is read
        // before the shortfall shows; one that reaches past where the body ended is rejected.
        #expect(try makeClient(fake).download(path: "/f", range: 0..<10) == Array(Self.file[..<10]))
        let error = thrown { () throws(DropboxError) in try makeClient(fake).download(path: "/f", range: 400..<600) }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
    }

    @Test(arguments: [
        ("bytes 11-19/1000", 9, "wrong start"),
        ("bytes 10-20/1000", 11, "too long"),
        ("bytes 10-19/1000", 9, "body shorter than promised"),
        ("bytes 10-19/1000", 11, "body longer than promised"),
        ("bytes 10-19/15", 10, "beyond the total"),
        ("bytes 19-10/1000", 10, "backwards"),
        ("10-19/1000", 10, "no unit"),
        ("bytes 10-19", 10, "no total"),
        ("", 10, "empty"),
    ])
    func partialContentMustMatch(_ contentRange: String, _ bodyCount: Int, _ why: String) {
        let fake = FakeTransport { _, _ in
            var headers: [String: String] = [:]
            if !contentRange.isEmpty { headers["content-range"] = contentRange }
            return bytesResponse(206, [UInt8](repeating: 1, count: bodyCount), headers: headers)
        }
        let error = thrown { () throws(DropboxError) in try makeClient(fake).download(path: "/f", range: 10..<20) }
        guard case .malformedResponse? = error else { Issue.record("\(why): \(String(describing: error))"); return }
    }

    @Test func aPartialAnswerShortOfTheRangeIsFollowedByRequestsForTheRest() throws {
        // A server that encloses at most 4 bytes per 206, as RFC 9110 §15.3.7 allows.
        let file = Self.file
        let fake = FakeTransport { r, _ in
            let parts = r.header("Range")!.dropFirst(6).split(separator: "-").map { Int($0)! }
            let last = min(parts[1], parts[0] + 3, file.count - 1)
            return bytesResponse(206, Array(file[parts[0]...last]),
                                 headers: ["content-range": "Bytes \(parts[0])-\(last)/\(file.count)"])
        }
        #expect(try makeClient(fake).download(path: "/f", range: 10..<20) == Array(file[10..<20]))
        #expect(fake.requests.map { $0.header("Range") } == ["bytes=10-19", "bytes=14-19", "bytes=18-19"])
        #expect(try makeClient(fake).download(path: "/f", range: 996..<2000) == Array(file[996...]))
        // With the size unknown, the rest is asked for until the server says there is none.
        let unknownSize = FakeTransport { r, _ in
            let first = Int(r.header("Range")!.dropFirst(6).split(separator: "-")[0])!
            guard first < 12 else { return bytesResponse(416, [], headers: ["content-range": "bytes */*"]) }
            return bytesResponse(206, [UInt8(first)], headers: ["content-range": "bytes \(first)-\(first)/*"])
        }
        #expect(try makeClient(unknownSize).download(path: "/f", range: 10..<20) == [10, 11])
        // One that sends a byte per answer is given up on, not followed for ever.
        let slivers = FakeTransport { r, _ in
            let first = Int(r.header("Range")!.dropFirst(6).split(separator: "-")[0])!
            return bytesResponse(206, [1], headers: ["content-range": "bytes \(first)-\(first)/100000"])
        }
        let error = thrown { () throws(DropboxError) in try makeClient(slivers).download(path: "/f", range: 0..<5000) }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(slivers.requests.count == DropboxHTTPClient.mostPiecesPerDownload)
    }

    @Test func aCodedBodyIsNotTakenForTheFilesBytes() throws {
        let fake = FakeTransport { _, _ in
            bytesResponse(206, [31, 139, 8, 0], headers: ["content-range": "bytes 0-3/1000", "content-encoding": "gzip"])
        }
        let error = thrown { () throws(DropboxError) in try makeClient(fake).download(path: "/f", range: 0..<4) }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(fake.requests.first?.header("Accept-Encoding") == "identity")
        let identity = FakeTransport { _, _ in
            bytesResponse(206, [1, 2, 3, 4], headers: ["content-range": "bytes 0-3/1000", "content-encoding": "identity"])
        }
        #expect(try makeClient(identity).download(path: "/f", range: 0..<4) == [1, 2, 3, 4])
    }

    @Test func aRevPathsBytesMustBeOfThatRev() throws {
        let fake = FakeTransport { _, _ in
            bytesResponse(206, [1, 2, 3, 4], headers: ["content-range": "bytes 0-3/1000",
                                                       "dropbox-api-result": #"{"rev":"0123456789b","size":1000}"#])
        }
        let error = thrown { () throws(DropboxError) in try makeClient(fake).download(path: "rev:0123456789a", range: 0..<4) }
        #expect(error?.isRoute("path", "not_found") == true, "\(String(describing: error))")
        #expect(try makeClient(fake).download(path: "rev:0123456789b", range: 0..<4) == [1, 2, 3, 4])
        #expect(try makeClient(fake).download(path: "/f", range: 0..<4) == [1, 2, 3, 4])
    }

    @Test func partialContentShortAtEndOfFileIsFine() throws {
        let fake = FakeTransport { _, _ in bytesResponse(206, [1, 2, 3], headers: ["content-range": "bytes 10-12/13"]) }
        #expect(try makeClient(fake).download(path: "/f", range: 10..<20) == [1, 2, 3])
        let unknownTotal = FakeTransport { _, _ in bytesResponse(206, [1, 2], headers: ["content-range": "bytes 10-11/*"]) }
        #expect(try makeClient(unknownTotal).download(path: "/f", range: 10..<12) == [1, 2])
    }

    @Test func pastEndAnswers() throws {
        let route409 = FakeTransport { _, _ in
            response(409, #"{"error_summary":"range/not_satisfiable/.","error":{".tag":"range","range":{".tag":"not_satisfiable"}}}"#)
        }
        #expect(try makeClient(route409).download(path: "/f", range: 0..<1) == [])
        let bare416 = FakeTransport { _, _ in bytesResponse(416, []) }
        #expect(try makeClient(bare416).download(path: "/f", range: 0..<1) == [])
        let lying416 = FakeTransport { _, _ in bytesResponse(416, [], headers: ["content-range": "bytes */100"]) }
        let error = thrown { () throws(DropboxError) in try makeClient(lying416).download(path: "/f", range: 10..<20) }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
    }

    @Test func noSuchPathIsNoFailureForGetMetadataButIsForADownload() {
        // The core asks get_metadata whether a name exists (a lookup during the first listing):
        // "no" is an answer there, not a line at the mount's warning level; a file gone when it is
        // read is a failure.
        let log = LogRecorder()
        let notFound = FakeTransport { _, _ in
            response(409, #"{"error_summary":"path/not_found/..","error":{".tag":"path","path":{".tag":"not_found"}}}"#)
        }
        let client = DropboxHTTPClient(endpoints: DropboxEndpoints(api: "https://api.test", content: "https://content.test",
                                                                   notify: "https://notify.test"),
                                       tokens: StaticAccessToken(testToken), transport: notFound,
                                       retryPolicy: SleepRecorder().policy, logger: log.logger(), failureLogLevel: .warning)
        #expect(thrown { () throws(DropboxError) in try client.metadata(path: "/a/missing") }?.isRoute("path", "not_found") == true)
        #expect(log.at(.warning).isEmpty, "\(log.lines.map(\.text))")
        #expect(thrown { () throws(DropboxError) in try client.download(path: "/a/gone", range: 0..<10) }?.isRoute("path", "not_found") == true)
        #expect(log.at(.warning).map(\.message) == ["Dropbox call failed"])
    }

    @Test func routeErrorsPassThrough() {
        let fake = FakeTransport { _, _ in
            response(409, #"{"error_summary":"path/not_file/","error":{".tag":"path","path":{".tag":"not_file"}}}"#)
        }
        #expect(thrown { () throws(DropboxError) in try makeClient(fake).download(path: "/dir", range: 0..<10) }
                == .route(tags: ["path", "not_file"], summary: "path/not_file"))
    }

    @Test func bodyCapFollowsTheRange() throws {
        let fake = Self.rangeServer()
        let client = makeClient(fake)
        _ = try client.download(path: "/f", range: 0..<10)
        _ = try client.download(path: "/f", range: 0..<(8 << 20))
        _ = try client.download(path: "/f", range: 0..<UInt64.max)
        #expect(fake.requests.map(\.maxResponseBytes) == [1 << 20, 8 << 20, 1 << 30])
        #expect(fake.requests[2].header("Range") == "bytes=0-\(UInt64.max - 1)")
    }

    @Test func truncatedDownloadIsRetried() throws {
        let fake = FakeTransport { r, i throws(HTTPTransportError) in
            if i == 0 { throw .failed(code: 18, message: "transfer closed with 5 bytes remaining to read") }
            return try Self.rangeServer().send(r)
        }
        #expect(try makeClient(fake).download(path: "/f", range: 0..<10) == Array(Self.file[..<10]))
        #expect(fake.requests.count == 2)
    }
}
