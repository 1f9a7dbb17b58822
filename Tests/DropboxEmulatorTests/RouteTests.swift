import Foundation
import Testing

func isTimestamp(_ s: String) -> Bool { s.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z/) != nil }
func isRev(_ s: String) -> Bool { s.wholeMatch(of: /[0-9a-f]{9,}/) != nil }

@Suite struct ListFolderTests {
    static let files = ["Docs/a.txt": "hello", "Docs/Sub/b.txt": "b", "Top.txt": "top", "Notes.paper": "# paper"]

    @Test func recursiveListingShapesAndOrder() throws {
        try withFixture(files: Self.files) { f in
            let r = f.rpc("files/list_folder", #"{"path":"","recursive":true}"#)
            #expect(r.status == 200)
            #expect(r.header("Content-Type") == "application/json")
            #expect(r.header("X-Dropbox-Request-Id") != nil)
            #expect(r.header("Date") != nil)
            let entries = r.json["entries"] as! [[String: Any]]
            let paths = entries.map { $0["path_display"] as! String }
            #expect(paths == ["/Docs", "/Docs/a.txt", "/Docs/Sub", "/Docs/Sub/b.txt", "/Notes.paper", "/Top.txt"])
            let folder = entries[0]
            #expect(folder[".tag"] as? String == "folder")
            #expect(Set(folder.keys) == [".tag", "name", "id", "path_lower", "path_display"])
            let file = entries[1]
            #expect(file[".tag"] as? String == "file")
            #expect(file["name"] as? String == "a.txt")
            #expect(file["path_lower"] as? String == "/docs/a.txt")
            #expect((file["id"] as! String).hasPrefix("id:"))
            #expect(isTimestamp(file["client_modified"] as! String))
            #expect(isTimestamp(file["server_modified"] as! String))
            #expect(isRev(file["rev"] as! String))
            #expect(file["size"] as? Int == 5)
            #expect(file["is_downloadable"] as? Bool == true)
            #expect((file["content_hash"] as! String).count == 64)
            let paper = entries[4]
            #expect(paper["is_downloadable"] as? Bool == false)
            #expect((paper["export_info"] as? [String: Any])?["export_as"] as? String == "html")
        }
    }

    @Test func aRecursiveListingOfAFolderStartsWithTheFolder() throws {
        try withFixture(files: Self.files) { f in
            let docs = f.listAll(#"{"path":"/docs","recursive":true,"limit":2}"#).entries
            #expect(docs.first?["path_display"] as? String == "/Docs")
            #expect(docs.first?[".tag"] as? String == "folder")
            #expect(docs.filter { $0["path_lower"] as? String == "/docs" }.count == 1, "once, on the first page only")
            let plain = f.rpc("files/list_folder", #"{"path":"/Docs"}"#).json["entries"] as! [[String: Any]]
            #expect(!plain.contains { $0["path_lower"] as? String == "/docs" })
            let root = f.rpc("files/list_folder", #"{"path":"","recursive":true}"#).json["entries"] as! [[String: Any]]
            #expect(root.first?["path_display"] as? String == "/Docs", "the root has no entry of its own")
        }
    }

    @Test func nonRecursiveAndFlags() throws {
        try withFixture(files: Self.files) { f in
            let top = f.rpc("files/list_folder", #"{"path":"","recursive":false,"include_deleted":false,"include_non_downloadable_files":false,"include_mounted_folders":false,"include_media_info":false,"include_has_explicit_shared_members":false}"#)
            #expect(top.status == 200)
            #expect((top.json["entries"] as! [[String: Any]]).map { $0["name"] as! String } == ["Docs", "Top.txt"])
            let sub = f.rpc("files/list_folder", #"{"path":"/DOCS"}"#)
            #expect((sub.json["entries"] as! [[String: Any]]).map { $0["path_display"] as! String } == ["/Docs/a.txt", "/Docs/Sub"])
            let id = (sub.json["entries"] as! [[String: Any]])[1]["id"] as! String
            let byID = f.rpc("files/list_folder", #"{"path":"\#(id)"}"#)
            #expect((byID.json["entries"] as! [[String: Any]]).map { $0["name"] as! String } == ["b.txt"])
        }
    }

    @Test func badArguments() throws {
        try withFixture(files: Self.files) { f in
            let slash = f.rpc("files/list_folder", #"{"path":"/"}"#)
            #expect(slash.status == 400)
            #expect(slash.header("Content-Type") == "text/plain; charset=utf-8")
            #expect(slash.text == #"Error in call to API function "files/list_folder": request body: path: Specify the root folder as an empty string rather than as "/"."#)
            #expect(f.rpc("files/list_folder", #"{"path":"test"}"#).text.contains("did not match pattern"))
            #expect(f.rpc("files/list_folder", #"{"path":"","limit":0}"#).status == 400)
            #expect(f.rpc("files/list_folder", #"{"path":"","limit":2001}"#).status == 400)
            #expect(f.rpc("files/list_folder", #"{"path":"","limit":2000}"#).status == 200)
            #expect(f.rpc("files/list_folder", #"{"path":"","recursive":"yes"}"#).status == 400)
            #expect(f.rpc("files/list_folder", "{").status == 400)
            let wrongType = f.curl("/2/files/list_folder", ["-X", "POST", "-H", "Authorization: Bearer emulator-token", "-H", "Content-Type: text/html", "--data-binary", #"{"path":""}"#])
            #expect(wrongType.status == 400)
            let notFolder = f.rpc("files/list_folder", #"{"path":"/Top.txt"}"#)
            #expect(notFolder.status == 409)
            #expect(errorTags(notFolder) == ["path", "not_folder"])
            let missing = f.rpc("files/list_folder", #"{"path":"/nope"}"#)
            #expect(errorTags(missing) == ["path", "not_found"])
            #expect((missing.json["error_summary"] as! String).hasPrefix("path/not_found/"))
        }
    }

    @Test func pagingSmallLimitsAndCap() throws {
        var files: [String: String] = [:]
        for i in 0..<30 { files["d\(i % 3)/f\(i).txt"] = "\(i)" }
        try withFixture(files: files, { $0.pageSizeCap = 4 }) { f in
            let all = f.listAll(#"{"path":"","recursive":true,"limit":7}"#)
            #expect(all.entries.count == 33)
            #expect(all.pages == 9)  // the cap (4) wins over limit (7)
            #expect(Set(all.entries.map { $0["path_lower"] as! String }).count == 33)
            let small = f.listAll(#"{"path":"","recursive":true,"limit":1}"#)
            #expect(small.entries.map { $0["path_lower"] as! String } == all.entries.map { $0["path_lower"] as! String })
        }
    }

    @Test func hundredThousandEntryFolderPagesThrough() throws {
        try withFixture({ $0.pageSizeCap = 2000 }) { f in
            let dir = f.dir + "/big"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            for i in 0..<100_000 {
                let fd = open(dir + "/f\(i)", O_CREAT | O_WRONLY, 0o644)
                close(fd)
            }
            var r = f.rpc("files/list_folder", #"{"path":"/big","limit":2000}"#)
            var names = Set<String>()
            var pages = 0
            while true {
                pages += 1
                for e in r.json["entries"] as! [[String: Any]] { names.insert(e["name"] as! String) }
                guard r.json["has_more"] as? Bool == true else { break }
                r = f.cont(r.json["cursor"] as! String)
            }
            #expect(names.count == 100_000)
            #expect(pages == 50)
        }
    }

    @Test func servesLinksAsLinksNeverFollowedAndSkipsSpecialFiles() throws {
        try withFixture(files: ["real.txt": "x", "Dir/inner.txt": "y"]) { f in
            symlink("real.txt", f.dir + "/link.txt")
            symlink("Dir", f.dir + "/dirlink")
            symlink("/nowhere/at/all", f.dir + "/dangling")
            mkfifo(f.dir + "/fifo", 0o644)
            let entries = f.rpc("files/list_folder", #"{"path":""}"#).json["entries"] as! [[String: Any]]
            #expect(entries.map { $0["name"] as! String } == ["dangling", "Dir", "dirlink", "link.txt", "real.txt"])
            func link(_ name: String) -> [String: Any]? { entries.first { $0["name"] as? String == name } }
            // A file entry with `symlink_info`, its size the target's length, as the link holds it.
            #expect(link("link.txt")?[".tag"] as? String == "file")
            #expect((link("link.txt")?["symlink_info"] as? [String: Any])?["target"] as? String == "real.txt")
            #expect(link("link.txt")?["size"] as? Int == 8)
            #expect((link("dirlink")?["symlink_info"] as? [String: Any])?["target"] as? String == "Dir", "a link to a folder is not followed")
            #expect((link("dangling")?["symlink_info"] as? [String: Any])?["target"] as? String == "/nowhere/at/all")
            #expect(link("real.txt")?["symlink_info"] == nil)
            let download = f.download(#"{"path":"/link.txt"}"#)
            #expect(download.status == 409 && download.text.contains("unsupported_file"))
            // Made a file, it is a new entry (a deleted link and a file) in the change feed.
            let cursor = f.rpc("files/list_folder/get_latest_cursor", #"{"path":"","recursive":true}"#).json["cursor"] as! String
            unlink(f.dir + "/link.txt")
            FileManager.default.createFile(atPath: f.dir + "/link.txt", contents: Data("now a file".utf8))
            let changes = f.rpc("files/list_folder/continue", #"{"cursor":"\#(cursor)"}"#).json["entries"] as! [[String: Any]]
            let now = changes.last { $0["name"] as? String == "link.txt" }
            #expect(now?[".tag"] as? String == "file" && now?["symlink_info"] == nil && now?["size"] as? Int == 10)
        }
    }
}

@Suite struct MetadataTests {
    @Test func getMetadata() throws {
        try withFixture(files: ["Docs/Ünï.txt": "é", "Docs/Sub/x": ""]) { f in
            let file = f.rpc("files/get_metadata", #"{"path":"/docs/ÜNÏ.TXT"}"#)
            #expect(file.status == 200)
            #expect(file.json[".tag"] as? String == "file")
            #expect(file.json["path_display"] as? String == "/Docs/Ünï.txt")
            #expect(file.json["name"] as? String == "Ünï.txt")
            let folder = f.rpc("files/get_metadata", #"{"path":"/Docs/Sub","include_media_info":false,"include_deleted":false}"#)
            #expect(folder.json[".tag"] as? String == "folder")
            #expect(folder.json["client_modified"] == nil)
            let byID = f.rpc("files/get_metadata", #"{"path":"\#(file.json["id"] as! String)"}"#)
            #expect(byID.json["path_lower"] as? String == "/docs/ünï.txt")
            let byRev = f.rpc("files/get_metadata", #"{"path":"rev:\#(file.json["rev"] as! String)"}"#)
            #expect(byRev.json["name"] as? String == "Ünï.txt")
            let relID = f.rpc("files/get_metadata", #"{"path":"\#(folder.json["id"] as! String)/X"}"#)
            #expect(relID.json["name"] as? String == "x")
            let root = f.rpc("files/get_metadata", #"{"path":""}"#)
            #expect(root.status == 400)
            #expect(root.text == #"Error in call to API function "files/get_metadata": request body: path: The root folder is unsupported."#)
            let missing = f.rpc("files/get_metadata", #"{"path":"/missing"}"#)
            #expect(missing.status == 409)
            #expect(missing.header("Content-Type") == "application/json")
            #expect(missing.text.hasSuffix(#""error":{".tag":"path","path":{".tag":"not_found"}}}"#))
            #expect(errorTags(f.rpc("files/get_metadata", #"{"path":"/Docs/Sub/x/y"}"#)) == ["path", "not_found"])
        }
    }

    @Test func idsAreStableAndRevsFollowContent() throws {
        try withFixture(files: ["a.txt": "one"]) { f in
            let before = f.rpc("files/get_metadata", #"{"path":"/a.txt"}"#).json
            try f.write("a.txt", "two!")
            let after = f.rpc("files/get_metadata", #"{"path":"/a.txt"}"#).json
            #expect(before["id"] as? String == after["id"] as? String)
            #expect(before["rev"] as? String != after["rev"] as? String)
            #expect(before["content_hash"] as? String != after["content_hash"] as? String)
            #expect(after["size"] as? Int == 4)
        }
    }

    @Test func includeDeleted() throws {
        try withFixture(files: ["gone.txt": "x"]) { f in
            try FileManager.default.removeItem(atPath: f.dir + "/gone.txt")
            let r = f.rpc("files/get_metadata", #"{"path":"/gone.txt","include_deleted":true}"#)
            #expect(r.json[".tag"] as? String == "deleted")
            #expect(errorTags(f.rpc("files/get_metadata", #"{"path":"/gone.txt"}"#)) == ["path", "not_found"])
        }
    }
}

@Suite struct UserRouteTests {
    @Test func voidArgumentsInEveryForm() throws {
        try withFixture(files: ["a": "12345"]) { f in
            for body in ["null", "", nil] as [String?] {
                let r = f.rpc("users/get_current_account", body)
                #expect(r.status == 200)
                #expect(r.json["account_id"] as? String == "dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc")
                #expect((r.json["account_id"] as! String).count == 40)
                #expect((r.json["root_info"] as? [String: Any])?[".tag"] as? String == "user")
            }
            let space = f.rpc("users/get_space_usage", "null")
            #expect(space.json["used"] as? Int == 5)
            #expect((space.json["allocation"] as? [String: Any])?[".tag"] as? String == "individual")
            #expect(f.rpc("users/get_space_usage", #"{"x":1}"#).status == 400)
        }
    }

    @Test func authErrors() throws {
        try withFixture { f in
            let missing = f.rpc("users/get_current_account", "null", token: nil)
            #expect(missing.status == 400)
            let malformed = f.rpc("users/get_current_account", "null", token: "has space")
            #expect(malformed.status == 400)
            #expect(malformed.text.contains(#"Invalid authorization value in HTTP header "Authorization": "Bearer has space""#))
            let invalid = f.rpc("users/get_current_account", "null", token: "unknown-token")
            #expect(invalid.status == 401)
            #expect(invalid.header("Content-Type") == "application/json")
            #expect(invalid.header("WWW-Authenticate") == #"Bearer realm="Dropbox-API""#)
            #expect(errorTags(invalid) == ["invalid_access_token"])
            let byParam = f.curl("/2/users/get_current_account?authorization=Bearer%20emulator-token", ["-X", "POST"])
            #expect(byParam.status == 200)
        }
    }

    @Test func revokeStaticToken() throws {
        try withFixture({ $0.accessTokens = ["t1", "t2"] }) { f in
            let r = f.rpc("auth/token/revoke", "null", token: "t1")
            #expect(r.status == 200)
            #expect(r.isNullBody)
            #expect(errorTags(f.rpc("users/get_current_account", "null", token: "t1")) == ["invalid_access_token"])
            #expect(f.rpc("users/get_current_account", "null", token: "t2").status == 200)
        }
    }
}
