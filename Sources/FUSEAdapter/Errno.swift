import CShims
import DropboxFS

extension FSError {
    /// The one table from filesystem errors to errno.
    var errno: Int32 {
        switch self {
        case .notFound: ENOENT
        case .notADirectory: ENOTDIR
        case .isADirectory: EISDIR
        case .symbolicLink: ELOOP
        case .notASymbolicLink: EINVAL
        case .readOnly: EROFS
        case .accessDenied: EACCES
        case .badHandle: EBADF
        case .noAttribute: ENODATA
        case .attributeNamespaceUnsupported: EOPNOTSUPP
        case .changedSinceOpen: ESTALE
        case .nodeGone: ESTALE
        case .bufferTooSmall: ERANGE
        case .upstream: EIO
        }
    }
}
