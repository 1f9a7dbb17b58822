// The tree between mounts: loaded from a `MetadataStore` before the feed starts (then caught up
// with `continue`), and saved when it changed.

import DropboxClient

extension DropboxFilesystem {
    func loadPersistedTree() {
        guard let store else { return }
        // Applied a batch at a time as the store reads them (this runs in FUSE's `init`, before
        // any request), so a large tree is never held a second time as entries.
        var loaded = 0
        let cursor = store.load { batch in
            state.withLock { state in
                var update = TreeUpdate(rootPath: options.rootPath, logger: logger, showExports: options.showExports)
                update.apply(batch.lazy.map(metadata(for:)), to: &state.tree, notify: false)
            }
            loaded += batch.count
        }
        guard let cursor else {
            // A file found damaged part way: what it gave is not a tree to continue from.
            if loaded > 0 { state.withLock { $0.tree = Tree() } }
            return
        }
        state.withLock { state in
            // Complete but stale: answers wait for the catch-up below rather than list again.
            state.tree.markAllFoldersComplete(at: -.infinity)
            state.feed.cursor = cursor
            state.feed.catchingUp = true
        }
        logger.info("loaded saved tree", metadata: ["entries": "\(loaded)"])
        bulkWorkDone()
    }

    /// Saves the tree and its cursor, if there is a store, a cursor, and a change since the last save. The tree is copied under
    /// the lock (copy-on-write makes that O(1)) and walked outside it, so lookups never wait on a
    /// save of a large tree.
    /// Returns whether it saved.
    @discardableResult
    public func persist() -> Bool {
        guard let store else { return false }
        // One save at a time. The unmount's save must wait for one under way (the first, started
        // 5 s after the listing, or the feed's): it would find nothing unsaved and return, and
        // the process would exit in the middle of that save, losing the tree. Saves taking turns
        // also write in the order they copied the tree, never an older one over a newer.
        return saving.withLock { _ in persistNow(store) }
    }

    /// A background save (the feed's, or the first after a listing): skipped while another is
    /// under way, rather than hold up the feed behind a save at nice 19. That save took the tree as
    /// it was; what changed since stays unsaved for the next.
    @discardableResult
    func persistUnlessASaveIsUnderWay() -> Bool {
        guard let store else { return false }
        return saving.withLockIfAvailable { _ in persistNow(store) } ?? false
    }

    private func persistNow(_ store: any MetadataStore) -> Bool {
        guard let (tree, cursor) = state.withLock({ state -> (Tree, String)? in
            guard let cursor = state.feed.cursor, !state.feed.catchingUp, state.feed.unsaved else { return nil }
            state.feed.unsaved = false
            return (state.tree, cursor)
        }) else { return false }
        // Written as the walk goes: an array of every entry first would be hundreds of MiB for
        // an account of a million entries, on top of the tree.
        let written = store.save(cursor: cursor) { each in
            tree.walkWithPaths { slot, path in
                let file = tree.details(slot).map {
                    PersistedFile(size: $0.size, modified: $0.modified, id: $0.id, rev: $0.rev, contentHash: $0.contentHash,
                                  isExport: $0.isExport, exportedFrom: $0.exportedFrom, symlinkTarget: $0.symlinkTarget)
                }
                each(PersistedEntry(path: path, file: file))
            }
        }
        // Not written (the store logged why): still unsaved, so the feed's next periodic save and
        // the one at unmount try again, rather than only a later change to the tree.
        if !written { state.withLock { $0.feed.unsaved = true } }
        return written
    }

    private func metadata(for entry: PersistedEntry) -> Metadata {
        let display = options.rootPath + entry.path
        // The last component, found by its byte: splitting every path into Characters took a
        // fifth of a large tree's load.
        let slash = entry.path.utf8.lastIndex(of: UInt8(ascii: "/"))
        let name = slash.map { String(entry.path[entry.path.utf8.index(after: $0)...]) } ?? entry.path
        guard let file = entry.file else {
            return .folder(FolderMetadata(name: name, id: "", pathLower: display.lowercased(), pathDisplay: display))
        }
        // An export was saved under its visible name, whose extension names its format, and with
        // the document's own name, under which the tree keeps it as Dropbox lists it.
        let exportAs = file.isExport ? String(name.split(separator: ".").last ?? "html") : nil
        return .file(FileMetadata(name: file.isExport ? file.exportedFrom ?? name : name, id: file.id, pathLower: display.lowercased(), pathDisplay: display,
                                  clientModified: file.modified, serverModified: file.modified, rev: file.rev,
                                  size: file.size, isDownloadable: !file.isExport, contentHash: file.contentHash,
                                  exportAs: exportAs, symlinkTarget: file.symlinkTarget))
    }
}
