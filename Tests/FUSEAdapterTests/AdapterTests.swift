// The adapter's own logic, without a kernel: the one errno table, the xattr size protocol, what
// `stat` shows for a node, and the operation table libfuse gets.

import CShims
import DropboxClient
@testable import DropboxFS
@testable import FUSEAdapter
import Glibc
import TestSupport
import Testing

@Suite("FUSE adapter")
struct AdapterTests {
    @Test func everyErrorHasItsErrno() {
        let table: [(FSError, Int32)] = [
            (.notFound, ENOENT), (.notADirectory, ENOTDIR), (.isADirectory, EISDIR), (.readOnly, EROFS),
            (.accessDenied, EACCES), (.badHandle, EBADF), (.noAttribute, ENODATA),
            (.attributeNamespaceUnsupported, EOPNOTSUPP), (.changedSinceOpen, ESTALE), (.nodeGone, ESTALE), (.bufferTooSmall, ERANGE),
            (.upstream(.transport(code: 7, message: "refused")), EIO), (.upstream(.server(status: 503, body: "")), EIO),
        ]
        for (error, expected) in table { #expect(error.errno == expected, "\(error)") }
    }

    @Test func attributeAnswersFollowTheSizeProtocol() {
        let value = Array("id:abc".utf8)
        #expect(AttributeAnswer(value, bufferSize: 0) == .size(6))
        #expect(AttributeAnswer(value, bufferSize: 5) == .failure(.bufferTooSmall))
        #expect(FSError.bufferTooSmall.errno == ERANGE)
        #expect(AttributeAnswer(value, bufferSize: 6) == .bytes(value))
        #expect(AttributeAnswer(value, bufferSize: 4096) == .bytes(value))
        #expect(AttributeAnswer([], bufferSize: 0) == .size(0))
    }

    @Test func statShowsTypePermissionsSizeAndTimes() {
        let file = NodeAttributes(inode: InodeNumber(42), serialNumber: 0x1234_5678_9ABC, kind: .file, permissions: 0o444,
                                  size: 1025, linkCount: 1, modified: 1_700_000_123, uid: 1000, gid: 100)
        let st = FUSEAdapter.stat(file)
        #expect(st.st_ino == 0x1234_5678_9ABC, "the number every mount shows, not the node id")
        #expect(st.st_mode == UInt32(CShims.S_IFREG) | 0o444)
        #expect(st.st_size == 1025)
        #expect(st.st_blocks == 3)   // 512-byte blocks, rounded up, as du expects
        #expect(st.st_nlink == 1)
        #expect(st.st_uid == 1000 && st.st_gid == 100)
        #expect(st.st_mtim.tv_sec == 1_700_000_123 && st.st_mtim.tv_nsec == 0)
        #expect(st.st_ctim.tv_sec == st.st_mtim.tv_sec)

        let folder = NodeAttributes(inode: .root, serialNumber: 1, kind: .directory, permissions: 0o555, size: 4096, linkCount: 3,
                                    modified: 5, uid: 0, gid: 0)
        let dir = FUSEAdapter.stat(folder)
        #expect(dir.st_mode == UInt32(CShims.S_IFDIR) | 0o555)
        #expect(dir.st_nlink == 3)
    }

    @Test func everyWriteOperationHasAnAnswer() {
        // Left nil, libfuse would answer ENOSYS, and tools would report "not implemented" rather
        // than "read-only file system".
        let ops = Callbacks.operations()
        #expect(ops.setattr != nil && ops.mknod != nil && ops.mkdir != nil && ops.unlink != nil)
        #expect(ops.rmdir != nil && ops.symlink != nil && ops.rename != nil && ops.link != nil)
        #expect(ops.write != nil && ops.create != nil && ops.setxattr != nil && ops.removexattr != nil)
        #expect(ops.fallocate != nil && ops.access != nil)
        #expect(ops.lookup != nil && ops.getattr != nil && ops.read != nil && ops.readdirplus != nil)
    }

    @Test func kernelTrustsAnswersForOneSecondUntilTheFeedIsLive() {
        final class NoHooks: MountHooks {
            func mountInitialized() {}
            func fileOpened() {}
            func kernelConnectionEnded() {}
        }
        let filesystem = DropboxFilesystem(api: FakeDropbox(), options: FilesystemOptions(metadataTTL: .seconds(60)),
                                           folderModified: 0)
        let context = FUSEContext(filesystem: filesystem, hooks: NoHooks())
        #expect(context.timeouts.entry == 1)
        #expect(context.timeouts.attributes == 1)
        #expect(context.timeouts.negativeEntry == 1)
    }
}
