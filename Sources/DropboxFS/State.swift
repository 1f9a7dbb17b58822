import DropboxClient
import Logging

/// Case-folded Dropbox paths, the key that keeps inode numbers stable across listings.
enum NodeKey {
    static func fold(_ name: String) -> String { name.lowercased() }
}

struct FileState: Equatable {
    var id: String
    var rev: String
    var size: UInt64
    var modified: Int64
    var contentHash: String?
}

struct Listing {
    var children: [InodeNumber]
    var byName: [String: InodeNumber]
    var byFoldedName: [String: InodeNumber]
    var subfolderCount: Int
    var fetchedAt: Double
}

struct Node {
    var parent: InodeNumber
    var name: String
    /// The Dropbox path this node was last seen at ("" for the account root).
    var path: String
    var kind: NodeKind
    var file: FileState?
    var listing: Listing?
    /// When the listing that last described this node was fetched.
    var describedAt: Double
    var lookupCount: UInt64 = 0
    var lastOpenedRev: String?
}

struct OpenFile {
    var inode: InodeNumber
    var rev: String
    var size: UInt64
}

/// All mutable state of one mount, guarded by `DropboxFS.state`.
struct State {
    var nodes: [InodeNumber: Node]
    var inodeByKey: [String: InodeNumber]
    var nextInode: UInt64 = 2
    var fileHandles: [FileHandleID: OpenFile] = [:]
    var directoryHandles: [FileHandleID: [DirectoryEntry]] = [:]
    var nextHandle: UInt64 = 1
    var statistics: (FilesystemStatistics, Double)?

    init(rootPath: String) {
        let root = Node(parent: .root, name: "", path: rootPath, kind: .directory, file: nil, listing: nil,
                        describedAt: .infinity)
        nodes = [.root: root]
        inodeByKey = [NodeKey.fold(rootPath): .root]
    }

    /// True while `inode` is the root or still appears in its parent's current listing.
    func isListed(_ inode: InodeNumber) -> Bool {
        guard inode != .root else { return true }
        guard let node = nodes[inode], let listing = nodes[node.parent]?.listing else { return false }
        return listing.byFoldedName[NodeKey.fold(node.name)] == inode
    }

    mutating func addFileHandle(_ file: OpenFile) -> FileHandleID {
        let handle = FileHandleID(nextHandle)
        nextHandle += 1
        fileHandles[handle] = file
        return handle
    }

    mutating func addDirectoryHandle(_ entries: [DirectoryEntry]) -> FileHandleID {
        let handle = FileHandleID(nextHandle)
        nextHandle += 1
        directoryHandles[handle] = entries
        return handle
    }

    /// Replaces the listing of `folder` with `entries` (one whole `list_folder` chain).
    mutating func applyListing(_ entries: [Metadata], to folder: InodeNumber, fetchedAt: Double,
                               options: FilesystemOptions, logger: Logger) {
        guard let folderNode = nodes[folder] else { return }
        var listing = Listing(children: [], byName: [:], byFoldedName: [:], subfolderCount: 0, fetchedAt: fetchedAt)
        listing.children.reserveCapacity(entries.count)
        for entry in entries {
            let kind: NodeKind
            var file: FileState?
            switch entry {
            case .file(let f):
                // Non-downloadable files (Paper and other cloud docs) cannot be read with files/download.
                guard f.isDownloadable else { continue }
                kind = .file
                file = FileState(id: f.id, rev: f.rev, size: f.size, modified: f.clientModified,
                                 contentHash: f.contentHash)
            case .folder:
                kind = .directory
            case .deleted:
                continue
            }
            let name = entry.name
            guard EntryName.isValid(name) else {
                logger.warning("skipping an entry whose name cannot be a file name",
                               metadata: ["folder": "\(folderNode.path)", "name": "\(name.debugDescription)"])
                continue
            }
            let folded = NodeKey.fold(name)
            guard listing.byFoldedName[folded] == nil else {
                logger.warning("skipping a second entry whose name differs only in case",
                               metadata: ["folder": "\(folderNode.path)", "name": "\(name)"])
                continue
            }
            let path = folderNode.path + "/" + name
            let key = NodeKey.fold(path)
            let inode: InodeNumber
            if let known = inodeByKey[key], let existing = nodes[known], existing.kind == kind {
                inode = known
            } else {
                inode = InodeNumber(nextInode)
                nextInode += 1
                inodeByKey[key] = inode
            }
            var node = nodes[inode] ?? Node(parent: folder, name: name, path: path, kind: kind, file: nil,
                                             listing: nil, describedAt: fetchedAt)
            node.parent = folder
            node.name = name
            node.path = path
            node.file = file
            node.describedAt = fetchedAt
            nodes[inode] = node
            listing.children.append(inode)
            listing.byName[name] = inode
            listing.byFoldedName[folded] = inode
            if kind == .directory { listing.subfolderCount += 1 }
        }
        nodes[folder]?.listing = listing
    }
}

/// Which names Dropbox may send that a POSIX filesystem can show.
enum EntryName {
    static func isValid(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
            && name.utf8.count <= 255
    }
}
