// The freedesktop cache entries: URIs escaped as GLib escapes them, MD5 file names, the text
// chunks GIO and tumbler check, permissions, atomic writes, and an unwritable directory.

import DropboxFS
import Foundation
import Glibc
import TestSupport
import Testing
@testable import ThumbnailCache

@Suite("Freedesktop thumbnail cache")
struct ThumbnailCacheTests {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-thumbs-\(UUID().uuidString)").path

    func target(_ path: String, rev: String = "0123456789", modified: Int64 = 1_700_000_123) -> ThumbnailTarget {
        ThumbnailTarget(id: "id:x", rev: rev, relativePath: path, size: 4242, modified: modified, mimeType: "image/jpeg")
    }

    var png: [UInt8] { FakeDropbox.thumbnail(rev: "0123456789", size: .w128h128, mode: .strict) }

    @Test func urisAreEscapedAsGLibEscapesThem() {
        #expect(FileURI.of("/home/jens/photos/me.png") == "file:///home/jens/photos/me.png")
        #expect(FileURI.of("/mnt/a b/c;d#e%f?g") == "file:///mnt/a%20b/c%3Bd%23e%25f%3Fg")
        #expect(FileURI.of("/mnt/!$&'()*+,=:@~-_.") == "file:///mnt/!$&'()*+,=:@~-_.")
        #expect(FileURI.of("/mnt/\"<>[]^`{|}\\") == "file:///mnt/%22%3C%3E%5B%5D%5E%60%7B%7C%7D%5C")
        #expect(FileURI.of("/mnt/Café ünï.jpg") == "file:///mnt/Caf%C3%A9%20%C3%BCn%C3%AF.jpg")
    }

    @Test func fileNamesAreTheMD5OfTheURI() {
        // The Thumbnail Managing Standard's own example.
        let store = FreedesktopThumbnailStore(directory: "/c", mountPoint: "/home/jens")
        #expect(store.path(of: target("/photos/me.png"), flavor: .normal) == "/c/normal/c6ee772d9e49320e97ec29a7eb5b1697.png")
        #expect(store.path(of: target("/photos/me.png"), flavor: .xLarge).hasPrefix("/c/x-large/"))
    }

    @Test func crcAndTextChunksRoundTrip() throws {
        #expect(CRC32.of(Array("IEND".utf8)) == 0xAE42_6082)
        let stamped = try PNGText.adding([("Thumb::URI", "file:///a"), ("Thumb::MTime", "5"), ("Note", "replaced")], to: png)
        let texts = try PNGText.texts(in: stamped)
        #expect(texts["Thumb::URI"] == "file:///a")
        #expect(texts["Thumb::MTime"] == "5")
        #expect(texts["Note"] == "replaced", "an earlier chunk with the same keyword is left out")
        #expect(throws: PNGText.Problem.notPNG) { try PNGText.adding([], to: Array("GIF89a".utf8)) }
        #expect(throws: PNGText.Problem.notPNG) { try PNGText.texts(in: Array("GIF89a".utf8)) }
        // A file's head: the walk ends where a chunk runs past it, keeping the texts before.
        #expect(try PNGText.texts(in: Array(png.prefix(20))) == [:])
        #expect(try PNGText.texts(in: Array(stamped.prefix(stamped.count - 20)))["Thumb::URI"] == "file:///a")
    }

    @Test func anEntryWhoseImageDataComesInOneLargeChunkIsStillCurrent() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Many encoders write one 32 or 64 KiB IDAT chunk, more than the 16 KiB head that is read.
        var large = Array(png.prefix(33))   // signature and IHDR
        var idat = Array("IDAT".utf8) + [UInt8](repeating: 7, count: 40_000)
        large += [0, 0, 0x9C, 0x40] + idat
        let crc = CRC32.of(idat)
        large += [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
        idat = Array("IEND".utf8)
        large += [0, 0, 0, 0] + idat + [0xAE, 0x42, 0x60, 0x82]
        let store = FreedesktopThumbnailStore(directory: directory + "/thumbnails", mountPoint: "/mnt")
        let photo = target("/big.jpg")
        try store.save(large, flavor: .normal, for: photo)
        #expect(store.hasCurrent(photo, flavors: [.normal]))
    }

    @Test func entriesAreWrittenUnderEveryURIAFileManagerMayUse() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = FreedesktopThumbnailStore(directory: directory + "/thumbnails", mountPoint: "/srv/dropbox",
                                              alsoReachedAs: ["/home/jens/Dropbox", "/srv/dropbox/"])
        let photo = target("/a [1];b.jpg")
        #expect(store.uris(of: photo) == [
            "file:///srv/dropbox/a%20%5B1%5D%3Bb.jpg", "file:///srv/dropbox/a%20[1];b.jpg",   // GLib's, then Qt's (Dolphin)
            "file:///home/jens/Dropbox/a%20%5B1%5D%3Bb.jpg", "file:///home/jens/Dropbox/a%20[1];b.jpg",
        ])
        #expect(store.uris(of: target("/plain.jpg")).count == 2, "one URI per path where both escape alike")
        try store.save(png, flavor: .normal, for: photo)
        for uri in store.uris(of: photo) {
            let path = store.path(ofURI: uri, in: "normal")
            let texts = try PNGText.texts(in: Array(try Data(contentsOf: URL(fileURLWithPath: path))))
            #expect(texts["Thumb::URI"] == uri)
        }
        #expect(store.hasCurrent(photo, flavors: [.normal]) && store.isPresent(photo, flavors: [.normal]))
        unlink(store.path(ofURI: store.uris(of: photo)[3], in: "normal"))
        #expect(!store.hasCurrent(photo, flavors: [.normal]) && !store.isPresent(photo, flavors: [.normal]))
        #expect(FreedesktopThumbnailStore.absolute("../b/./c//d/", in: "/home/jens/a") == "/home/jens/b/c/d")
        #expect(FreedesktopThumbnailStore.absolute("/x/../y", in: "/ignored") == "/y")
    }

    @Test func anOutOfDateXXLargeEntryIsRemovedSoItCannotHideTheFreshOnes() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = FreedesktopThumbnailStore(directory: directory + "/thumbnails", mountPoint: "/mnt")
        let old = target("/p.jpg", modified: 1_600_000_000), photo = target("/p.jpg")
        // What a file manager made itself at its largest zoom, of an earlier version of the file.
        try FileManager.default.createDirectory(atPath: directory + "/thumbnails/xx-large", withIntermediateDirectories: true)
        let larger = store.path(ofURI: store.uri(of: photo), in: "xx-large")
        FileManager.default.createFile(atPath: larger, contents: Data(try PNGText.adding([
            ("Thumb::URI", store.uri(of: old)), ("Thumb::MTime", String(old.modified)),
            ("Thumb::Size", String(old.size)), ("Thumb::Mimetype", old.mimeType)], to: png)))
        for flavor in ThumbnailFlavor.allCases where flavor != .xLarge { try store.save(png, flavor: flavor, for: photo) }
        #expect(!store.hasCurrent(photo, flavors: ThumbnailFlavor.allCases), "the stale larger entry counts against")
        try store.save(png, flavor: .xLarge, for: photo)
        #expect(!FileManager.default.fileExists(atPath: larger))
        #expect(store.hasCurrent(photo, flavors: ThumbnailFlavor.allCases))
        // A current one is the file manager's own, and stays.
        FileManager.default.createFile(atPath: larger, contents: Data(try PNGText.adding([
            ("Thumb::URI", store.uri(of: photo)), ("Thumb::MTime", String(photo.modified)),
            ("Thumb::Size", String(photo.size)), ("Thumb::Mimetype", photo.mimeType)], to: png)))
        try store.save(png, flavor: .xLarge, for: photo)
        #expect(FileManager.default.fileExists(atPath: larger))
    }

    @Test func savedEntriesCarryWhatGIOAndTumblerCheck() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = FreedesktopThumbnailStore(directory: directory + "/thumbnails", mountPoint: "/mnt/dropbox/")
        let photo = target("/2024/Beach day.jpg")
        #expect(!store.hasCurrent(photo, flavors: [.normal]))
        try store.save(png, flavor: .normal, for: photo)
        let path = store.path(of: photo, flavor: .normal)
        let texts = try PNGText.texts(in: Array(try Data(contentsOf: URL(fileURLWithPath: path))))
        #expect(texts["Thumb::URI"] == "file:///mnt/dropbox/2024/Beach%20day.jpg")
        #expect(texts["Thumb::MTime"] == "1700000123")
        #expect(texts["Thumb::Size"] == "4242")
        #expect(texts["Thumb::Mimetype"] == "image/jpeg")
        #expect(store.hasCurrent(photo, flavors: [.normal]))
        #expect(!store.hasCurrent(photo, flavors: [.normal, .large]), "every flavor must be there")
        #expect(!store.hasCurrent(target("/2024/Beach day.jpg", modified: 1_700_000_124), flavors: [.normal]),
                "a new mtime makes it stale")

        var st = stat()
        #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(stat(directory + "/thumbnails/normal", &st) == 0 && st.st_mode & 0o777 == 0o700)
        #expect(stat(directory + "/thumbnails", &st) == 0 && st.st_mode & 0o777 == 0o700)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory + "/thumbnails/normal")
        #expect(leftovers == [(path as NSString).lastPathComponent], "no temporary file is left behind")
    }

    @Test(.enabled(if: geteuid() == 0, "root writes for another user"))
    func rootWritesAnotherUsersEntriesAsThatUser() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let nobody: (uid: uid_t, gid: gid_t) = (65534, 65534)
        let home = directory + "/home"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        chmod(directory, 0o755)
        chown(home, nobody.uid, nobody.gid)
        let store = FreedesktopThumbnailStore(directory: home + "/.cache/thumbnails", mountPoint: "/mnt", owner: nobody)
        try store.save(png, flavor: .normal, for: target("/a.jpg"))
        var st = stat()
        for path in [home + "/.cache", home + "/.cache/thumbnails/normal", store.path(of: target("/a.jpg"), flavor: .normal)] {
            #expect(stat(path, &st) == 0 && st.st_uid == nobody.uid && st.st_gid == nobody.gid, "\(path)")
        }
        // A size folder the user pointed at a folder only root may write: the write is the user's, and fails.
        let rootsOnly = directory + "/roots-only"
        try FileManager.default.createDirectory(atPath: rootsOnly, withIntermediateDirectories: true)
        chmod(rootsOnly, 0o755)
        #expect(symlink(rootsOnly, home + "/.cache/thumbnails/large") == 0)
        #expect(throws: ThumbnailStoreError.self) { try store.save(png, flavor: .large, for: target("/a.jpg")) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: rootsOnly).isEmpty, "nothing written through the link")
        #expect(geteuid() == 0 && getegid() == 0)
    }

    @Test func anUnwritableDirectoryIsReportedAsSuch() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A file where the cache's directory should be: no user, root included, can create under it.
        FileManager.default.createFile(atPath: directory + "/thumbnails", contents: Data())
        let store = FreedesktopThumbnailStore(directory: directory + "/thumbnails", mountPoint: "/mnt")
        #expect {
            try store.save(png, flavor: .normal, for: target("/a.jpg"))
        } throws: { error in
            if case .unwritable = error as? ThumbnailStoreError { return true }
            return false
        }
        #expect(throws: ThumbnailStoreError.self) { try store.save(Array("not a png".utf8), flavor: .normal, for: target("/a.jpg")) }
    }
}
