// A path's `file://` URI exactly as a file manager writes it, because the cache file's name is the
// MD5 of that string: one character escaped differently and the file manager looks under another
// name. GIO, Nautilus and tumbler (Thunar) use GLib's `g_filename_to_uri`; KIO (Dolphin) uses Qt's
// `QUrl::fromLocalFile(...).toEncoded()`, which leaves `[`, `]` and `;` as they are where GLib
// escapes them (Qt's `qurlrecode.cpp`, KIO's `filepreviewjob.cpp`).

enum FileURI {
    /// GLib's escaping for paths (its `acceptable` table with `UNSAFE_PATH`): these ASCII
    /// characters stay as they are besides letters and digits; every other byte, UTF-8 included,
    /// becomes `%XX` in upper case.
    private static let unescaped = Set("/-_.!~*'()$&+,=:@".utf8)
    /// What Qt leaves besides those.
    private static let unescapedByQt = unescaped.union("[];".utf8)

    /// GLib's URI of `absolutePath`.
    static func of(_ absolutePath: String) -> String { uri(absolutePath, leaving: unescaped) }

    /// Qt's URI of `absolutePath`: GLib's unless the path holds `[`, `]` or `;`.
    static func qtForm(of absolutePath: String) -> String { uri(absolutePath, leaving: unescapedByQt) }

    private static func uri(_ absolutePath: String, leaving unescaped: Set<UInt8>) -> String {
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
