import ArgumentParser
import Foundation

/// The root command. `mount` is the default subcommand, so `dbx-mount [OPTIONS] [SOURCE] MOUNTPOINT`
/// (and mount.fuse3's `dbx-mount SOURCE MOUNTPOINT -o ...`) work without naming it.
@main
struct DBXMountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dbx-mount",
        abstract: "Mount a Dropbox account, or one folder of it, as a read-only filesystem.",
        discussion: """
            Without a subcommand, dbx-mount mounts: dbx-mount [OPTIONS] [SOURCE] MOUNTPOINT (see dbx-mount mount --help). Sign in first with dbx-mount auth, or give a token through DBX_ACCESS_TOKEN or --token-file.
            """,
        version: "0.1.0",
        subcommands: [MountCommand.self, StatusCommand.self, PinCommand.self, UnpinCommand.self, AuthCommand.self, LogoutCommand.self, WhoamiCommand.self, ContentHashCommand.self],
        defaultSubcommand: MountCommand.self
    )

    /// As ArgumentParser's own, except that a bad command line is one line on stderr (what is wrong,
    /// and where help is) instead of the message, the option's help and the usage: a mount started
    /// by fstab or systemd logs that line, and a user sees at once what to fix. Help and version
    /// requests print in full as usual.
    static func main() {
        let command: ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            let code = exitCode(for: error)
            let message = self.message(for: error).split(separator: "\n").first.map(String.init) ?? ""
            guard code != .success, !message.isEmpty else { exit(withError: error) }
            let line = message.hasPrefix("Error: ") ? String(message.dropFirst(7)) : message
            FileHandle.standardError.write(Data("dbx-mount: \(line) (see dbx-mount --help)\n".utf8))
            Foundation.exit(code.rawValue)
        }
        do {
            var command = command
            try command.run()
        } catch {
            exit(withError: error)
        }
    }
}
