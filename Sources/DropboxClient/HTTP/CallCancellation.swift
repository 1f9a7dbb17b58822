// Abandoning Dropbox calls made on the calling thread. Calls are blocking and made on plain threads
// (FUSE workers, the read engine's pool), so whoever no longer needs a call's answer cannot reach
// into it: it cancels a token instead, and the calls its thread makes while the token is in force
// (`obeying`) fail with `.stopped` within about a second: the transport checks the tokens in curl's
// progress callback, which runs at least once a second even on a silent connection, and the retry
// loop checks them before each attempt and while it backs off.
//
// Scopes nest: a read engine's part fetched by a FUSE request's own thread obeys both the part's
// token (the file was closed) and the request's (the caller was interrupted). The transport's own
// stop is the outermost one: the retry loop obeys it for the whole call. Work that several callers
// wait for (a folder listing) runs with no caller's token (`shared`).

#if canImport(Glibc)
import Glibc
#endif
import Synchronization

public final class CallCancellation: Sendable {
    private let cancelled = Atomic<Bool>(false)

    public init() {}

    public var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

    /// Every call obeying this token fails from now on; calls in flight end within about a second.
    public func cancel() { cancelled.store(true, ordering: .relaxed) }

    /// Runs `body` with `token` in force for the calls this thread makes, on top of any tokens
    /// already in force. A nil token changes nothing.
    public static func obeying<T, E: Error>(_ token: CallCancellation?, _ body: () throws(E) -> T) throws(E) -> T {
        guard let token else { return try body() }
        let outer = Scope.current
        let scope = Scope(token: token, outer: outer)
        Scope.current = scope
        defer { Scope.current = outer }
        return try withExtendedLifetime(scope) { () throws(E) -> T in try body() }
    }

    /// Runs `body`, work that other callers share (one listing several lookups wait for), with no
    /// token of this thread's caller in force: one caller giving up must not fail the others.
    public static func shared<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let outer = Scope.current
        Scope.current = nil
        defer { Scope.current = outer }
        return try body()
    }

    /// The tokens in force on this thread now, to be checked later from the same call (nil: none).
    public static var inForce: Scope? { Scope.current }

    /// Whether a token in force on this thread was cancelled.
    public static var isCurrentCallCancelled: Bool { Scope.current?.isCancelled ?? false }

    /// The tokens in force on one thread, innermost first.
    public final class Scope: @unchecked Sendable {
        // `@unchecked Sendable`: immutable; only `Atomic`s are read through it.
        let token: CallCancellation
        let outer: Scope?

        init(token: CallCancellation, outer: Scope?) {
            self.token = token
            self.outer = outer
        }

        public var isCancelled: Bool {
            var scope: Scope? = self
            while let current = scope {
                if current.token.isCancelled { return true }
                scope = current.outer
            }
            return false
        }

        /// This thread's innermost scope, held unretained: `obeying` keeps it alive while current.
        fileprivate static var current: Scope? {
            get { pthread_getspecific(key).map { Unmanaged<Scope>.fromOpaque($0).takeUnretainedValue() } }
            set { pthread_setspecific(key, newValue.map { Unmanaged.passUnretained($0).toOpaque() }) }
        }

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            pthread_key_create(&key, nil)
            return key
        }()
    }
}
