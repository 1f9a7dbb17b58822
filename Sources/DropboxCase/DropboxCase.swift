// How Dropbox lowercases a path (docs/dropbox-api.md §5): the fold behind `path_lower` and behind
// every case-insensitive comparison of names. One small module, because both sides of the wire
// need the same rule: the filesystem core indexes names by it, and the emulator makes `path_lower`
// with it, as Dropbox does.

import Foundation

public enum DropboxCase {
    /// The newest Unicode version whose case pairs Dropbox knows.
    static let unicodeVersion: Unicode.Version = (major: 4, minor: 1)

    /// `text` as Dropbox makes `path_lower` from it: each scalar lowercased by its simple
    /// one-to-one mapping of Unicode 4.1, nothing else, then composed (NFC), so that a name
    /// written decomposed, as macOS writes it, folds as its composed form does. Swift's own
    /// `lowercased()` uses today's full mappings: it turns `İ` into two scalars, and lowercases
    /// `ẞ` and Cherokee, which Dropbox keeps apart from `ß` and the Cherokee small letters.
    public static func lowercased(_ text: some StringProtocol) -> String {
        var ascii = true
        for byte in text.utf8 where byte >= 0x80 { ascii = false; break }
        if ascii { return text.lowercased() }
        var out = String.UnicodeScalarView()
        var mayCompose = false
        for scalar in text.unicodeScalars {
            out.append(lowercase(scalar))
            if !mayCompose { mayCompose = decomposes(scalar) }
        }
        let lowered = String(out)
        return mayCompose ? lowered.precomposedStringWithCanonicalMapping : lowered
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

    /// Whether NFC may change text holding `scalar`: a combining mark, a conjoining Hangul jamo,
    /// or one of the scalars NFC replaces although they combine with nothing (singletons such as
    /// the Ohm and Kelvin signs, and the composition exclusions: CJK compatibility ideographs,
    /// Indic nukta forms, Hebrew presentation forms, ...). Text without any is its own NFC, so
    /// most names never reach Foundation's normalization.
    private static func decomposes(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.properties.canonicalCombiningClass != .notReordered { return true }
        switch scalar.value {
        case 0x0300...0x036F, 0x3099, 0x309A,                        // marks that compose
             0x1100...0x11FF, 0xA960...0xA97F, 0xD7B0...0xD7FF,      // conjoining Hangul jamo
             0x0374, 0x037E, 0x0387, 0x0958...0x095F, 0x09DC...0x09DF, 0x0A33, 0x0A36, 0x0A59...0x0A5E,
             0x0B5C...0x0B5D, 0x0F43...0x0FB9, 0x1F71...0x1FFD, 0x2000...0x2001, 0x2126, 0x212A...0x212B,
             0x2329...0x232A, 0x2ADC, 0xF900...0xFAFF, 0xFB1D...0xFB4E, 0x1D15E...0x1D1C0, 0x2F800...0x2FA1D:
            return true
        default:
            return false
        }
    }
}
