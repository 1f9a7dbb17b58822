/// Which names Dropbox may send that a POSIX filesystem can show.
enum EntryName {
    static func isValid(_ name: String) -> Bool {
        // Byte checks: String.contains(String) goes through Foundation and showed in profiles of
        // a large first listing.
        let utf8 = name.utf8
        return !utf8.isEmpty && utf8.count <= 255 && name != "." && name != ".."
            && !utf8.contains { $0 == UInt8(ascii: "/") || $0 == 0 }
    }
}
