import Foundation

/// The `--ca-bundle` file (`ca_bundle=`), checked before Dropbox is asked anything. libcurl says
/// it cannot use the file only once it connects, and as a transport failure, which a mount with a
/// saved tree would take for Dropbox being unreachable and mount offline instead of saying the
/// setting is wrong.
enum CABundle {
    /// Far over any real bundle (Debian's holds about 150 certificates in about 220 KB); a larger
    /// file is not read into memory to look for certificates.
    static let maximumSize = 64 << 20
    /// The PEM headers OpenSSL reads a CA certificate from (`PEM_X509_INFO_read_bio`).
    static let certificateMarkers = ["-----BEGIN CERTIFICATE-----", "-----BEGIN TRUSTED CERTIFICATE-----",
                                     "-----BEGIN X509 CERTIFICATE-----"]

    /// Why `path` cannot be the CA bundle, in one line; nil when it is a readable file holding at
    /// least one PEM certificate (libcurl reads the bundle as PEM).
    static func problem(at path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return "cannot use the CA bundle \(path): \(String(cString: strerror(errno)))"
        }
        guard info.st_mode & S_IFMT == S_IFREG else { return "the CA bundle \(path) is not a file" }
        guard info.st_size <= maximumSize else { return "the CA bundle \(path) is over 64 MiB: not a file of certificates" }
        guard let contents = FileManager.default.contents(atPath: path) else { return "cannot read the CA bundle \(path)" }
        guard certificateMarkers.contains(where: { contents.range(of: Data($0.utf8)) != nil }) else {
            return "the CA bundle \(path) holds no PEM certificate (\(certificateMarkers[0]))"
        }
        return nil
    }
}
