import Crypto
import NIOCore
import Synchronization

/// Access tokens, refresh-token families and authorization codes.
final class AuthStore: Sendable {
    enum Verdict: Equatable { case valid, invalid, expired, malformed }

    /// `scopes` is what the authorize request asked for; nil (no `scope` parameter) grants every
    /// scope the app has, as on Dropbox.
    struct Family { var clientID: String; var revoked = false; var scopes: Set<String>? = nil }
    struct Issued { var expires: NIODeadline; var family: String }
    struct Code {
        var clientID: String; var challenge: String?; var method: String; var redirectURI: String?
        var scopes: Set<String>?
    }

    struct State {
        var staticTokens: Set<String>
        var revokedStatic: Set<String> = []
        var issued: [String: Issued] = [:]
        /// refresh token -> family
        var families: [String: Family] = [:]
        var codes: [String: Code] = [:]
    }

    private let state: Mutex<State>
    let lifetime: Duration

    init(configuration c: EmulatorConfiguration) {
        var s = State(staticTokens: Set(c.accessTokens))
        if let refresh = c.refreshToken {
            s.families[refresh] = Family(clientID: c.appKey ?? "")
        }
        state = Mutex(s)
        lifetime = c.accessTokenLifetime
    }

    /// Dropbox answers a token that cannot be a token with 400, and only a plausible one with 401.
    static func isWellFormed(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: "-") || b == UInt8(ascii: "_") || b == UInt8(ascii: ".")
                || b == UInt8(ascii: "~") || b == UInt8(ascii: "+") || b == UInt8(ascii: "/") || b == UInt8(ascii: "=")
        }
    }

    func verdict(for token: String) -> Verdict {
        guard AuthStore.isWellFormed(token) else { return .malformed }
        return state.withLock { s in
            if s.staticTokens.contains(token) { return s.revokedStatic.contains(token) ? .invalid : .valid }
            guard let issued = s.issued[token], s.families[issued.family]?.revoked == false else { return .invalid }
            return issued.expires > .now() ? .valid : .expired
        }
    }

    /// The scopes a valid token was granted; nil for every scope (static tokens, and tokens whose
    /// authorization asked for no particular ones).
    func scopes(of token: String) -> Set<String>? {
        state.withLock { s in s.issued[token].flatMap { s.families[$0.family]?.scopes } }
    }

    /// The scopes a refresh token's family was granted (nil: every scope).
    func scopes(ofRefreshToken token: String) -> Set<String>? {
        state.withLock { $0.families[token]?.scopes }
    }

    private static func randomToken(_ prefix: String, bytes: Int = 32) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var out = prefix
        for _ in 0..<bytes { out.append(alphabet[Int.random(in: 0..<64)]) }
        return out
    }

    private func issue(family: String, in s: inout State) -> String {
        let token = AuthStore.randomToken("sl.", bytes: 48)
        let nanos = lifetime.components.seconds * 1_000_000_000 + lifetime.components.attoseconds / 1_000_000_000
        s.issued[token] = Issued(expires: .now() + .nanoseconds(nanos), family: family)
        return token
    }

    enum GrantError: Error { case invalidGrant(String) }

    /// `grant_type=refresh_token`.
    func refresh(token: String, clientID: String?) throws(GrantError) -> String {
        let result: Result<String, GrantError> = state.withLock { s in
            guard let family = s.families[token], !family.revoked else {
                return .failure(.invalidGrant("refresh token is invalid or revoked"))
            }
            guard let clientID, clientID == family.clientID else {
                return .failure(.invalidGrant("refresh token was issued to another client"))
            }
            return .success(issue(family: token, in: &s))
        }
        return try result.get()
    }

    func authorize(clientID: String, challenge: String?, method: String, redirectURI: String?, scopes: Set<String>?) -> String {
        let code = AuthStore.randomToken("", bytes: 43)
        state.withLock {
            $0.codes[code] = Code(clientID: clientID, challenge: challenge, method: method, redirectURI: redirectURI, scopes: scopes)
        }
        return code
    }

    /// `grant_type=authorization_code`; a code works once. Returns (access, refresh, scopes granted).
    func exchange(code: String, clientID: String?, verifier: String?, secret: String?,
                  redirectURI: String?) throws(GrantError) -> (String, String, Set<String>?) {
        let result: Result<(String, String, Set<String>?), GrantError> = state.withLock { s in
            guard let entry = s.codes.removeValue(forKey: code) else {
                return .failure(.invalidGrant("code doesn't exist or has expired"))
            }
            guard clientID == nil || clientID == entry.clientID else {
                return .failure(.invalidGrant("invalid client_id for this code"))
            }
            if entry.redirectURI != nil, redirectURI != entry.redirectURI {
                return .failure(.invalidGrant("redirect_uri mismatch"))
            }
            if let challenge = entry.challenge {
                guard let verifier else { return .failure(.invalidGrant("invalid code verifier")) }
                let computed = entry.method == "plain" ? verifier : AuthStore.s256(verifier)
                guard computed == challenge else { return .failure(.invalidGrant("invalid code verifier")) }
            } else if secret == nil {
                return .failure(.invalidGrant("no code_verifier and no client_secret"))
            }
            let refresh = AuthStore.randomToken("", bytes: 43)
            s.families[refresh] = Family(clientID: entry.clientID, scopes: entry.scopes)
            return .success((issue(family: refresh, in: &s), refresh, entry.scopes))
        }
        return try result.get()
    }

    static func s256(_ verifier: String) -> String {
        let digest = SHA256.hash(data: Array(verifier.utf8))
        return base64URL(Array(digest))
    }

    /// Revokes the token, and for an issued token its refresh token and every sibling.
    func revoke(token: String) {
        state.withLock { s in
            if s.staticTokens.contains(token) {
                s.revokedStatic.insert(token)
            } else if let issued = s.issued[token] {
                s.families[issued.family]?.revoked = true
            }
        }
    }
}

func base64URL(_ bytes: [UInt8]) -> String { base64(bytes, urlSafe: true) }

/// RFC 4648 base64: §4 (`+/`, padded) by default, §5 (`-_`, unpadded) with `urlSafe`. Written
/// through buffers: a batch of thumbnails is megabytes of it.
func base64(_ bytes: [UInt8], urlSafe: Bool = false) -> String {
    let alphabet = Array((urlSafe
        ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/").utf8)
    let rest = bytes.count % 3
    let length = bytes.count / 3 * 4 + (rest == 0 ? 0 : (urlSafe ? rest + 1 : 4))
    return String(unsafeUninitializedCapacity: length) { out in
        bytes.withUnsafeBufferPointer { input in
            alphabet.withUnsafeBufferPointer { table in
                var o = 0
                var i = 0
                while i + 3 <= input.count {
                    let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                    out[o] = table[Int(n >> 18)]
                    out[o + 1] = table[Int((n >> 12) & 63)]
                    out[o + 2] = table[Int((n >> 6) & 63)]
                    out[o + 3] = table[Int(n & 63)]
                    o += 4
                    i += 3
                }
                if rest > 0 {
                    let n = UInt32(input[i]) << 16 | (rest == 2 ? UInt32(input[i + 1]) << 8 : 0)
                    out[o] = table[Int(n >> 18)]
                    out[o + 1] = table[Int((n >> 12) & 63)]
                    o += 2
                    if rest == 2 { out[o] = table[Int((n >> 6) & 63)]; o += 1 }
                    if !urlSafe {
                        while o < length { out[o] = UInt8(ascii: "="); o += 1 }
                    }
                }
                return o
            }
        }
    }
}

func base64URLDecode(_ text: String) -> [UInt8]? {
    var values: [UInt8] = []
    for b in text.utf8 {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(b - 65)
        case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(b - 97 + 26)
        case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(b - 48 + 52)
        case UInt8(ascii: "-"): values.append(62)
        case UInt8(ascii: "_"): values.append(63)
        default: return nil
        }
    }
    var out: [UInt8] = []
    var i = 0
    while i < values.count {
        let chunk = values[i..<min(i + 4, values.count)]
        guard chunk.count >= 2 else { return nil }
        var n: UInt32 = 0
        for (k, v) in chunk.enumerated() { n |= UInt32(v) << UInt32(18 - 6 * k) }
        out.append(UInt8((n >> 16) & 0xFF))
        if chunk.count >= 3 { out.append(UInt8((n >> 8) & 0xFF)) }
        if chunk.count == 4 { out.append(UInt8(n & 0xFF)) }
        i += 4
    }
    return out
}
