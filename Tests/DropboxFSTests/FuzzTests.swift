// Seeded fuzzing of listing application (issue 8): random sequences of file, folder and deleted
// entries, hostile names among them (`/`, `\0`, `.`, `..`, empty, over FUSE's 1,024 bytes, names that
// differ only in case), go through the fake Dropbox's change journal into a live mount's tree.
// After each batch the visible tree is walked and compared with a reference model of what Dropbox
// means and which names the mount promises to skip. Fixed seed, bounded rounds and time.

import DropboxClient
@testable import DropboxFS
import Foundation
import TestSupport
import Testing

/// What should be visible: lowercased path -> (display name, size or nil for a folder).
private struct Model {
    var nodes: [String: (name: String, size: UInt64?)] = [:]

    static func isShowable(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
            && name.utf8.count <= 1024
    }

    func folders() -> [String] { [""] + nodes.filter { $0.value.size == nil }.keys.sorted() }

    mutating func removeSubtree(_ lower: String) {
        nodes = nodes.filter { $0.key != lower && !$0.key.hasPrefix(lower + "/") }
    }
}


@Suite("Fuzzing listing application")
struct ListingFuzzTests {
    @Test func randomJournalsMatchTheModel() throws {
        let dropbox = FakeDropbox(pageSize: 50)
        let fs = DropboxFilesystem(api: dropbox, options: FilesystemOptions(metadataTTL: .seconds(60)), folderModified: 0,
                           now: { 0 })
        fs.startChangeFeed()
        defer { fs.stopChangeFeed() }
        #expect(eventually { fs.isFeedLive })

        var rng = SeededGenerator(seed: 0x8F5)
        var model = Model()
        let plain = ["a", "B", "c.txt", "Dup", "dup", "DUP", "é", "Ä.bin", "space name", "x"]
        let hostile = [".", "..", "", "a/b", "nul\0x", String(repeating: "L", count: 1025), String(repeating: "é", count: 513), String(repeating: "é", count: 300)]
        let clock = ContinuousClock()
        let start = clock.now
        var entries = 0, rounds = 0
        while rounds < 400 && clock.now - start < .seconds(12) {
            rounds += 1
            var batch: [Metadata] = []
            for _ in 0..<Int.random(in: 1...24, using: &rng) {
                let folders = model.folders()
                let parentLower = folders[Int.random(in: 0..<folders.count, using: &rng)]
                // The parent's display path: its own display name after each ancestor's.
                var parentDisplay = ""
                var walked = ""
                for part in parentLower.split(separator: "/") {
                    walked += "/" + part
                    parentDisplay += "/" + (model.nodes[walked]?.name ?? String(part))
                }
                let isHostile = Int.random(in: 0..<5, using: &rng) == 0
                let name = isHostile ? hostile.randomElement(using: &rng)! : plain.randomElement(using: &rng)!
                let display = parentDisplay + "/" + name
                let lower = display.lowercased()
                let existing = model.nodes[lower]
                switch Int.random(in: 0..<10, using: &rng) {
                case 0..<5:
                    let size = UInt64.random(in: 0..<1000, using: &rng)
                    batch.append(.file(FileMetadata(name: name, id: "id:\(entries)", pathLower: lower, pathDisplay: display,
                                                    clientModified: 0, serverModified: 0,
                                                    rev: String(0x1_0000_0000 + entries, radix: 16), size: size)))
                    if Model.isShowable(name) {
                        if existing?.size == nil, existing != nil { model.removeSubtree(lower) }
                        model.nodes[lower] = (name, size)
                    }
                case 5..<8:
                    batch.append(.folder(FolderMetadata(name: name, id: "id:\(entries)", pathLower: lower, pathDisplay: display)))
                    if Model.isShowable(name) {
                        if let existing, existing.size != nil { model.removeSubtree(lower) }
                        model.nodes[lower] = (name, nil)
                    }
                default:
                    batch.append(.deleted(DeletedMetadata(name: name, pathLower: lower, pathDisplay: display)))
                    if Model.isShowable(name) { model.removeSubtree(lower) }
                }
                entries += 1
            }
            // A marker after the batch (and after the last round's marker is removed): once it
            // shows, everything before it has been applied, wherever a page of the feed ended.
            let marker = "/zz-marker-\(rounds % 2)"
            dropbox.journal(batch)
            model.removeSubtree("/zz-marker-\((rounds + 1) % 2)")
            dropbox.remove("/zz-marker-\((rounds + 1) % 2)")
            dropbox.addFile(marker, Array(repeating: 7, count: rounds))
            model.nodes[marker] = (String(marker.dropFirst()), UInt64(rounds))
            let applied = eventually(within: 10) {
                (try? fs.lookup(parent: .root, name: String(marker.dropFirst())).size) == UInt64(rounds)
            }
            #expect(applied, "round \(rounds) was not applied")
            let seen = try visible(fs)
            let expected = model.nodes.mapValues { "\($0.name):\($0.size.map(String.init) ?? "dir")" }
            if seen != expected {
                let missing = expected.filter { seen[$0.key] != $0.value }
                let extra = seen.filter { expected[$0.key] != $0.value }
                Issue.record("round \(rounds): missing or different \(missing), unexpected \(extra); batch \(batch)")
                return
            }
        }
        #expect(entries >= 1_000, "only \(entries) entries in \(rounds) rounds")
    }

    /// Every visible node, lowercased path -> "name:size" or "name:dir".
    private func visible(_ fs: DropboxFilesystem) throws -> [String: String] {
        var out: [String: String] = [:]
        var pending: [(InodeNumber, String)] = [(.root, "")]
        while let (inode, path) = pending.popLast() {
            let handle = try fs.openDirectory(inode)
            defer { fs.releaseDirectory(handle) }
            for entry in try fs.readDirectory(handle, from: 2) {
                let attributes = entry.attributes
                let lower = path + "/" + entry.name.lowercased()
                if attributes.kind == .directory {
                    out[lower] = "\(entry.name):dir"
                    pending.append((attributes.inode, lower))
                } else {
                    out[lower] = "\(entry.name):\(attributes.size)"
                }
            }
        }
        return out
    }
}
