// `-o` options, as sshfs and mount.fuse3 pass them: a comma-separated list mixing dbx-mount's own
// settings, options libfuse passes to the kernel, and mount-helper words (from fstab) that mean
// nothing to us. Each is sorted here so that a typo fails loudly instead of being ignored.

import Foundation

struct MountOptionList {
    /// dbx-mount's own settings, by name (`uid=1000` → `["uid": "1000"]`, `case_insensitive` → `[..: ""]`).
    var settings: [String: String] = [:]
    /// Every `pin=` given, in order: the one setting that may be repeated (as `--pin`).
    var pins: [String] = []
    /// Options handed to libfuse unchanged (`allow_other`, `nosuid`, ...).
    var fuseOptions: [String] = []
    /// Accepted but meaningless here (`rw`, `_netdev`, `x-systemd.automount`, ...), for one debug line.
    var ignored: [String] = []

    static let settingNames: Set<String> = [
        "uid", "gid", "umask", "ttl", "deadline", "case_insensitive", "hide_exports", "token_file", "api_url", "content_url",
        "notify_url", "ca_bundle", "cache_dir", "no_cache", "account", "config", "team_space",
        "readahead_memory", "block_cache_dir", "block_cache_size", "foreground", "debug", "log_level", "log_file",
        "thumbnails", "thumbnail_dir", "listing_concurrency", "direct_io", "keep_page_cache", "metrics_addr", "pin", "pin_bandwidth",
        "link_password_file",
    ]
    /// Mount options libfuse or the kernel understand and that make sense on a read-only mount.
    static let fuseOptionNames: Set<String> = [
        "allow_other", "allow_root", "auto_unmount", "nosuid", "suid", "nodev", "dev", "noexec", "exec",
        "noatime", "atime", "relatime", "nodiratime", "strictatime", "sync", "async", "dirsync", "max_read",
        "fsname", "subtype",
    ]
    /// Words fstab and mount(8) pass along that concern the mount helper, not the filesystem.
    static let helperOptionNames: Set<String> = [
        "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail", "ro", "rw",
        "comment", "loud", "silent",
    ]
    /// FUSE options common in sshfs and rclone fstab lines that dbx-mount already applies
    /// (`default_permissions`) or that concern libfuse's high-level API, whose page caching
    /// dbx-mount decides itself (`kernel_cache`, `auto_cache`): accepted and ignored, not refused.
    static let impliedOptionNames: Set<String> = ["default_permissions", "kernel_cache", "auto_cache"]

    /// `path` against the directory dbx-mount was started in. libfuse moves the mount's process to
    /// `/` as it starts serving, and some of these paths are opened only after that (curl reads the
    /// CA bundle at each new connection, the cache folders are written for as long as the mount
    /// lives): a relative path would then name a file under `/`.
    static func absolute(_ path: String) -> String {
        guard !path.isEmpty, !path.hasPrefix("/") else { return path }
        let base = FileManager.default.currentDirectoryPath
        return (base.hasSuffix("/") ? base : base + "/") + path
    }

    /// Makes the settings `names` (each naming a local file or folder) absolute (`absolute`).
    mutating func makeAbsolute(_ names: [String]) {
        for name in names { settings[name] = settings[name].map(Self.absolute) }
    }

    /// Parses every `-o` argument. Throws a one-line reason for the first option it cannot accept.
    init(_ arguments: [String]) throws(UsageError) {
        for argument in arguments {
            for option in Self.split(argument) where !option.isEmpty {
                let name = option.split(separator: "=", maxSplits: 1).first.map(String.init) ?? option
                let value = option.contains("=") ? String(option.drop { $0 != "=" }.dropFirst()) : ""
                if Self.settingNames.contains(name) {
                    settings[name] = value
                    if name == "pin" { pins.append(value) }
                } else if Self.fuseOptionNames.contains(name) {
                    fuseOptions.append(option)
                } else if Self.helperOptionNames.contains(name) || Self.impliedOptionNames.contains(name)
                            || name.hasPrefix("x-") {
                    // mount(8) adds `rw` to every mount unless told `ro`, so refusing it would
                    // break plain fstab lines; the mount is read-only whatever it says.
                    ignored.append(option)
                } else {
                    throw UsageError("unknown mount option '\(name)' (see dbx-mount --help)")
                }
            }
        }
    }

    /// Splits on commas, honouring `\,` as a literal comma (libfuse's escape).
    static func split(_ list: String) -> [String] {
        var options: [String] = []
        var current = ""
        var escaped = false
        for character in list {
            if escaped { current.append(character); escaped = false }
            else if character == "\\" { escaped = true }
            else if character == "," { options.append(current); current = "" }
            else { current.append(character) }
        }
        options.append(current)
        return options
    }

    /// Escapes a value for a libfuse `-o` list.
    static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
    }

    func number(_ name: String, radix: Int = 10) throws(UsageError) -> UInt32? {
        guard let text = settings[name] else { return nil }
        guard let value = UInt32(text, radix: radix) else {
            throw UsageError("mount option '\(name)' needs a number, not '\(text)'")
        }
        return value
    }
}

struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
