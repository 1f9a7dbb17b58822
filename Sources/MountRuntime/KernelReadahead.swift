// The kernel reads a FUSE file ahead by its backing device's `read_ahead_kb`, which FUSE leaves at
// 128 KiB (the `max_readahead` offered in INIT can only lower it). With 128 KiB the kernel sends a
// sequential reader's data as 128 KiB requests however large `max_pages` is; raising it lets the
// kernel send whole 1 MiB requests (`max_pages` 256, libfuse's largest) and keep several in
// flight, which is what a fast link needs. Only root may write the sysfs file; anyone else keeps
// the kernel's default (reads still work, in smaller requests).

import Foundation
import Logging

enum KernelReadahead {
    /// What the kernel may read ahead on a dbx-mount, in KiB.
    static let kibibytes = 4096

    /// Sets the mount's `read_ahead_kb`, found through `/proc/self/mountinfo`. Returns false when
    /// it cannot (not root, no sysfs, mount not found).
    @discardableResult
    static func raise(mountpoint: String, to kib: Int = kibibytes, logger: Logger) -> Bool {
        guard let device = device(of: mountpoint) else {
            logger.debug("no mountinfo entry for the mount point", metadata: ["mountpoint": "\(mountpoint)"])
            return false
        }
        let path = "/sys/class/bdi/\(device)/read_ahead_kb"
        if let current = (try? String(contentsOfFile: path, encoding: .utf8)).flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }),
           current >= kib {
            return true
        }
        do {
            try "\(kib)\n".write(toFile: path, atomically: false, encoding: .utf8)
            return true
        } catch {
            logger.debug("cannot raise the kernel's read-ahead", metadata: ["path": "\(path)", "error": "\(error)"])
            return false
        }
    }

    /// `major:minor` of the FUSE mount at `mountpoint` (the last one, if mounted over).
    static func device(of mountpoint: String) -> String? {
        let target = URL(fileURLWithPath: mountpoint).resolvingSymlinksInPath().path
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        return device(of: target, mountinfo: text)
    }

    /// The same, read from the text of a `mountinfo` file.
    static func device(of target: String, mountinfo text: String) -> String? {
        var found: String?
        for line in text.split(separator: "\n") {
            // id parent major:minor root mountpoint options ... - fstype source superoptions
            let fields = line.split(separator: " ")
            guard fields.count > 4, let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count,
                  fields[dash + 1].hasPrefix("fuse") else { continue }
            if unescape(fields[4]) == target { found = String(fields[2]) }
        }
        return found
    }

    /// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
    private static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.first {
            if byte == UInt8(ascii: "\\"), utf8.count >= 4,
               let value = UInt8(String(decoding: utf8.dropFirst().prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(4)
            } else {
                bytes.append(byte)
                utf8 = utf8.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
