// open, read and release: a handle is pinned to the rev seen at open, and its bytes come from the
// read engine (or, for an export, from the export's bytes).

import DropboxClient

extension DropboxFilesystem {
    // MARK: - Files

    /// Opens a file for reading, revalidating stale attributes first (close-to-open consistency),
    /// and pins the handle to the current rev.
    public func open(_ inode: InodeNumber) throws(FSError) -> OpenedFile {
        try reporting(.open, inode: inode) { () throws(FSError) -> OpenedFile in
            // Open sends the kernel no attributes, so it revalidates without marking the size reported.
            let slot = try revalidate(inode)
            if let export = try openExport(slot) { return export }
            return try state.withLock { state throws(FSError) -> OpenedFile in
                guard state.tree.isAlive(slot) else { throw .nodeGone }
                guard let file = state.tree.details(slot) else { throw .isADirectory }
                guard file.symlinkTarget == nil else { throw .symbolicLink }
                // A new rev of a file open somewhere comes as a new node (`Tree.openFiles`), so
                // the page cache, which is per node, never mixes two. Except at the mount point
                // of a one-file mount, whose node stays: there, while a handle of another rev is
                // open, its reads may still land in the cache, so this handle bypasses the cache
                // and keeps nothing.
                let otherRevOpen = state.fileHandles.values.contains { $0.slot == slot && $0.rev != file.rev }
                let unchanged = state.tree.isOpenedAtCurrentRev(slot) && !otherRevOpen
                state.tree.markOpenedAtCurrentRev(slot)
                let rev = file.rev
                let stream = reader.open(ReadFile(id: file.id, rev: rev, size: file.size)) { [weak self] in
                    self?.isCurrent(slot: slot, rev: rev) ?? false
                }
                let sizeMayBeStale = !state.tree.isSizeReported(slot) || otherRevOpen
                let handle = state.addFileHandle(OpenFile(slot: slot, rev: rev, size: file.size, stream: stream,
                                                          pageCached: !sizeMayBeStale,
                                                          shownAtOpen: attributes(of: slot, in: state.tree)),
                                                 newRevGetsANewNode: inode != .root)
                return OpenedFile(handle: handle, contentUnchanged: unchanged, kernelSizeMayBeStale: sizeMayBeStale)
            }
        }
    }

    /// Up to `size` bytes at `offset`; fewer only at end of file, none past it.
    public func read(_ handle: FileHandleID, offset: UInt64, size: Int) throws(FSError) -> [UInt8] {
        try readBytes(handle, offset: offset, size: size).array
    }

    /// Like `read`, but hands over the read engine's buffers instead of a copy (the FUSE adapter
    /// replies from them directly).
    public func readBytes(_ handle: FileHandleID, offset: UInt64, size: Int) throws(FSError) -> FileBytes {
        try reporting(.read, handle: handle) { () throws(FSError) -> FileBytes in
            let file = try state.withLock { state throws(FSError) -> OpenFile in
                guard let file = state.fileHandles[handle] else { throw .badHandle }
                return file
            }
            if let exported = file.exported {
                guard offset < UInt64(exported.count), size > 0 else { return .empty }
                let start = Int(offset)
                return .copying(exported[start..<min(exported.count, start + size)])
            }
            guard let stream = file.stream else { throw .badHandle }
            // Bytes of a rev that is not the node's must never reach its page cache, where every
            // handle of the node reads them. A new rev of an open file comes as a new node, so this
            // holds by construction; the rev is still checked before and after, and read-ahead of
            // another rev dropped, so that no path that ever changed a rev in place could mix two.
            try ensureCurrent(file)
            guard offset < file.size, size > 0 else { return .empty }
            let bytes: FileBytes
            do throws(FSError) {
                bytes = try reader.read(stream, offset: offset, size: size)
            } catch {
                if error == .changedSinceOpen { reader.drop(stream) }
                throw error
            }
            try ensureCurrent(file)
            if file.pageCached, let passed = reader.pagesToDrop(stream) { dropFromPageCache(passed, of: file) }
            return bytes
        }
    }

    /// Tells the kernel to drop pages this handle's reader has passed, unless another handle has
    /// the file open: the page cache is per inode, and that reader may be behind this one.
    private func dropFromPageCache(_ range: Range<UInt64>, of file: OpenFile) {
        let alone = state.withLock { state in
            state.fileHandles.values.lazy.filter { $0.slot == file.slot }.count == 1
        }
        guard alone else { return }
        droppedPageBytes.add(UInt64(range.count), ordering: .relaxed)
        invalidate([.pages(file.slot.inode, range)])
    }

    /// Whether a handle opened at `rev` may go on reading: while its node is the file at that rev,
    /// or is gone. A file moved, renamed, deleted or given a new rev on Dropbox while open leaves
    /// the handle's node behind (a new rev gets a new node, `Tree.openFiles`): no open can reach
    /// that node again and nothing can mix, and its rev still names the same bytes (`rev:`
    /// downloads of earlier revs and of a deleted file's last rev work), so an open file reads on
    /// as on a local disk after `mv`, `rm` or a rewrite by rename. Only if Dropbox no longer has
    /// the rev does the read fail with ESTALE.
    private func isCurrent(slot: Slot, rev: String) -> Bool {
        state.withLock { !$0.tree.isAlive(slot) || $0.tree.details(slot)?.rev == rev }
    }

    private func ensureCurrent(_ file: OpenFile) throws(FSError) {
        guard isCurrent(slot: file.slot, rev: file.rev) else {
            if let stream = file.stream { reader.drop(stream) }
            throw .changedSinceOpen
        }
    }

    public func release(_ handle: FileHandleID) {
        let stream = state.withLock { state -> ReadStream? in
            guard let file = state.removeFileHandle(handle) else { return nil }
            // A handle of a superseded rev (at a one-file mount's mount point) may have left its
            // pages in the cache: the next open must not keep them.
            if state.tree.details(file.slot)?.rev != file.rev { state.tree.clearOpenedAtCurrentRev(file.slot) }
            return file.stream
        }
        if let stream { reader.close(stream) }
    }

    /// At unmount: lets downloads in flight finish into the block cache (a few seconds at most)
    /// and forgets queued read-ahead.
    public func stopReading() { reader.shutdown() }

    /// Read-ahead memory now, its peak, and the streams holding some (for tests and logs).
    public var readAheadUsage: (reserved: UInt64, peak: UInt64, streams: Int) { reader.budget.usage }
}
