import DropboxClient
@testable import DropboxFS
import Foundation
import TestSupport
import Testing

/// Symbolic links as Dropbox keeps them (a file with `symlink_info`): shown as links, never read
/// or downloaded, followed through the feed and kept between mounts.
extension ChangeFeedTests {
    @Test func aLinkIsShownAsALinkWithItsTargetAndIsNeverDownloaded() throws {
        dropbox.addFolder("/Code")
        dropbox.addFile("/Code/main.swift", Array("print(1)\n".utf8))
        dropbox.addSymlink("/Code/current", to: "main.swift")
        let far = String(repeating: "../far/away/", count: 40) + "target"   // longer than a length byte says
        dropbox.addSymlink("/Code/far", to: far)
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        let link = try resolve(fs, "Code/current")
        #expect(link.kind == .symlink && link.size == 10 && link.permissions == 0o777)
        #expect(try fs.readLink(link.inode) == "main.swift")
        #expect(try fs.readLink(try resolve(fs, "Code/far").inode) == far)
        #expect(try names(fs, try resolve(fs, "Code").inode).sorted() == ["current", "far", "main.swift"])
        #expect(throws: FSError.symbolicLink) { try fs.open(link.inode) }
        #expect(throws: FSError.notASymbolicLink) { try fs.readLink(try resolve(fs, "Code/main.swift").inode) }
        #expect(dropbox.counters.download == 0)

        // Pointed elsewhere, it is the same link with a new target; made a file, a new node.
        dropbox.addSymlink("/Code/current", to: "old.swift")
        #expect(eventually { (try? fs.readLink(link.inode)) == "old.swift" })
        #expect(try resolve(fs, "Code/current").inode == link.inode)
        dropbox.addFile("/Code/current", Array("now a file".utf8))
        #expect(eventually { (try? resolve(fs, "Code/current"))?.kind == .file })
        #expect(try resolve(fs, "Code/current").inode != link.inode, "the kernel never sees an inode change type")
    }

    @Test func aLinkIsKeptInTheSavedTree() throws {
        dropbox.addSymlink("/link", to: "/home/ann/Documents")
        let store = InMemoryStore()
        let first = makeFS(store: store)
        try startLive(first)
        first.stopChangeFeed()
        first.persist()
        #expect(eventually { store.load()?.entries.first { $0.path == "/link" }?.file?.symlinkTarget == "/home/ann/Documents" })
        let second = makeFS(store: store)
        defer { second.stopChangeFeed() }
        second.startChangeFeed()
        let link = try resolve(second, "link")
        #expect(link.kind == .symlink)
        #expect(try second.readLink(link.inode) == "/home/ann/Documents")
    }

    @Test func aLinkWhoseTargetCannotBeALinksIsLeftOut() throws {
        dropbox.addSymlink("/empty", to: "")
        dropbox.addFile("/kept.txt", [1])
        let fs = makeFS()
        defer { fs.stopChangeFeed() }
        try startLive(fs)
        #expect(try names(fs, .root) == ["kept.txt"])
    }
}
