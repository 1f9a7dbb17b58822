import Foundation
import Testing

@Suite struct ChangeTests {
    func latestCursor(_ f: Fixture, _ path: String = "", recursive: Bool = true) -> String {
        f.rpc("files/list_folder/get_latest_cursor", #"{"path":"\#(path)","recursive":\#(recursive)}"#).json["cursor"] as! String
    }

    @Test func addModifyDeleteAppearInContinue() throws {
        try withFixture(files: ["keep.txt": "k", "mod.txt": "1", "del.txt": "d", "Dir/inner.txt": "i"]) { f in
            let cursor = latestCursor(f)
            let quiet = f.cont(cursor)
            #expect((quiet.json["entries"] as! [Any]).isEmpty)
            #expect(quiet.json["has_more"] as? Bool == false)
            try f.write("New/deep/file.txt", "new")
            try f.write("mod.txt", "changed")
            try FileManager.default.removeItem(atPath: f.dir + "/del.txt")
            try FileManager.default.removeItem(atPath: f.dir + "/Dir")
            let r = f.cont(cursor)
            #expect(r.status == 200)
            let entries = r.json["entries"] as! [[String: Any]]
            let byPath = Dictionary(entries.map { ($0["path_display"] as! String, $0[".tag"] as! String) }, uniquingKeysWith: { $1 })
            #expect(byPath["/New"] == "folder")
            #expect(byPath["/New/deep"] == "folder")
            #expect(byPath["/New/deep/file.txt"] == "file")
            #expect(byPath["/mod.txt"] == "file")
            #expect(byPath["/del.txt"] == "deleted")
            #expect(byPath["/Dir"] == "deleted")
            #expect(byPath["/keep.txt"] == nil)
            let order = entries.map { $0["path_display"] as! String }
            #expect(order.firstIndex(of: "/New")! < order.firstIndex(of: "/New/deep/file.txt")!)
            // The returned cursor carries on from here.
            let next = f.cont(r.json["cursor"] as! String)
            #expect((next.json["entries"] as! [Any]).isEmpty)
            // And the original cursor still works.
            #expect(f.cont(cursor).status == 200)
        }
    }

    @Test func scopeOfNonRecursiveCursor() throws {
        try withFixture(files: ["A/x": "x"]) { f in
            let cursor = latestCursor(f, "/A", recursive: false)
            try f.write("A/B/deep.txt", "d")
            try f.write("outside.txt", "o")
            let entries = f.cont(cursor).json["entries"] as! [[String: Any]]
            #expect(entries.map { $0["path_lower"] as! String } == ["/a/b"])
        }
    }

    @Test func changesDuringPagingArePickedUp() throws {
        var files: [String: String] = [:]
        for i in 0..<10 { files["f\(i)"] = "x" }
        try withFixture(files: files) { f in
            let first = f.rpc("files/list_folder", #"{"path":"","limit":3}"#)
            try f.write("zz-new", "n")
            var r = first
            var seen = Set<String>()
            while true {
                for e in r.json["entries"] as! [[String: Any]] { seen.insert(e["name"] as! String) }
                if r.json["has_more"] as? Bool != true { break }
                r = f.cont(r.json["cursor"] as! String)
            }
            r = f.cont(r.json["cursor"] as! String)
            for e in r.json["entries"] as! [[String: Any]] { seen.insert(e["name"] as! String) }
            #expect(seen.contains("zz-new"))
            #expect(seen.count == 11)
        }
    }

    @Test func listedFolderDeletedAnswersPathError() throws {
        try withFixture(files: ["A/x": "x"]) { f in
            let cursor = latestCursor(f, "/A")
            try FileManager.default.removeItem(atPath: f.dir + "/A")
            #expect(errorTags(f.cont(cursor)) == ["path", "not_found"])
        }
    }

    @Test func aFolderMovedAwayAndMadeAgainIsReportedDeletedFirst() throws {
        try withFixture(files: ["a/sub/deep.txt": "d", "a/top.txt": "t"]) { f in
            let cursor = latestCursor(f)
            let away = NSTemporaryDirectory() + "/moved-away-\(UUID().uuidString)"
            try FileManager.default.moveItem(atPath: f.dir + "/a", toPath: away)
            defer { try? FileManager.default.removeItem(atPath: away) }
            try FileManager.default.createDirectory(atPath: f.dir + "/a", withIntermediateDirectories: false)
            Thread.sleep(forTimeInterval: 0.3)
            let entries = f.cont(cursor).json["entries"] as! [[String: Any]]
            let forA = entries.filter { $0["path_lower"] as? String == "/a" }.map { $0[".tag"] as! String }
            #expect(forA == ["deleted", "folder"], "a folder entry alone would keep the old folder's children")
        }
    }

    @Test func theListedFolderItselfMovedAwayWakesItsLongpollAndItsContinueSaysNotFound() throws {
        try withFixture(files: ["A/x": "x", "f": "f"]) { f in
            let cursor = latestCursor(f, "/A")
            let away = NSTemporaryDirectory() + "/moved-away-\(UUID().uuidString)"
            try FileManager.default.moveItem(atPath: f.dir + "/A", toPath: away)
            defer { try? FileManager.default.removeItem(atPath: away) }
            Thread.sleep(forTimeInterval: 0.3)
            #expect(longpoll(f, cursor).json["changes"] as? Bool == true)
            #expect(errorTags(f.cont(cursor)) == ["path", "not_found"])
            try FileManager.default.moveItem(atPath: f.dir + "/f", toPath: f.dir + "/A")
            Thread.sleep(forTimeInterval: 0.3)
            #expect(errorTags(f.cont(cursor)) == ["path", "not_folder"])
        }
    }

    @Test func aFileOrFolderMovedOrRenamedKeepsItsID() throws {
        // Dropbox keeps an entry's id through a move or rename, as a disk keeps an inode.
        try withFixture(files: ["a.txt": "a", "Dir/inner.txt": "i"]) { f in
            func id(_ path: String) -> String? {
                f.rpc("files/get_metadata", #"{"path":"\#(path)"}"#).json["id"] as? String
            }
            let (file, folder, inner) = (id("/a.txt"), id("/Dir"), id("/Dir/inner.txt"))
            #expect(file != nil && folder != nil && inner != nil)
            let cursor = latestCursor(f)
            try FileManager.default.moveItem(atPath: f.dir + "/a.txt", toPath: f.dir + "/Dir/renamed.txt")
            try FileManager.default.moveItem(atPath: f.dir + "/Dir", toPath: f.dir + "/Moved")
            #expect(id("/Moved/renamed.txt") == file)
            #expect(id("/Moved") == folder)
            #expect(id("/Moved/inner.txt") == inner)
            // The feed says so too: the entries at the new paths carry the old ids.
            let entries = f.cont(cursor).json["entries"] as! [[String: Any]]
            let ids = Dictionary(entries.compactMap { e in (e["id"] as? String).map { (e["path_lower"] as! String, $0) } },
                                 uniquingKeysWith: { $1 })
            #expect(ids["/moved/renamed.txt"] == file && ids["/moved"] == folder)
        }
    }

    @Test func expiredCursorsAnswerReset() throws {
        try withFixture(files: ["a": "a"]) { f in
            let cursor = latestCursor(f)
            let admin = f.curl("/__admin/expire_cursors", ["-X", "POST"])
            #expect(admin.status == 200)
            let r = f.cont(cursor)
            #expect(r.status == 409)
            #expect(errorTags(r) == ["reset"])
            #expect(r.text.hasPrefix(#"{"error_summary":"reset/"#))
            let poll = f.curl("/2/files/list_folder/longpoll", ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", #"{"cursor":"\#(cursor)"}"#])
            #expect(errorTags(poll) == ["reset"])
            #expect(f.cont("garbage").status == 400)
        }
    }

    func longpoll(_ f: Fixture, _ cursor: String, auth: Bool = false) -> HTTPResult {
        var args = ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", #"{"cursor":"\#(cursor)","timeout":30}"#]
        if auth { args += ["-H", "Authorization: Bearer emulator-token"] }
        return f.curl("/2/files/list_folder/longpoll", args, timeout: 40)
    }

    /// How soon is the benchmark runner's to show (its change-seen row); the bound here is far below
    /// the 30 s the longpoll would wait for nothing, and far above a loaded machine's scheduling.
    @Test func longpollWakesOnAChangeLongBeforeItsTimeout() throws {
        try withFixture(files: ["a": "a"]) { f in
            let cursor = latestCursor(f)
            // curl runs as a child process, so the measurement does not depend on how busy the
            // test runner's own threads are.
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            p.arguments = ["-s", "--noproxy", "*", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "Content-Type: application/json",
                           "--data-binary", #"{"cursor":"\#(cursor)","timeout":30}"#, f.url + "/2/files/list_folder/longpoll"]
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            Thread.sleep(forTimeInterval: 0.5)
            #expect(p.isRunning)  // still waiting: nothing changed yet
            let clock = ContinuousClock()
            let start = clock.now
            try f.write("b", "b")
            p.waitUntilExit()
            let elapsed = clock.now - start
            #expect(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "200")
            #expect(elapsed < .seconds(10))
        }
    }

    @Test func longpollTimesOutWithBackoff() throws {
        try withFixture(files: ["a": "a"], { $0.longpollMaxWait = 1; $0.longpollBackoff = 5 }) { f in
            let r = longpoll(f, latestCursor(f))
            #expect(r.text == #"{"changes":false,"backoff":5}"#)
            #expect(longpoll(f, latestCursor(f), auth: true).status == 400)
            #expect(f.curl("/2/files/list_folder/longpoll", ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", #"{"cursor":"\#(latestCursor(f))","timeout":10}"#]).status == 400)
        }
    }

    @Test func longpollAnswersAtOnceWhenChangesArePending() throws {
        try withFixture(files: ["a": "a"]) { f in
            let cursor = latestCursor(f)
            try f.write("c", "c")
            #expect(longpoll(f, cursor).json["changes"] as? Bool == true)
        }
    }
}
