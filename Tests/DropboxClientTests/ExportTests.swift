// files/export against the emulator: its *.paper files cannot be downloaded, only exported.

import DropboxClient
import TestSupport
import Testing

@Suite struct ExportTests {
    @Test func aPaperDocumentExportsItsBytesUnderItsExportName() throws {
        let content = Array("<h1>Notes</h1>\n".utf8)
        let f = try EmulatorFixture(files: ["Notes.paper": content])
        guard case .file(let metadata) = try f.client.metadata(path: "/Notes.paper") else {
            Issue.record("not a file"); return
        }
        #expect(!metadata.isDownloadable && metadata.exportAs == "html")
        let exported = try f.client.export(path: metadata.id, format: nil)
        #expect(exported == ExportedFile(name: "Notes.html", bytes: content))
        let markdown = try f.client.export(path: "/Notes.paper", format: "markdown")
        #expect(markdown.name == "Notes.md")
    }

    @Test func aDownloadableFileIsNotExportable() throws {
        let f = try EmulatorFixture(files: ["a.txt": Array("a".utf8)])
        let error = thrown { () throws(DropboxError) in _ = try f.client.export(path: "/a.txt", format: nil) }
        #expect(error?.isRoute("non_exportable") == true)
    }

    @Test func aMeteredClientCountsTheExport() throws {
        let f = try EmulatorFixture(files: ["Doc.paper": Array(repeating: 65, count: 1000)])
        let meter = APIMeter()
        let api: any DropboxAPI = MeteredDropboxAPI(f.client, meter: meter)
        _ = try api.export(path: "/Doc.paper", format: nil)
        #expect(meter.calls == 1 && meter.bytesDownloaded == 1000)
    }
}
