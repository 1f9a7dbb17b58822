// A path's `file://` URI exactly as GLib's `g_filename_to_uri` writes it, because the cache file's
// name is the MD5 of that string and GIO, Nautilus and tumbler compute it the same way: one
// character escaped differently and the file manager looks under another name.

enum FileURI {
    /// GLib's escaping for paths (its `acceptable` table with `UNSAFE_PATH`): these ASCII
    /// characters stay as they are besides letters and digits; every other byte, UTF-8 included,
    /// becomes `%XX` in upper case.
    private static let unescaped = Set("/-_.!~*'()$&+,=:@".utf8)

    static func of(_ absolutePath: String) -> String {
        var uri = "file://"
        for byte in absolutePath.utf8 {
            let isAlphanumeric = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            if isAlphanumeric || unescaped.contains(byte) {
                uri.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = Array("0123456789ABCDEF".utf8)
                uri.unicodeScalars.append("%")
                uri.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                uri.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0x0F)]))
            }
        }
        return uri
    }
}
