import DropboxClient
import Foundation

/// The account each set of credentials reached when it last mounted, kept beside the metadata
/// cache. A saved tree is keyed by the account's id, which only Dropbox can tell; with this a
/// mount whose first call cannot reach Dropbox still finds its saved tree and mounts offline. One
/// small JSON file per credentials, named by a hash of their identity (never the token), 0600.
struct KnownAccounts {
    let directory: String

    init(cacheDirectory: String) { directory = cacheDirectory + "/accounts" }

    private func path(for identity: String) -> String {
        directory + "/" + Credentials.digest(identity).prefix(32) + ".json"
    }

    func account(for identity: String) -> Account? {
        guard !identity.isEmpty, let data = FileManager.default.contents(atPath: path(for: identity)),
              let fields = try? JSONSerialization.jsonObject(with: data) as? [String: String],
              let id = fields["account_id"], let name = fields["display_name"], let email = fields["email"],
              let root = fields["root_namespace_id"], let home = fields["home_namespace_id"] else { return nil }
        return Account(accountID: id, displayName: name, email: email, rootNamespaceID: root, homeNamespaceID: home)
    }

    /// Best effort: a mount goes on without it (it only cannot start offline next time).
    func remember(_ account: Account, for identity: String) {
        guard !identity.isEmpty else { return }
        let fields = ["account_id": account.accountID, "display_name": account.displayName, "email": account.email,
                      "root_namespace_id": account.rootNamespaceID, "home_namespace_id": account.homeNamespaceID]
        guard let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) else { return }
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        let target = path(for: identity)
        if self.account(for: identity) == account { return }   // unchanged: no write
        FileManager.default.createFile(atPath: target, contents: data, attributes: [.posixPermissions: 0o600])
    }
}
