import ArgumentParser

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
}
