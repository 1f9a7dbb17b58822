// Whether Dropbox can be reached at all, as the change feed last found it. While it cannot (the
// mount started offline, or the feed's calls fail to connect), reads the block cache cannot serve
// and listings of folders never listed fail at once with EIO, instead of each waiting out its
// retries: offline, an uncached file is an error now, not in ten seconds. The feed tries again
// every few seconds and clears this as soon as Dropbox answers.

import DropboxClient
import Synchronization

public final class Reachability: Sendable {
    private let unreachable: Atomic<Bool>

    init(startsOffline: Bool) { unreachable = Atomic(startsOffline) }

    var isUnreachable: Bool { unreachable.load(ordering: .relaxed) }

    func update(after error: DropboxError?) {
        unreachable.store(error?.isUnreachable ?? false, ordering: .relaxed)
    }

    /// What an operation that would need Dropbox meanwhile fails with.
    static let offline = DropboxError.transport(code: 7, message: "Dropbox is unreachable (offline)")
}

extension DropboxError {
    /// The connection itself failed: the host did not resolve, refused, or never answered the
    /// connect (curl's COULDNT_RESOLVE_HOST and COULDNT_CONNECT; `CurlTransport` reports a connect
    /// that timed out as the latter). A reset or a timeout mid-answer is a flaky link, not an
    /// absent one.
    var isUnreachable: Bool {
        if case .transport(let code, _) = self { return code == 6 || code == 7 }
        return false
    }
}
