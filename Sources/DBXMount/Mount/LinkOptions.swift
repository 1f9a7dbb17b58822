import ArgumentParser
import DropboxClient
import Foundation

/// Mounting a shared link: SOURCE is the link's URL, its password comes from a file (never from
/// the command line, where `ps` would show it).
struct LinkOptions: ParsableArguments {
    @Option(help: ArgumentHelp("When SOURCE is a shared link with a password: read the password from this file (its first line).",
                               valueName: "path"))
    var linkPasswordFile: String?

    /// The link SOURCE names, with its password; nil when SOURCE is a Dropbox path. Checked
    /// before Dropbox is asked anything.
    func link(source: String, options: MountOptionList) throws(UsageError) -> SharedLink? {
        let passwordFile = linkPasswordFile ?? options.settings["link_password_file"]
        guard SharedLink.looksLikeLink(source) else {
            if passwordFile != nil { throw UsageError("--link-password-file goes with a shared link URL as SOURCE") }
            return nil
        }
        var link = SharedLink(url: source)
        if let problem = SharedLink.problem(with: source) {
            throw UsageError("\(link.redactedURL.prefix(120)) is not a shared link: \(problem)")
        }
        if let passwordFile {
            guard let data = FileManager.default.contents(atPath: passwordFile) else {
                throw UsageError("cannot read the link password file \(passwordFile)")
            }
            let firstLine = String(decoding: data, as: UTF8.self).split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }.first ?? ""
            let password = firstLine.hasSuffix("\r") ? String(firstLine.dropLast()) : String(firstLine)
            guard !password.isEmpty else { throw UsageError("the link password file \(passwordFile) is empty") }
            link.password = password
        }
        return link
    }

    /// What the link is, asked of Dropbox; a link that cannot be mounted is one line and exit 1.
    static func target(of link: SharedLink, client: DropboxHTTPClient,
                       fail: (String) -> Never) -> SharedLinkTarget {
        do {
            return try client.sharedLinkMetadata(link)
        } catch {
            if error.isRoute("shared_link_not_found") { fail("no such shared link, or it has expired: \(link.redactedURL)") }
            if error.isRoute("shared_link_access_denied") {
                fail(link.password == nil
                     ? "the shared link is protected: give its password with --link-password-file"
                     : "wrong password for the shared link (or it does not let this account in)")
            }
            if error.isRoute("unsupported_link_type") { fail("this kind of shared link cannot be mounted (Dropbox: unsupported_link_type)") }
            if case .auth = error { fail("\(AuthCommand.explain(error)); a shared link is read with a signed-in account's token") }
            fail("cannot check the shared link: \(error)")
        }
    }
}
