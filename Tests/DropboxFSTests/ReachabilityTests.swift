import DropboxClient
@testable import DropboxFS
import Foundation
import TestSupport
import Testing

/// Offline (issue 18): while the change feed cannot connect to Dropbox, what needs Dropbox fails at
/// once, a listed folder keeps its answer, and all of it ends when Dropbox answers again.
@Suite("Reachability")
struct ReachabilityTests {
    let clock = ManualClock()
    static let refused = DropboxError.transport(code: 7, message: "Failed to connect: Couldn't connect to server")

    func makeFS(_ dropbox: FakeDropbox, startsOffline: Bool = false) -> DropboxFilesystem {
        var options = FilesystemOptions(metadataTTL: .seconds(60))
        options.startsOffline = startsOffline
        return DropboxFilesystem(api: dropbox, options: options, folderModified: 0, now: clock.now)
    }

    @Test func whileDropboxCannotBeReachedReadsAndNewListingsFailAtOnce() throws {
        let dropbox = FakeDropbox()
        dropbox.addFolder("/Docs")
        dropbox.addFolder("/Other")
        dropbox.addFile("/Docs/a.bin", Array(repeating: 7, count: 5000))
        let fs = makeFS(dropbox)
        let docs = try fs.lookup(parent: .root, name: "Docs").inode
        let other = try fs.lookup(parent: .root, name: "Other").inode
        let handle = try fs.open(try fs.lookup(parent: docs, name: "a.bin").inode).handle

        dropbox.fail(with: Self.refused)
        defer { fs.stopChangeFeed() }
        fs.startChangeFeed()
        #expect(eventually { fs.syncProgress.offline })
        let before = dropbox.counters
        let started = Date()
        #expect(throws: FSError.self) { _ = try fs.read(handle, offset: 0, size: 4096) }
        #expect(throws: FSError.self) { _ = try fs.openDirectory(other) }
        #expect(Date().timeIntervalSince(started) < 1, "no retries while offline")
        #expect(dropbox.counters.download == before.download && dropbox.counters.listFolder == before.listFolder,
                "nothing was asked of Dropbox")
        clock.advance(by: 120)
        let listed = try fs.openDirectory(docs)
        #expect(try fs.readDirectory(listed, from: 2).map(\.name) == ["a.bin"], "a listed folder keeps its answer")
        fs.releaseDirectory(listed)

        dropbox.fail(with: nil)
        #expect(eventually(within: 10) { !fs.syncProgress.offline && fs.isFeedLive }, "online again within the feed's retry")
        #expect(try fs.read(handle, offset: 0, size: 4096) == Array(repeating: 7, count: 4096))
        fs.release(handle)
    }

    @Test func aResetOrAServerErrorIsNotOffline() {
        let reachability = Reachability(startsOffline: true)
        #expect(reachability.isUnreachable)
        reachability.update(after: .transport(code: 56, message: "Connection reset by peer"))
        #expect(!reachability.isUnreachable)
        reachability.update(after: .transport(code: 6, message: "Could not resolve host"))
        #expect(reachability.isUnreachable)
        reachability.update(after: .server(status: 503, body: "unavailable"))
        #expect(!reachability.isUnreachable)
    }
}
