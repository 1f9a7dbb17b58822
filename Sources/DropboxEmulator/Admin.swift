import NIOHTTP1

/// `/__` routes: the emulator's own controls. No auth, never fault-injected, never counted.
enum Admin {
    static func handle(_ request: EmulatorRequest, app: App) -> Reply {
        switch (request.method, request.path) {
        case (.GET, "/__stats"):
            return .json(app.state.statsJSON)
        case (.POST, "/__stats/reset"):
            app.state.resetStats()
            return .json(.null)
        case (.POST, "/__admin/expire_cursors"):
            app.router.index.expireCursors()
            return .json(.null)
        case (.GET, "/__admin/shared_links"), (.POST, "/__admin/shared_links"):
            return sharedLinks(request, app: app)
        case (.GET, "/__admin/knobs"):
            return .json(app.state.currentKnobs.json)
        case (.POST, "/__admin/knobs"):
            guard let patch = try? JSON.parse(request.body) else {
                return .text(.badRequest, "knobs: body must be a JSON object", [:])
            }
            let result: Result<JSON, ReplyBox> = app.state.knobs.withLock { knobs in
                var copy = knobs
                if let problem = copy.apply(patch) { return .failure(ReplyBox(.text(.badRequest, "knobs: \(problem)", [:]))) }
                knobs = copy
                return .success(copy.json)
            }
            switch result {
            case .success(let json): return .json(json)
            case .failure(let box): return box.reply
            }
        default:
            return .text(.notFound, "Unknown admin route: \(request.method.rawValue) \(request.path)", [:])
        }
    }
}

/// `/oauth2/authorize` (a stand-in that approves at once) and `/oauth2/token`.
enum OAuth {
    static func handle(route: String, request: EmulatorRequest, router: Router) -> Reply {
        route == "oauth2/authorize" ? authorize(request, router: router) : token(request, router: router)
    }

    private static func authorize(_ request: EmulatorRequest, router: Router) -> Reply {
        let q = request.query
        guard request.method == .GET || request.method == .POST else { return .text(.badRequest, "Expected GET", [:]) }
        guard q["response_type"] == nil || q["response_type"] == "code" else {
            return .text(.badRequest, "Invalid response_type: only \"code\" is supported", [:])
        }
        guard let clientID = q["client_id"], !clientID.isEmpty else { return .text(.badRequest, "Missing client_id", [:]) }
        if let key = router.configuration.appKey, key != clientID { return .text(.badRequest, "Invalid client_id: \"\(clientID)\"", [:]) }
        let method = q["code_challenge_method"] ?? (q["code_challenge"] == nil ? "" : "plain")
        if q["code_challenge"] != nil, method != "S256", method != "plain" {
            return .text(.badRequest, "Invalid code_challenge_method: \"\(method)\"", [:])
        }
        // `scope` narrows the token to what it lists (space-separated); without it the token gets
        // every scope the app has.
        let scopes = q["scope"].map { Set($0.split(separator: " ").map(String.init)) }
        if let unknown = scopes?.first(where: { !Router.appScopes.contains($0) }) {
            return .text(.badRequest, "Invalid scope: \"\(unknown)\" is not a scope this app has", [:])
        }
        let code = router.auth.authorize(clientID: clientID, challenge: q["code_challenge"], method: method,
                                         redirectURI: q["redirect_uri"], scopes: scopes)
        if let redirect = q["redirect_uri"] {
            var location = redirect + (redirect.contains("?") ? "&" : "?") + "code=" + percentEncode(code)
            if let state = q["state"] { location += "&state=" + percentEncode(state) }
            return .empty(.found, ["Location": location])
        }
        return .text(.ok, code + "\n", [:])
    }

    private static func failure(_ error: String, _ description: String) -> Reply {
        .json(.badRequest, .object([("error", .string(error)), ("error_description", .string(description))]), [:])
    }

    private static func token(_ request: EmulatorRequest, router: Router) -> Reply {
        guard request.method == .POST else { return .text(.badRequest, "Expected POST", [:]) }
        var form = parseForm(Substring(String(decoding: request.body, as: UTF8.self)))
        for (k, v) in request.query where form[k] == nil { form[k] = v }
        var clientID = form["client_id"]
        var secret = form["client_secret"]
        if let basic = request.headers.first(name: "Authorization"), basic.lowercased().hasPrefix("basic "),
           let decoded = base64Decode(String(basic.dropFirst(6)).trimmingSpaces) {
            let parts = decoded.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            clientID = clientID ?? String(parts[0])
            if parts.count > 1 { secret = secret ?? String(parts[1]) }
        }
        let lifetime = router.auth.lifetime.components.seconds
        switch form["grant_type"] {
        case "refresh_token":
            guard let refresh = form["refresh_token"] else { return failure("invalid_request", "No refresh_token") }
            do {
                let access = try router.auth.refresh(token: refresh, clientID: clientID)
                return .json(.object([
                    ("access_token", .string(access)), ("token_type", .string("bearer")), ("expires_in", .int(lifetime)),
                ]))
            } catch {
                if case .invalidGrant(let why) = error { return failure("invalid_grant", why) }
                return failure("invalid_grant", "refresh failed")
            }
        case "authorization_code":
            guard let code = form["code"] else { return failure("invalid_request", "No code") }
            do {
                let (access, refresh, scopes) = try router.auth.exchange(code: code, clientID: clientID, verifier: form["code_verifier"],
                                                                 secret: secret, redirectURI: form["redirect_uri"])
                return .json(.object([
                    ("access_token", .string(access)), ("token_type", .string("bearer")), ("expires_in", .int(lifetime)),
                    ("refresh_token", .string(refresh)), ("scope", .string((scopes ?? Router.appScopes).sorted().joined(separator: " "))),
                    ("uid", .string("12345")), ("account_id", .string(Router.accountID)),
                ]))
            } catch {
                if case .invalidGrant(let why) = error { return failure("invalid_grant", why) }
                return failure("invalid_grant", "exchange failed")
            }
        case let other:
            return failure("unsupported_grant_type", "grant_type \"\(other ?? "")\" is not supported")
        }
    }

    private static func base64Decode(_ text: String) -> String? {
        let standard = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .trimmingCharacters(in: "=")
        return base64URLDecode(standard).flatMap { String(validating: $0, as: UTF8.self) }
    }
}

extension String {
    func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: Character(target), omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
