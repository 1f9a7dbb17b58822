/// Which names Dropbox may send that a POSIX filesystem can show.
enum EntryName {
    static func isValid(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
            && name.utf8.count <= 255
    }
}
