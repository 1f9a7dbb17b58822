import DropboxClient
@testable import DropboxFS
import Foundation
import TestSupport
import Testing

/// Issue 5's memory figure: resident bytes per cached entry at a million entries, measured in this
/// process. Run with `DBX_MEMORY_ENTRIES=1000000 swift test --filter MemoryTests` (it is off by
/// default: it takes a while and wants the machine to itself).
@Suite("Memory per cached entry")
struct MemoryTests {
    static let entries = Int(ProcessInfo.processInfo.environment["DBX_MEMORY_ENTRIES"] ?? "") ?? 0

    static func residentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
        return kilobytes * 1024
    }

    @Test(.enabled(if: entries > 0))
    func residentBytesPerEntry() {
        let count = Self.entries
        let fs = DropboxFilesystem(api: FakeDropbox(), options: FilesystemOptions(), folderModified: 0)
        let before = Self.residentBytes()
        // Batches of 2000, as list_folder pages arrive: a folder entry, then its 99 files.
        var made = 0
        while made < count {
            var batch: [Metadata] = []
            batch.reserveCapacity(2000)
            while batch.count < 2000 && made < count {
                let folder = "/Camera Uploads \(made / 100)"
                if made % 100 == 0 {
                    batch.append(.folder(FolderMetadata(name: String(folder.dropFirst()), id: "id:f\(made)",
                                                        pathLower: folder.lowercased(), pathDisplay: folder)))
                } else {
                    let name = "IMG_\(String(format: "%07d", made)).jpg"
                    batch.append(.file(FileMetadata(
                        name: name, id: "id:AAAAAAAAAAAAAAAAA\(String(format: "%07d", made))",
                        pathLower: (folder + "/" + name).lowercased(), pathDisplay: folder + "/" + name,
                        clientModified: 1_700_000_000, serverModified: 1_700_000_000,
                        rev: String(format: "%016x", 0x5f00_0000_0000 + made), size: UInt64(made * 1000),
                        contentHash: String(repeating: "0123456789abcdef", count: 4))))
                }
                made += 1
            }
            fs.state.withLock { state in
                var update = TreeUpdate(rootPath: "", logger: fs.logger)
                update.apply(batch, to: &state.tree, notify: false)
            }
        }
        let after = Self.residentBytes()
        let perEntry = Double(after - before) / Double(count)
        let footprint = fs.cacheFootprint
        print("memory: \(count) entries, RSS +\((after - before) >> 20) MiB, \(Int(perEntry)) resident bytes per entry; tree's own estimate \(footprint.bytes / footprint.entries) bytes per entry")
        #expect(footprint.entries == count + 1)
        #expect(perEntry < 300)
    }
}
