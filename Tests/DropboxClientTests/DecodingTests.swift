@testable import DropboxClient
import TestSupport
import Testing

@Suite("Decoding Dropbox answers")
struct DecodingTests {
    @Test func fileMetadata() throws {
        let md = try Decode.metadata(try JSONReader.parse(fileJSON))
        #expect(md == .file(FileMetadata(
            name: "Prime_Numbers.txt", id: "id:a4ayc_80_OEAAAAAAAAAXw",
            pathLower: "/homework/math/prime_numbers.txt", pathDisplay: "/Homework/math/Prime_Numbers.txt",
            clientModified: 1_431_445_838, serverModified: 1_431_445_839, rev: "a1c10ce0dd78", size: 7212,
            isDownloadable: true,
            contentHash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")))
    }

    @Test func sharedLinkMetadataAndHostileAnswers() throws {
        let file = #"{".tag":"file","url":"https://www.dropbox.com/scl/fi/x/a.txt?rlkey=k","name":"a.txt","id":"id:A","#
            + #""client_modified":"2015-05-12T15:50:38Z","server_modified":"2015-05-12T15:50:39Z","rev":"a1c10ce0dd78","#
            + #""size":7212,"link_permissions":{"can_revoke":false}}"#
        #expect(try Decode.sharedLinkTarget(try JSONReader.parse(file)) == .file(FileMetadata(
            name: "a.txt", id: "id:A", pathLower: nil, pathDisplay: nil, clientModified: 1_431_445_838,
            serverModified: 1_431_445_839, rev: "a1c10ce0dd78", size: 7212)))
        #expect(try Decode.sharedLinkTarget(try JSONReader.parse(#"{".tag":"folder","url":"u","name":"Pub","link_permissions":{}}"#))
                == .folder(name: "Pub", id: nil))
        for hostile in [
            #"{".tag":"folder","url":"u","name":"a/b"}"#,          // a slash would address another path
            #"{".tag":"folder","url":"u","name":""}"#,
            #"{".tag":"collection","url":"u","name":"x"}"#,        // neither a file nor a folder
            #"{".tag":"file","url":"u","name":"a.txt","size":1}"#,  // a file without its rev and times
            #"{"url":"u","name":"x"}"#,
        ] {
            #expect(throws: DropboxError.self, "\(hostile)") { try Decode.sharedLinkTarget(try JSONReader.parse(hostile)) }
        }
    }

    @Test func folderAndDeletedMetadata() throws {
        #expect(try Decode.metadata(try JSONReader.parse(
            #"{".tag":"folder","name":"math","id":"id:X","path_lower":"/homework/math","path_display":"/Homework/math"}"#))
            == .folder(FolderMetadata(name: "math", id: "id:X", pathLower: "/homework/math", pathDisplay: "/Homework/math")))
        #expect(try Decode.metadata(try JSONReader.parse(
            #"{".tag":"deleted","name":"pi.txt","path_lower":"/homework/math/pi.txt"}"#))
            == .deleted(DeletedMetadata(name: "pi.txt", pathLower: "/homework/math/pi.txt", pathDisplay: nil)))
    }

    @Test func optionalFieldsMayBeNullOrMissingAndUnknownFieldsAreIgnored() throws {
        let text = #"""
        {".tag":"file","name":"a","id":"id:1","path_lower":null,"client_modified":"2020-01-01T00:00:00Z",
         "server_modified":"2020-01-01T00:00:00Z","rev":"0123456789","size":0,"content_hash":null,
         "is_downloadable":false,"export_info":{"export_as":"docx"},"media_info":{"x":[1,2]},"future":{"a":1}}
        """#
        guard case .file(let f) = try Decode.metadata(try Decode.json(Array(text.utf8), context: "t")) else {
            Issue.record("not a file"); return
        }
        #expect(f.pathLower == nil && f.pathDisplay == nil && f.contentHash == nil)
        #expect(!f.isDownloadable && f.exportAs == "docx" && f.size == 0)
    }

    @Test func aSymbolicLinksTargetIsDecoded() throws {
        let text = #"""
        {".tag":"file","name":"current","id":"id:1","path_lower":"/current","client_modified":"2020-01-01T00:00:00Z",
         "server_modified":"2020-01-01T00:00:00Z","rev":"0123456789","size":9,"symlink_info":{"target":"../v2/app"}}
        """#
        guard case .file(let f) = try Decode.metadata(try Decode.json(Array(text.utf8), context: "t")) else {
            Issue.record("not a file"); return
        }
        #expect(f.symlinkTarget == "../v2/app")
        let plain = #"{".tag":"file","name":"a","id":"id:1","client_modified":"2020-01-01T00:00:00Z","server_modified":"2020-01-01T00:00:00Z","rev":"0123456789","size":0}"#
        guard case .file(let g) = try Decode.metadata(try Decode.json(Array(plain.utf8), context: "t")) else { return }
        #expect(g.symlinkTarget == nil)
    }

    @Test func unicodeNamesArriveExactly() throws {
        for name in ["Grüße.txt", "日本語", "😀 emoji", "e\u{301}", "'quote\" -dash", String(repeating: "é", count: 127)] {
            let json = JSONWriter.encode(.object([".tag": .string("folder"), "name": .string(name), "id": .string("id:1")]),
                                         headerSafe: true)
            #expect(try Decode.metadata(try JSONReader.parse(json)).name == name)
        }
    }

    @Test func sizeLimits() throws {
        func file(size: String) -> String {
            fileJSON.replacingFirst("\"size\":7212", with: "\"size\":\(size)")
        }
        guard case .file(let f) = try Decode.metadata(try JSONReader.parse(file(size: "18446744073709551615"))) else {
            Issue.record("not a file"); return
        }
        #expect(f.size == UInt64.max)
        for bad in ["18446744073709551616", "-1", "1.0", "1e3", "\"7212\"", "null", "true", "99999999999999999999999"] {
            let error = thrown { () throws(DropboxError) in try Decode.metadata(try Decode.json(Array(file(size: bad).utf8), context: "t")) }
            guard case .malformedResponse(let what)? = error else {
                Issue.record("size \(bad): expected malformedResponse, got \(String(describing: error))"); continue
            }
            #expect(what.contains("size"))
        }
    }

    @Test(arguments: [
        ("\"rev\":\"a1c10ce0dd78\",", "rev"),            // missing required
        ("\"id\":\"id:a4ayc_80_OEAAAAAAAAAXw\",", "id"),
        ("\"client_modified\":\"2015-05-12T15:50:38Z\",", "client_modified"),
    ])
    func missingRequiredFields(_ removed: String, _ field: String) throws {
        let text = fileJSON.replacingFirst(removed, with: "")
        #expect(text != fileJSON)
        let error = thrown { () throws(DropboxError) in try Decode.metadata(try Decode.json(Array(text.utf8), context: "t")) }
        guard case .malformedResponse(let what)? = error else { Issue.record("got \(String(describing: error))"); return }
        #expect(what.contains(field))
    }

    @Test(arguments: [
        #"{".tag":"file","name":5}"#,
        #"{".tag":"symlink","name":"a","id":"id:1"}"#,
        #"{"name":"a","id":"id:1"}"#,
        #"{".tag":"folder","name":"a/b","id":"id:1"}"#,
        #"{".tag":"folder","name":"","id":"id:1"}"#,
        #"{".tag":"folder","name":"a\u0000b","id":"id:1"}"#,
        #"{".tag":"folder","name":"a","id":7}"#,
        #"{".tag":"folder","name":"a","id":"id:1","path_lower":[]}"#,
        #"[]"#,
        #""file""#,
    ])
    func wrongShapesAreMalformed(_ text: String) throws {
        let error = thrown { () throws(DropboxError) in try Decode.metadata(try Decode.json(Array(text.utf8), context: "t")) }
        guard case .malformedResponse? = error else { Issue.record("got \(String(describing: error))"); return }
    }

    @Test func timestampsInOtherRFC3339FormsAreRead() {
        let dropbox = DropboxTimestamp.parse("2015-05-12T15:50:38Z")
        #expect(dropbox == 1_431_445_838)
        for same in ["2015-05-12T15:50:38.5Z", "2015-05-12T15:50:38.123456Z", "2015-05-12T15:50:38+00:00",
                     "2015-05-12T17:50:38+02:00", "2015-05-12T15:20:38.9-00:30", "2015-05-12T15:50:38z"] {
            #expect(DropboxTimestamp.parse(same) == dropbox, "\(same)")
        }
        for bad in ["2015-05-12T15:50:38.Z", "2015-05-12T15:50:38+0200", "2015-05-12T15:50:38+02:00Z",
                    "2015-05-12T15:50:38", "2015-05-12T15:50:38.5", "2015-05-12T15:50:38+24:00"] {
            #expect(DropboxTimestamp.parse(bad) == nil, "\(bad)")
        }
    }

    @Test func badTimestampsAreMalformed() throws {
        for ts in ["2015-05-12T15:50:38.Z", "2015-05-12", "1431445838", "2015-02-30T00:00:00Z"] {
            let text = fileJSON.replacingFirst("2015-05-12T15:50:38Z", with: ts)
            let error = thrown { () throws(DropboxError) in try Decode.metadata(try Decode.json(Array(text.utf8), context: "t")) }
            guard case .malformedResponse(let what)? = error else { Issue.record("\(ts): \(String(describing: error))"); continue }
            #expect(what.contains("client_modified"))
        }
    }

    @Test func listFolderPage() throws {
        let page = try Decode.listFolderPage(Array("""
            {"entries":[\(fileJSON),{".tag":"folder","name":"f","id":"id:2"}],"cursor":"AAA","has_more":true}
            """.utf8))
        #expect(page.entries.count == 2 && page.cursor == "AAA" && page.hasMore)
        for bad in [#"{"entries":[],"cursor":"","has_more":false}"#, #"{"entries":[],"has_more":false}"#,
                    #"{"entries":{},"cursor":"c","has_more":false}"#, #"{"entries":[],"cursor":"c","has_more":"no"}"#,
                    "not json", ""] {
            let error = thrown { () throws(DropboxError) in try Decode.listFolderPage(Array(bad.utf8)) }
            guard case .malformedResponse? = error else { Issue.record("\(bad): \(String(describing: error))"); continue }
        }
    }

    @Test func entriesThatCannotBeShownAreLeftOutOfTheirPage() throws {
        let page = try Decode.listFolderPage(Array("""
            {"entries":[\(fileJSON),{".tag":"symlink","name":"s","id":"id:3"},{},
             {".tag":"folder","name":"a/b","id":"id:4"},{".tag":"folder","name":"f","id":"id:2"}],
             "cursor":"AAA","has_more":false}
            """.utf8))
        #expect(page.entries.map(\.name) == ["Prime_Numbers.txt", "f"])
        #expect(page.skippedEntries == 3)
        #expect(page.firstSkipReason?.contains("symlink") == true)
    }

    @Test func accountAndSpaceUsage() throws {
        let account = try Decode.account(Array(#"""
            {"account_id":"dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc","name":{"given_name":"F","surname":"L",
             "familiar_name":"F","display_name":"Franz Ländler","abbreviated_name":"FL"},"email":"f@example.com",
             "email_verified":true,"disabled":false,"locale":"en","referral_link":"https://x","is_paired":false,
             "account_type":{".tag":"basic"},"root_info":{".tag":"user","root_namespace_id":"3235641",
             "home_namespace_id":"3235642"}}
            """#.utf8))
        #expect(account == Account(accountID: "dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc", displayName: "Franz Ländler",
                                   email: "f@example.com", rootNamespaceID: "3235641", homeNamespaceID: "3235642"))
        #expect(try Decode.spaceUsage(Array(#"{"used":5,"allocation":{".tag":"individual","allocated":10000000000}}"#.utf8))
                == SpaceUsage(used: 5, allocated: 10_000_000_000))
        #expect(try Decode.spaceUsage(Array(#"""
            {"used":7,"allocation":{".tag":"team","used":100,"allocated":2000,"user_within_team_space_allocated":0,
             "user_within_team_space_limit_type":{".tag":"off"},"user_within_team_space_used_cached":7}}
            """#.utf8)) == SpaceUsage(used: 7, allocated: 2000))
        #expect(try Decode.spaceUsage(Array(#"{"used":7,"allocation":{".tag":"other"}}"#.utf8))
                == SpaceUsage(used: 7, allocated: 0))
        let error = thrown { () throws(DropboxError) in try Decode.account(Array(#"{"account_id":"x"}"#.utf8)) }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
    }

    @Test func longpollResult() throws {
        #expect(try Decode.longpoll(Array(#"{"changes":true}"#.utf8)) == LongpollResult(changes: true, backoff: nil))
        #expect(try Decode.longpoll(Array(#"{"changes":false,"backoff":60}"#.utf8)) == LongpollResult(changes: false, backoff: 60))
        #expect(try Decode.longpoll(Array(#"{"changes":false,"backoff":1000000000000}"#.utf8))
                == LongpollResult(changes: false, backoff: 900))
        let error = thrown { () throws(DropboxError) in try Decode.longpoll(Array(#"{"changes":false,"backoff":-1}"#.utf8)) }
        guard case .malformedResponse? = error else { Issue.record("\(String(describing: error))"); return }
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        replacing(target, with: replacement, maxReplacements: 1)
    }
}
