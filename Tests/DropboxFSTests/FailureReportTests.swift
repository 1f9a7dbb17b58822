// A failed operation is logged once, where it leaves the core, with its operation and path; the
// code that throws only says what went wrong. Ordinary answers (no such name) are not news.

import DropboxClient
@testable import DropboxFS
import Logging
import TestSupport
import Testing

@Suite("Failure boundary")
struct FailureReportTests {
    let dropbox = FakeDropbox()
    let clock = ManualClock()
    let recorder = LogRecorder()

    func makeFS(ttl: Int = 60, level: Logger.Level = .trace) -> DropboxFilesystem {
        DropboxFilesystem(api: dropbox, options: FilesystemOptions(rootPath: "", metadataTTL: .seconds(ttl)),
                          folderModified: 0, now: clock.now, logger: recorder.logger(level: level))
    }

    @Test func aRevDropboxNoLongerHasIsOneInfoLineWithItsPath() throws {
        dropbox.addFolder("/Docs")
        dropbox.addFile("/Docs/report.txt", Array("version one".utf8))
        let fs = makeFS(ttl: 60)
        let docs = try fs.lookup(parent: .root, name: "Docs").inode
        let file = try fs.lookup(parent: docs, name: "report.txt").inode
        let handle = try fs.open(file).handle
        dropbox.addFile("/Docs/report.txt", Array("version two!".utf8))
        dropbox.forgetFormerRevisions()   // the handle's rev, before it read a byte
        #expect(throws: FSError.changedSinceOpen) { try fs.read(handle, offset: 0, size: 4096) }

        let failures = recorder.at(.info).filter { $0.message == "operation failed" }
        #expect(failures.count == 1, "\(failures)")
        #expect(failures.first?.level == .info)
        #expect(failures.first?.metadata["op"] == "read")
        #expect(failures.first?.metadata["path"] == "/Docs/report.txt")
        #expect(failures.first?.metadata["error"] == "the version it was opened at is no longer on Dropbox")
    }

    @Test func aFailedReadOfAFileDropboxReplacedWhileOpenNamesWhereTheFileWas() throws {
        // The change feed replaces the open file's node (a new rev is a new node), so the tree no
        // longer leads to the handle's: the line still says which file it was.
        dropbox.addFolder("/Docs")
        dropbox.addFile("/Docs/report.txt", Array("version one".utf8))
        let fs = makeFS(level: .info)
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })
        let docs = try fs.lookup(parent: .root, name: "Docs").inode
        let file = try fs.lookup(parent: docs, name: "report.txt").inode
        let handle = try fs.open(file).handle
        defer { fs.release(handle) }
        dropbox.addFile("/Docs/report.txt", Array("version two!".utf8))
        #expect(eventually { (try? fs.lookup(parent: docs, name: "report.txt").inode) != file })
        dropbox.forgetFormerRevisions()   // the handle's rev, before it read a byte
        #expect(throws: FSError.changedSinceOpen) { try fs.read(handle, offset: 0, size: 4096) }

        let failures = recorder.at(.info).filter { $0.message == "operation failed" }
        #expect(failures.count == 1, "\(failures)")
        #expect(failures.first?.metadata["path"] == "/Docs/report.txt")
    }

    @Test func aDropboxFailureIsLoggedAtDebugOnlyWithTheOperationsContext() throws {
        dropbox.addFolder("/Docs")
        let fs = makeFS()
        let docs = try fs.lookup(parent: .root, name: "Docs").inode
        dropbox.fail(with: .transport(code: 7, message: "connection refused"))
        #expect(throws: FSError.upstream(.transport(code: 7, message: "connection refused"))) {
            try fs.openDirectory(docs)
        }
        // The Dropbox client logs the failed call itself at warning; the core adds one debug line.
        #expect(recorder.at(.info).isEmpty)
        let failures = recorder.at(.debug).filter { $0.message == "operation failed" }
        #expect(failures.count == 1)
        #expect(failures.first?.metadata["op"] == "opendir")
        #expect(failures.first?.metadata["path"] == "/Docs")
    }

    @Test func aMissingNameIsTracedNotLogged() throws {
        dropbox.addFolder("/Docs")
        let fs = makeFS()
        #expect(throws: FSError.notFound) { try fs.lookup(parent: .root, name: "nope.txt") }
        #expect(recorder.at(.debug).isEmpty)
        let traced = recorder.at(.trace).filter { $0.message == "operation failed" }
        #expect(traced.count == 1)
        #expect(traced.first?.metadata["path"] == "/nope.txt")
    }

    @Test func nothingIsBuiltForLinesBelowTheLogLevel() throws {
        let fs = makeFS(level: .notice)
        #expect(throws: FSError.notFound) { try fs.lookup(parent: .root, name: "nope.txt") }
        #expect(throws: FSError.badHandle) { try fs.read(FileHandleID(999), offset: 0, size: 1) }
        #expect(recorder.at(.trace).count == 1, "only the unknown handle, at warning")
        #expect(recorder.at(.warning).first?.metadata["op"] == "read")
    }
}
