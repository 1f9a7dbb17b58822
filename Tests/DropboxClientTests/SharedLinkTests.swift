// Shared links through the HTTP client and the `SharedLinkDropbox` adapter, against the emulator:
// what a link is, its folders listed page by page, files read by rev with Range (or from a server
// that ignores Range), a file that changed since it was listed, and each refusal.

@testable import DropboxClient
import DropboxEmulator
import Foundation
import Synchronization
import Testing

/// Records the routes a meter saw.
final class RouteRecorder: APICallObserver, Sendable {
    let routes = Mutex<[String]>([])
    func callEnded(route: String, seconds: Double, failed: Bool) { routes.withLock { $0.append(route) } }
}

@Suite("Shared links against the emulator")
struct SharedLinkTests {
    static let big = randomBytes(3 << 20, seed: 7)

    func fixture(_ configure: (inout EmulatorConfiguration) -> Void = { _ in }) throws -> EmulatorFixture {
        var files: [String: [UInt8]] = ["Pub/Sub/big.bin": Self.big, "Pub/b.txt": Array("bee\n".utf8), "other.txt": [1]]
        for i in 0..<25 { files["Pub/many/f\(i).txt"] = Array("\(i)\n".utf8) }
        return try EmulatorFixture(files: files, configure)
    }

    /// Every entry of one folder of the link, through the adapter, following `continue`.
    func listAll(_ api: SharedLinkDropbox, _ path: String, limit: Int? = nil) throws(DropboxError) -> [Metadata] {
        var page = try api.listFolder(path: path, recursive: false, limit: limit)
        var entries = page.entries
        while page.hasMore {
            page = try api.listFolderContinue(cursor: page.cursor)
            entries += page.entries
        }
        return entries
    }

    @Test func aFolderLinkIsListedAndReadLikeAnAccount() throws {
        let f = try fixture()
        let link = SharedLink(url: try f.server.publishSharedLink(path: "/Pub"))
        let target = try f.client.sharedLinkMetadata(link)
        #expect(target == .folder(name: "Pub", id: (try? f.client.metadata(path: "/Pub")).flatMap {
            if case .folder(let folder) = $0 { folder.id } else { nil }
        }))
        let api = SharedLinkDropbox(client: f.client, link: link, target: target)
        #expect(Set(try listAll(api, "").map(\.name)) == ["Sub", "b.txt", "many"])
        let many = try listAll(api, "/many", limit: 4)
        #expect(many.count == 25 && many.allSatisfy { $0.pathLower == nil })
        // Files of a paged listing are read by rev: the adapter knows where each was listed.
        guard case .file(let last)? = many.first(where: { $0.name == "f24.txt" }) else { Issue.record("no f24.txt"); return }
        #expect(try api.download(path: "rev:" + last.rev, range: 0..<10) == Array("24\n".utf8))
        guard case .file(let big)? = try listAll(api, "/Sub").first else { Issue.record("no big.bin"); return }
        #expect(try api.download(path: "rev:" + big.rev, range: 1000..<300_000) == Array(Self.big[1000..<300_000]))
        #expect(thrown { () throws(DropboxError) in try api.listFolder(path: "", recursive: true, limit: nil) } != nil,
                "a link is never listed recursively")
        #expect(try api.spaceUsage().allocated == 0)
    }

    @Test func metricsNameTheRoutesThatAnsweredThroughALink() throws {
        let f = try fixture()
        let link = SharedLink(url: try f.server.publishSharedLink(path: "/Pub"))
        let recorder = RouteRecorder()
        let api = MeteredDropboxAPI(SharedLinkDropbox(client: f.client, link: link, target: .folder(name: "Pub", id: nil)),
                                    meter: APIMeter(observer: recorder))
        guard case .file(let file)? = try api.listFolder(path: "", recursive: false, limit: nil).entries
            .first(where: { $0.name == "b.txt" }) else { Issue.record("no b.txt"); return }
        _ = try api.download(path: "rev:" + file.rev, range: 0..<2)
        #expect(recorder.routes.withLock { $0 } == ["files/list_folder", "sharing/get_shared_link_file"])
    }

    @Test func aFileThatChangedSinceItWasListedIsNotFoundNeverMixed() throws {
        let f = try fixture()
        let api = SharedLinkDropbox(client: f.client, link: SharedLink(url: try f.server.publishSharedLink(path: "/Pub")),
                                    target: .folder(name: "Pub", id: nil))
        guard case .file(let old)? = try listAll(api, "").first(where: { $0.name == "b.txt" }) else { Issue.record("no b.txt"); return }
        try f.write("Pub/b.txt", Array("changed\n".utf8))
        Thread.sleep(forTimeInterval: 0.3)   // the emulator's watcher
        let error = thrown { () throws(DropboxError) in try api.download(path: "rev:" + old.rev, range: 0..<8) }
        #expect(error?.isRoute("path", "not_found") == true, "\(String(describing: error))")
        guard case .file(let new)? = try listAll(api, "").first(where: { $0.name == "b.txt" }) else { Issue.record("no b.txt"); return }
        #expect(try api.download(path: "rev:" + new.rev, range: 0..<8) == Array("changed\n".utf8))
    }

    @Test func aFileRewrittenManyTimesIsRememberedAtItsLatestRevOnly() throws {
        let f = try fixture()
        let api = SharedLinkDropbox(client: f.client, link: SharedLink(url: try f.server.publishSharedLink(path: "/Pub")),
                                    target: .folder(name: "Pub", id: nil))
        var revs: [String] = []
        for round in 0..<6 {
            if round > 0 {
                try f.write("Pub/b.txt", Array("round \(round)\n".utf8))
                Thread.sleep(forTimeInterval: 0.3)   // the emulator's watcher
            }
            guard case .file(let file)? = try listAll(api, "").first(where: { $0.name == "b.txt" }) else {
                Issue.record("no b.txt"); return
            }
            revs.append(file.rev)
            _ = try api.metadata(path: "/b.txt")
        }
        #expect(Set(revs).count == 6, "each write is a new rev")
        #expect(api.rememberedRevs == 1, "the root's one file, at its latest rev")
        #expect(try api.download(path: "rev:" + revs[5], range: 0..<8) == Array("round 5\n".utf8))
        let stale = thrown { () throws(DropboxError) in try api.download(path: "rev:" + revs[2], range: 0..<8) }
        #expect(stale?.isRoute("path", "not_found") == true, "\(String(describing: stale))")
        // A paged folder's files are remembered once each however often it is listed.
        for _ in 0..<3 { _ = try listAll(api, "/many", limit: 4) }
        #expect(api.rememberedRevs == 26)
    }

    @Test func listingsLeftUnfinishedKeepABoundedNumberOfCursors() throws {
        let f = try fixture()
        let api = SharedLinkDropbox(client: f.client, link: SharedLink(url: try f.server.publishSharedLink(path: "/Pub")),
                                    target: .folder(name: "Pub", id: nil), unfinishedListingLimit: 3)
        // Listings of five paged folders that stop after their first page, as a failed one does.
        for folder in 0..<5 {
            for i in 0..<3 { try f.write("Pub/paged/d\(folder)/f\(i).txt", [UInt8(i)]) }
        }
        Thread.sleep(forTimeInterval: 0.3)   // the emulator's watcher
        var cursors: [String] = []
        for folder in 0..<5 {
            let page = try api.listFolder(path: "/paged/d\(folder)", recursive: false, limit: 1)
            #expect(page.hasMore)
            cursors.append(page.cursor)
        }
        #expect(api.rememberedCursors == 3, "the two oldest are dropped")
        // The newest still continues with its folder known: the files of its next page are read.
        let next = try api.listFolderContinue(cursor: cursors[4])
        guard case .file(let file)? = next.entries.first else { Issue.record("no file on the second page"); return }
        #expect(try api.download(path: "rev:" + file.rev, range: 0..<1).count == 1)
        #expect(api.rememberedCursors == 3, "the continued one gave way to its successor")
        // A listing followed to its end, even past the limit, has every file it listed read, and
        // on its own leaves no cursor behind.
        let all = try listAll(api, "/many", limit: 4)
        #expect(all.count == 25 && api.rememberedCursors <= 3)
        guard case .file(let last)? = all.first(where: { $0.name == "f24.txt" }) else { Issue.record("no f24.txt"); return }
        #expect(try api.download(path: "rev:" + last.rev, range: 0..<10) == Array("24\n".utf8))
        let fresh = SharedLinkDropbox(client: f.client, link: api.link, target: .folder(name: "Pub", id: nil))
        #expect(try listAll(fresh, "/many", limit: 4).count == 25 && fresh.rememberedCursors == 0)
    }

    @Test func aFileLinkIsAFolderOfOneFileAndAPasswordIsNeeded() throws {
        let f = try fixture()
        let url = try f.server.publishSharedLink(path: "/Pub/Sub/big.bin", password: "pw")
        let refused = thrown { () throws(DropboxError) in try f.client.sharedLinkMetadata(SharedLink(url: url)) }
        #expect(refused?.isRoute("shared_link_access_denied") == true)
        let wrong = thrown { () throws(DropboxError) in try f.client.sharedLinkMetadata(SharedLink(url: url, password: "no")) }
        #expect(wrong?.isRoute("shared_link_access_denied") == true)
        let link = SharedLink(url: url, password: "pw")
        let target = try f.client.sharedLinkMetadata(link)
        guard case .file(let file) = target else { Issue.record("\(target)"); return }
        #expect(file.name == "big.bin" && file.size == UInt64(Self.big.count))
        let api = SharedLinkDropbox(client: f.client, link: link, target: target)
        let entries = try listAll(api, "")
        #expect(entries.map(\.name) == ["big.bin"])
        #expect(try api.download(path: "rev:" + file.rev, range: 5..<70_000) == Array(Self.big[5..<70_000]))
        #expect(thrown { () throws(DropboxError) in try api.download(path: "rev:0123456789", range: 0..<1) }?.isRoute("path", "not_found") == true)
    }

    @Test func aServerThatIgnoresRangeIsCutToTheRangeWithoutBufferingTheFile() throws {
        let f = try fixture { $0.sharedLinkRange = false }
        let link = SharedLink(url: try f.server.publishSharedLink(path: "/Pub/Sub/big.bin"))
        let target = try f.client.sharedLinkMetadata(link)
        guard case .file(let file) = target else { Issue.record("\(target)"); return }
        let api = SharedLinkDropbox(client: f.client, link: link, target: target)
        _ = try listAll(api, "")
        var chunks = 0
        var bytes: [UInt8] = []
        let got = try api.download(path: "rev:" + file.rev, range: (2 << 20)..<((2 << 20) + 12345)) { chunk in
            chunks += 1
            bytes += chunk
            return true
        }
        #expect(got == 12345 && bytes == Array(Self.big[(2 << 20)..<((2 << 20) + 12345)]))
        #expect(try api.download(path: "rev:" + file.rev, range: UInt64(Self.big.count - 10)..<UInt64(Self.big.count + 100))
                == Array(Self.big[(Self.big.count - 10)...]), "short at end of file")
    }

    @Test func unknownExpiredAndMalformedLinks() throws {
        let f = try fixture()
        let url = try f.server.publishSharedLink(path: "/Pub")
        let unknown = thrown { () throws(DropboxError) in
            try f.client.sharedLinkMetadata(SharedLink(url: url.replacingOccurrences(of: "rlkey=", with: "rlkey=x")))
        }
        #expect(unknown?.isRoute("shared_link_not_found") == true)
        let expired = try f.server.publishSharedLink(path: "/other.txt", expires: Int(Date().timeIntervalSince1970) - 60)
        #expect(thrown { () throws(DropboxError) in try f.client.sharedLinkMetadata(SharedLink(url: expired)) }?
            .isRoute("shared_link_not_found") == true)
        let directory = thrown { () throws(DropboxError) in
            try f.client.downloadFromLink(SharedLink(url: url), path: nil, range: 0..<1) { _ in true }
        }
        #expect(directory?.isRoute("shared_link_is_directory") == true)
        #expect(SharedLink.problem(with: url) == nil)
        #expect(SharedLink.problem(with: "https://www.dropbox.com") != nil)
        #expect(SharedLink.problem(with: "https://www.dropbox.com/s/a b") != nil)
        #expect(SharedLink.problem(with: "https:///scl/fo/x") != nil)
        #expect(SharedLink.problem(with: "ftp://www.dropbox.com/x") != nil)
        #expect(SharedLink(url: url).redactedURL.hasSuffix("?...") && !SharedLink(url: url).redactedURL.contains("rlkey"))
    }
}
