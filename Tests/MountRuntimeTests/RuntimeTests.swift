// The process around a mount, without a mount: finding the mount's device in mountinfo, systemd's
// notify datagram, the resident-memory figure.

import Foundation
import Glibc
@testable import MountRuntime
import Testing

@Suite("Mount runtime")
struct RuntimeTests {
    @Test func findsTheLastFuseMountAtAPathWithEscapes() {
        let mountinfo = """
            22 1 0:21 / /proc rw,nosuid - proc proc rw
            61 22 0:52 / /mnt/photo\\040album rw,nosuid,nodev - fuse.dbx-mount dropbox:/ ro,user_id=0
            62 61 0:53 / /mnt/photo\\040album rw,nosuid,nodev - fuse.dbx-mount dropbox:/Photos ro,user_id=0
            63 22 0:54 / /mnt/other rw - ext4 /dev/sda1 rw
            """
        #expect(KernelReadahead.device(of: "/mnt/photo album", mountinfo: mountinfo) == "0:53")
        #expect(KernelReadahead.device(of: "/mnt/other", mountinfo: mountinfo) == nil)   // not FUSE
        #expect(KernelReadahead.device(of: "/mnt/none", mountinfo: mountinfo) == nil)
    }

    @Test func notifiesSystemdOverADatagramSocket() throws {
        let path = NSTemporaryDirectory() + "dbx-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd); unlink(path) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)

        #expect(SystemdNotify.send("READY=1\nMAINPID=42", to: path))
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        #expect(count > 0)
        #expect(String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self) == "READY=1\nMAINPID=42")
    }

    @Test func refusesSocketNamesSystemdNeverGives() {
        #expect(!SystemdNotify.send("READY=1", to: ""))
        #expect(!SystemdNotify.send("READY=1", to: "relative/path"))
        #expect(!SystemdNotify.send("READY=1", to: "/" + String(repeating: "x", count: 200)))   // longer than sun_path
    }

    @Test func aNewMountWaitsForOneThatUnmountedAndIsSavingButNotForALiveOne() throws {
        var template = Array((FileManager.default.temporaryDirectory.path + "/cache-lock-XXXXXX").utf8CString)
        let path = String(cString: mkdtemp(&template)!) + "/tree.lock"
        let live = try #require(try CacheLock.acquire(path))
        let started = Date()
        #expect(throws: CacheLock.Busy.self) { try CacheLock.acquire(path) }
        // Watched for a mark for a second only (fusermount3 -u returns before the owner writes
        // it), not the minute a save may take.
        #expect(Date().timeIntervalSince(started) < 10, "a live mount's lock fails within a second or so")
        // Unmounted and saving: the next mount waits for the save to end, then takes the lock,
        // also when the mark comes only after it started looking.
        let release = Thread { usleep(300_000); CacheLock.markUnmounted(live); usleep(500_000); close(live) }
        release.start()
        let waited = Date()
        let next = try #require(try CacheLock.acquire(path))
        #expect(Date().timeIntervalSince(waited) >= 0.6)
        close(next)
    }

    @Test func residentMemoryIsMeasured() {
        #expect(ProcessMemory.residentBytes() > 1 << 20)
    }
}
