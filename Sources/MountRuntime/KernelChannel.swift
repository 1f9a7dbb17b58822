// The session's reads and writes on /dev/fuse, through libfuse's custom I/O hooks, for one reason:
// to ask the kernel for `FUSE_DIRECT_IO_ALLOW_MMAP`, which libfuse 3.14 cannot ask for.
//
// Files opened with `direct_io` (every file with `--direct-io`, and a file whose size the kernel
// may hold stale) skip the page cache for read(2), which on a long stream saves a copy. Without
// that flag the kernel refuses a shared mmap of such a file with ENODEV; with it (Linux 6.6 and
// later) mmap goes through the page cache as for any other file. The flag lives in the INIT
// reply's second flags word, which libfuse 3.14 fills only from the capabilities it knows.
//
// So every request is read and every reply written exactly as libfuse would (read(2) and
// writev(2) on the session's descriptor); only the INIT reply is copied and has two bits added:
// `FUSE_INIT_EXT` (the second flags word is meant) and `FUSE_DIRECT_IO_ALLOW_MMAP`. A kernel
// that does not know a bit ignores it. The INIT reply is recognised without any state: INIT is
// the first request of a connection, so it carries the first unique id the kernel hands out (2),
// and its body starts with the protocol's major version, 7. Layouts: docs/ARCHITECTURE.md.
//
// The read hook also sees the unmount first: the kernel ends the connection and every read of
// /dev/fuse fails with ENODEV. libfuse then waits for each worker's request in progress to be
// answered, and one waiting on a stalled download would hold the process (and the cache lock a
// new mount needs) until the call's deadline. So the mount is told (`kernelConnectionEnded`),
// and cancels its Dropbox calls as on SIGTERM.

import CShims
import FUSEAdapter

#if canImport(Glibc)
import Glibc
#endif

enum KernelChannel {
    /// `fuse_out_header`: len (u32), error (i32), unique (u64).
    static let errorOffset = 4
    static let uniqueOffset = 8
    static let headerSize = 16
    /// `fuse_init_out`: major (u32) at 0, flags (u32) at 12, flags2 (u32) at 32 (after max_pages
    /// and map_alignment, two u16 at 28 and 30).
    static let flagsOffset = 12
    static let flags2Offset = 32
    static let initReplyMinimum = 36

    static let initUnique: UInt64 = 2
    static let protocolMajor: UInt32 = 7
    /// `FUSE_INIT_EXT`, bit 30 of flags.
    static let initExtended: UInt32 = 1 << 30
    /// `FUSE_DIRECT_IO_ALLOW_MMAP`, bit 36 of the 64-bit flags: bit 4 of flags2.
    static let directIOAllowMmap: UInt32 = 1 << (36 - 32)

    /// Routes `session`'s I/O through `read` and `writeReply`. False if libfuse refused, and then
    /// the session goes on with its own I/O (only mmap of direct_io files is lost).
    static func install(on session: OpaquePointer) -> Bool {
        var io = fuse_custom_io()
        // libfuse hands the hooks the session's userdata: the FUSEContext.
        io.read = { fd, buffer, length, userdata in
            let count = Glibc.read(fd, buffer, length)
            if count < 0, errno == ENODEV, let userdata {
                // libfuse reads with cancellation enabled, and cancels every worker as soon as
                // one of them has seen the end: a cancel landing in the mount's work (a log line's
                // write is a cancellation point) would unwind Swift frames holding locks, and
                // the teardown would wait on them for good. So none lands until the work is done.
                var previous: Int32 = 0
                pthread_setcancelstate(Int32(PTHREAD_CANCEL_DISABLE), &previous)
                Unmanaged<FUSEContext>.fromOpaque(userdata).takeUnretainedValue().hooks.kernelConnectionEnded()
                pthread_setcancelstate(previous, nil)
                errno = ENODEV   // libfuse reads it
            }
            return count
        }
        io.writev = { fd, vectors, count, _ in KernelChannel.writeReply(fd, vectors, count) }
        return fuse_session_custom_io(session, &io, fuse_session_fd(session)) == 0
    }

    static func writeReply(_ fd: Int32, _ vectors: UnsafeMutablePointer<iovec>?, _ count: Int32) -> Int {
        guard let vectors, count == 2, let header = vectors[0].iov_base, vectors[0].iov_len >= headerSize,
              let body = vectors[1].iov_base, vectors[1].iov_len >= initReplyMinimum,
              header.loadUnaligned(fromByteOffset: uniqueOffset, as: UInt64.self) == initUnique,
              header.loadUnaligned(fromByteOffset: errorOffset, as: Int32.self) == 0,
              body.loadUnaligned(as: UInt32.self) == protocolMajor else {
            return Glibc.writev(fd, vectors, count)
        }
        var patched = Array(UnsafeRawBufferPointer(start: body, count: vectors[1].iov_len))
        addInitFlags(&patched)
        return patched.withUnsafeMutableBytes { bytes in
            var copy = [vectors[0], iovec(iov_base: bytes.baseAddress, iov_len: bytes.count)]
            return Glibc.writev(fd, &copy, 2)
        }
    }

    /// Adds `FUSE_INIT_EXT` and `FUSE_DIRECT_IO_ALLOW_MMAP` to an INIT reply's body.
    static func addInitFlags(_ body: inout [UInt8]) {
        body.withUnsafeMutableBytes { bytes in
            let flags = bytes.loadUnaligned(fromByteOffset: flagsOffset, as: UInt32.self)
            bytes.storeBytes(of: flags | initExtended, toByteOffset: flagsOffset, as: UInt32.self)
            let flags2 = bytes.loadUnaligned(fromByteOffset: flags2Offset, as: UInt32.self)
            bytes.storeBytes(of: flags2 | directIOAllowMmap, toByteOffset: flags2Offset, as: UInt32.self)
        }
    }
}
