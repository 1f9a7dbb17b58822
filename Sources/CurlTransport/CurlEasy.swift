// Owners of libcurl's C resources: each wrapper frees its resource in `deinit`, and being
// non-copyable, has exactly one owner (STYLE.md, "Every C resource has one owner").

import CShims

/// One libcurl easy handle and the error buffer curl writes into. The handle keeps its
/// connection cache across `curl_easy_reset`, which is what lets a pooled handle reuse a TCP/TLS
/// connection for the next request. The corresponding C functions are `curl_easy_init` and
/// `curl_easy_cleanup`.
///
/// `@unchecked Sendable`: a handle is used by one thread at a time. It is either parked in the
/// transport's pool (only touched under the pool's mutex) or checked out by exactly one `send`;
/// `~Copyable` makes sure no second copy can exist to break that.
struct CurlEasy: ~Copyable, @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    /// `CURLOPT_ERRORBUFFER`: curl's detailed message for the last failure, NUL-terminated.
    let errorBuffer: UnsafeMutablePointer<CChar>

    init?() {
        guard let handle = curl_easy_init() else { return nil }
        self.handle = handle
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        self.errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    /// Clears every option (and the pointers to per-request state set through them) while keeping
    /// live connections, the TLS session cache and the DNS cache. The corresponding C function is
    /// `curl_easy_reset`.
    func reset() {
        curl_easy_reset(handle)
        errorBuffer[0] = 0
    }

    /// The message of the last failed transfer: curl's detailed text if it wrote one, else the
    /// generic text for `code`.
    func message(for code: CURLcode) -> String {
        errorBuffer[Int(CURL_ERROR_SIZE)] = 0
        let detail = String(cString: errorBuffer)
        if !detail.isEmpty { return detail.trimmingNewlines }
        return String(cString: curl_easy_strerror(code))
    }

    deinit {
        curl_easy_cleanup(handle)
        errorBuffer.deallocate()
    }
}

/// A `curl_slist` of header lines, alive until the transfer that uses it is over. The
/// corresponding C functions are `curl_slist_append` and `curl_slist_free_all`.
struct CurlHeaderList: ~Copyable {
    private(set) var head: UnsafeMutablePointer<curl_slist>?

    init() { head = nil }

    /// Appends one `Name: value` line (curl copies the string). Returns false if curl is out of memory.
    mutating func append(_ line: String) -> Bool {
        guard let newHead = curl_slist_append(head, line) else { return false }
        head = newHead
        return true
    }

    deinit { curl_slist_free_all(head) }
}

extension String {
    var trimmingNewlines: String {
        var s = Substring(self)
        while let c = s.last, c == "\n" || c == "\r" || c == " " { s = s.dropLast() }
        return String(s)
    }
}
