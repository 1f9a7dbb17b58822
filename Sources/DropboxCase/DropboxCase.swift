// How Dropbox lowercases a path (docs/dropbox-api.md §5): the fold behind `path_lower` and behind
// every case-insensitive comparison of names. One small module, because both sides of the wire
// need the same rule: the filesystem core indexes names by it, and the emulator makes `path_lower`
// with it, as Dropbox does.

public enum DropboxCase {
    /// The newest Unicode version whose case pairs Dropbox knows.
    static let unicodeVersion: Unicode.Version = (major: 4, minor: 1)

    /// `text` lowercased as Dropbox makes `path_lower`: each scalar by its simple one-to-one
    /// lowercase mapping of Unicode 4.1, nothing else. Swift's own `lowercased()` uses today's full
    /// mappings: it turns `İ` into two scalars, and lowercases `ẞ` and Cherokee, which Dropbox
    /// keeps apart from `ß` and the Cherokee small letters.
    public static func lowercased(_ text: some StringProtocol) -> String {
        var ascii = true
        for byte in text.utf8 where byte >= 0x80 { ascii = false; break }
        if ascii { return text.lowercased() }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { out.append(lowercase(scalar)) }
        return String(out)
    }

    /// One scalar's Dropbox lowercase.
    public static func lowercase(_ scalar: Unicode.Scalar) -> Unicode.Scalar {
        if scalar.value < 0x80 {
            return (0x41...0x5A).contains(scalar.value) ? Unicode.Scalar(UInt8(scalar.value) | 0x20) : scalar
        }
        // The one letter whose full mapping (i and a combining dot) is not its simple mapping.
        if scalar.value == 0x130 { return "i" }
        let properties = scalar.properties
        guard properties.changesWhenLowercased, let age = properties.age, age <= unicodeVersion else { return scalar }
        let mapped = properties.lowercaseMapping.unicodeScalars
        guard mapped.count == 1, let lower = mapped.first, let lowerAge = lower.properties.age,
              lowerAge <= unicodeVersion else { return scalar }
        return lower
    }
}
