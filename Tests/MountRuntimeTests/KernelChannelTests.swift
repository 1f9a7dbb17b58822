// The session's writes to /dev/fuse, into a pipe instead: the INIT reply gains FUSE_INIT_EXT and
// FUSE_DIRECT_IO_ALLOW_MMAP at the kernel's offsets, and every other reply goes out untouched.

import CShims
import Foundation
@testable import MountRuntime
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Kernel channel")
struct KernelChannelTests {
    /// A `fuse_out_header` (len, error, unique) and a body, written through `writeReply` into a
    /// pipe; returns what came out of the pipe's other end.
    func written(unique: UInt64, error: Int32 = 0, body: [UInt8]) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: 16)
        header.withUnsafeMutableBytes { bytes in
            bytes.storeBytes(of: UInt32(16 + body.count), toByteOffset: 0, as: UInt32.self)
            bytes.storeBytes(of: error, toByteOffset: 4, as: Int32.self)
            bytes.storeBytes(of: unique, toByteOffset: 8, as: UInt64.self)
        }
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]) }
        var body = body
        let sent = header.withUnsafeMutableBytes { head in
            body.withUnsafeMutableBytes { rest in
                var vectors = [iovec(iov_base: head.baseAddress, iov_len: head.count),
                               iovec(iov_base: rest.baseAddress, iov_len: rest.count)]
                return KernelChannel.writeReply(ends[1], &vectors, 2)
            }
        }
        close(ends[1])
        #expect(sent == 16 + body.count)
        var out = [UInt8](repeating: 0, count: 1024)
        let got = read(ends[0], &out, out.count)
        return Array(out.prefix(max(got, 0)))
    }

    /// A 64-byte `fuse_init_out` as libfuse 3.14 writes it: 7.31, flags 0x4040f029, flags2 0,
    /// max_pages 256 at offset 28.
    func initBody() -> [UInt8] {
        var body = [UInt8](repeating: 0, count: 64)
        body.withUnsafeMutableBytes { bytes in
            bytes.storeBytes(of: UInt32(7), toByteOffset: 0, as: UInt32.self)
            bytes.storeBytes(of: UInt32(31), toByteOffset: 4, as: UInt32.self)
            bytes.storeBytes(of: UInt32(0x4040_f029), toByteOffset: 12, as: UInt32.self)
            bytes.storeBytes(of: UInt16(256), toByteOffset: 28, as: UInt16.self)
        }
        return body
    }

    func word(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) }
    }

    @Test func theInitReplyAsksForMmapOfDirectIOFiles() {
        let out = written(unique: 2, body: initBody())
        #expect(out.count == 80)
        let body = Array(out.dropFirst(16))
        #expect(word(body, at: 12) == 0x4040_f029 | 1 << 30, "FUSE_INIT_EXT kept or added, the rest as libfuse set it")
        #expect(word(body, at: 32) == 1 << 4, "FUSE_DIRECT_IO_ALLOW_MMAP is bit 36: bit 4 of flags2")
        #expect(body.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 28, as: UInt16.self) } == 256)
        var expected = initBody()
        expected.replaceSubrange(12..<16, with: out[28..<32])
        expected.replaceSubrange(32..<36, with: out[48..<52])
        #expect(body == expected, "nothing else changes")
    }

    @Test func everyOtherReplyGoesOutAsItCame() {
        // Same shape and body as an INIT reply, but another request's id, an error, or a body
        // that is not a protocol-7 INIT: all untouched.
        for (unique, error) in [(UInt64(4), Int32(0)), (2, -2)] {
            let body = initBody()
            #expect(Array(written(unique: unique, error: error, body: body).dropFirst(16)) == body)
        }
        var data = initBody()
        data[0] = 8
        #expect(Array(written(unique: 2, body: data).dropFirst(16)) == data)
        let short = Array("hello".utf8)
        #expect(Array(written(unique: 2, body: short).dropFirst(16)) == short)
    }
}
