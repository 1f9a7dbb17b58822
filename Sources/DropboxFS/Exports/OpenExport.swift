import DropboxClient

extension DropboxFilesystem {
    /// Opens an export document, or returns nil for an ordinary file.
    func openExport(_ slot: Slot) throws(FSError) -> OpenedFile? {
        guard let file = state.withLock({ $0.tree.isAlive(slot) ? $0.tree.details(slot) : nil }), file.isExport else {
            return nil
        }
        let bytes = try exports.bytes(id: file.id, rev: file.rev) { () throws(FSError) -> [UInt8] in
            do throws(DropboxError) {
                return try api.export(path: file.id, format: nil).bytes
            } catch {
                throw FSError(error)
            }
        }
        let (handle, resized) = state.withLock { state -> (FileHandleID, Bool) in
            let resized = state.tree.isAlive(slot) && state.tree.size(slot) != UInt64(bytes.count)
            if resized { state.tree.setSize(slot, UInt64(bytes.count)) }
            // Its bytes are the handle's own, answered with direct I/O, never through the page
            // cache: a new rev of the document can change the node in place.
            let shown = state.tree.isAlive(slot) ? attributes(of: slot, in: state.tree) : nil
            let handle = state.addFileHandle(OpenFile(slot: slot, rev: file.rev, size: UInt64(bytes.count), exported: bytes,
                                                      shownAtOpen: shown),
                                             newRevGetsANewNode: false)
            return (handle, resized)
        }
        if resized { invalidate([.inode(slot.inode)]) }
        return OpenedFile(handle: handle, contentUnchanged: false, kernelSizeMayBeStale: true)
    }
}
