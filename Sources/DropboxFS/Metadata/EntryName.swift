/// Which names Dropbox may send that a POSIX filesystem can show.
enum EntryName {
    static func isValid(_ name: String) -> Bool {
        // Byte checks: String.contains(String) goes through Foundation and showed in profiles of
        // a large first listing.
        let utf8 = name.utf8
        return !utf8.isEmpty && utf8.count <= longest && name != "." && name != ".."
            && !utf8.contains { $0 == UInt8(ascii: "/") || $0 == 0 }
    }

    /// The longest name shown, in bytes: FUSE's own limit (the kernel refuses a longer name in a
    /// lookup, and fails a whole listing that holds one). Not 255, the limit of most local file
    /// systems: Dropbox allows 255 characters, which in UTF-8 is up to three bytes each for CJK
    /// names, and hiding such a file would leave a silent gap in every copy or backup made from
    /// the mount, where copying it to a local disk fails loudly with ENAMETOOLONG.
    static let longest = 1024
}
