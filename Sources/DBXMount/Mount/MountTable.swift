// What is mounted where, from the kernel's mount table (/proc/self/mountinfo), so that a mount is
// not stacked on top of another dbx-mount at the same path. `stat` cannot tell: on the mount
// point of a killed dbx-mount it is answered from the kernel's attribute cache for up to a minute.

import Foundation

enum MountTable {
    /// The filesystem type of the topmost mount exactly at `path` (absolute, symlinks resolved),
    /// such as `fuse.dbx-mount`; nil when nothing is mounted there.
    static func fileSystemType(mountedAt path: String) -> String? {
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        // Later lines are mounted on top of earlier ones.
        var found: String?
        for line in table.split(separator: "\n") {
            // "36 35 98:0 /root /mnt/point rw,noatime master:1 - fuse.dbx-mount dropbox:/ ro,..."
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count > 4, let separator = fields.firstIndex(of: "-"), separator + 1 < fields.count,
                  unescape(fields[4]) == path else { continue }
            found = String(fields[separator + 1])
        }
        return found
    }

    /// The kernel writes a space, tab, newline and backslash in a path as three octal digits.
    static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "\\"), utf8.count >= 3, let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
