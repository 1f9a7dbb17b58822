import DropboxCase
import DropboxClient
@testable import DropboxFS
import Logging
import Testing

/// Names compare as Dropbox compares them (docs/dropbox-api.md §5): Unicode 4.1's simple lowercase
/// mappings, one scalar for one, and nothing newer.
@Suite("Dropbox's case folding")
struct CaseFoldTests {
    @Test func foldsAsDropboxDoesNotAsSwiftDoes() {
        let cases: [(String, String)] = [
            ("ABC xyz", "abc xyz"), ("ÄÖÜ", "äöü"), ("ΣΑΣ", "σασ"), ("ǅ", "ǆ"),
            ("\u{130}stanbul", "istanbul"),            // İ: one scalar, not i and a combining dot
            ("\u{10A0}", "\u{2D00}"),                  // Georgian Asomtavruli, paired in Unicode 4.1
            ("\u{2126}", "\u{3C9}"), ("\u{212A}", "k"), // Ohm and Kelvin signs
            ("\u{1E9E}", "\u{1E9E}"),                  // ẞ: Unicode 5.1, unknown to Dropbox
            ("\u{13A0}", "\u{13A0}"),                  // Cherokee: its small letters came in 8.0
            ("\u{1C90}", "\u{1C90}"),                  // Georgian Mtavruli: 11.0
            ("ß", "ß"), ("日本語", "日本語"),
            // Composed as Dropbox composes path_lower: a name written decomposed folds as its NFC.
            ("Cafe\u{301}", "caf\u{E9}"), ("E\u{301}", "\u{E9}"), ("\u{1100}\u{1161}", "\u{AC00}"),
            ("\u{30AB}\u{3099}", "\u{30AC}"),
        ]
        for (name, expected) in cases {
            #expect(DropboxCase.lowercased(name) == expected, "\(name.debugDescription)")
        }
        #expect(FoldedName("\u{130}X") == FoldedName("ix"))
        #expect(FoldedName("\u{1E9E}x") != FoldedName("ßx"))
        #expect(FoldedName("Caf\u{E9}") == FoldedName("cafe\u{301}"))
    }

    private func folder(_ display: String) -> Metadata {
        .folder(FolderMetadata(name: String(display.split(separator: "/").last!), id: "id:" + display,
                               pathLower: DropboxCase.lowercased(display), pathDisplay: display))
    }

    private func file(_ display: String, pathDisplay: String? = nil) -> Metadata {
        .file(FileMetadata(name: String(display.split(separator: "/").last!), id: "id:" + display,
                           pathLower: DropboxCase.lowercased(display), pathDisplay: pathDisplay ?? display,
                           clientModified: 0, serverModified: 0, rev: "0123456789", size: 1))
    }

    private func names(_ tree: Tree, in folder: Slot = .root) -> [String] { tree.children(of: folder).map(tree.name) }

    @Test func namesDropboxKeepsApartStayApart() {
        var tree = Tree()
        var update = TreeUpdate(rootPath: "", logger: Logger(label: "test"))
        update.replaceChildren(of: .root, with: [file("/\u{1E9E}x"), file("/ßx"), file("/\u{13A0}"), file("/\u{AB70}")],
                               in: &tree, listedAt: 0, notify: false)
        #expect(names(tree) == ["\u{1E9E}x", "ßx", "\u{13A0}", "\u{AB70}"])
    }

    @Test func aParentSpelledInAnotherCaseIsTheSameFolder() {
        // path_display may have a parent's case wrong; Dropbox's fold still finds the folder.
        var tree = Tree()
        var update = TreeUpdate(rootPath: "", logger: Logger(label: "test"))
        update.apply([folder("/\u{130}zmir"), file("/\u{130}zmir/a.txt", pathDisplay: "/izmir/a.txt")],
                     to: &tree, notify: false)
        #expect(names(tree) == ["\u{130}zmir"])
        #expect(names(tree, in: tree.children(of: .root)[0]) == ["a.txt"])
    }

    @Test func aMountedFolderWithSuchALetterShowsItsEntries() {
        var tree = Tree()
        var update = TreeUpdate(rootPath: "/\u{130}\u{15F}", logger: Logger(label: "test"))
        update.apply([folder("/\u{130}\u{15F}"), file("/\u{130}\u{15F}/plan.txt"), file("/elsewhere.txt")],
                     to: &tree, notify: false)
        #expect(names(tree) == ["plan.txt"])
    }
}

/// A document's export never shares a node with a file of the name it is shown under.
@Suite("Export names")
struct ExportNameTests {
    private func file(_ name: String, exportAs: String? = nil) -> Metadata {
        .file(FileMetadata(name: name, id: "id:" + name, pathLower: "/" + name.lowercased(), pathDisplay: "/" + name,
                           clientModified: 0, serverModified: 0, rev: "0123456789", size: 1,
                           isDownloadable: exportAs == nil, exportAs: exportAs))
    }

    private func shown(_ tree: Tree) -> [String: Bool] {
        Dictionary(uniqueKeysWithValues: tree.children(of: .root).map { (tree.name($0), tree.details($0)!.isExport) })
    }

    @Test func aFileKeepsItsNameWhicheverIsListedFirst() {
        for order in [[file("Notes.paper", exportAs: "html"), file("Notes.html")],
                      [file("Notes.html"), file("Notes.paper", exportAs: "html")]] {
            var tree = Tree()
            var update = TreeUpdate(rootPath: "", logger: Logger(label: "test"))
            update.replaceChildren(of: .root, with: order, in: &tree, listedAt: 0, notify: false)
            #expect(shown(tree) == ["Notes.html": false])
            var feed = TreeUpdate(rootPath: "", logger: Logger(label: "test"))
            feed.apply(order.reversed(), to: &tree, notify: false)
            #expect(shown(tree) == ["Notes.html": false], "the change feed keeps it too")
            feed.apply([.deleted(DeletedMetadata(name: "Notes.paper", pathLower: "/notes.paper", pathDisplay: "/Notes.paper"))],
                       to: &tree, notify: false)
            #expect(shown(tree) == ["Notes.html": false], "the document's deletion leaves the file")
        }
    }

    @Test func twoDocumentsWithOneExportNameKeepTheFirst() {
        var tree = Tree()
        var update = TreeUpdate(rootPath: "", logger: Logger(label: "test"))
        update.apply([file("Plan.gdoc", exportAs: "docx"), file("Plan.gsheet", exportAs: "docx")], to: &tree, notify: false)
        update.apply([file("Plan.gsheet", exportAs: "docx")], to: &tree, notify: false)
        #expect(tree.children(of: .root).map { tree.details($0)!.exportedFrom } == ["Plan.gdoc"])
    }
}
