// FUSE low-level callbacks. Each unpacks its C arguments, calls the DropboxFilesystem core, and replies
// exactly once through a `Reply`. They are static functions of an enum because libfuse calls them on
// its worker threads: a closure defined in main.swift would be main-actor isolated and trap there.

import CShims
import DropboxFS

public enum Callbacks {
    /// Read-ahead requests the kernel may have in flight on the mount: 16 readers' worth of whole
    /// 4 MiB windows in 1 MiB requests (FUSE's ceiling is 65535). See `initialize`.
    public static let maxBackgroundRequests: UInt32 = 64

    /// The table libfuse calls, for `fuse_session_new`.
    public static func operations() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { Callbacks.initialize($0, $1) }
        ops.lookup = { Callbacks.lookup($0, $1, $2) }
        ops.forget = { Callbacks.forget($0, $1, $2) }
        ops.forget_multi = { Callbacks.forgetMulti($0, $1, $2) }
        ops.getattr = { Callbacks.getattr($0, $1, $2) }
        ops.readlink = { Callbacks.readlink($0, $1) }
        ops.open = { Callbacks.open($0, $1, $2) }
        ops.read = { Callbacks.read($0, $1, $2, $3, $4) }
        ops.release = { Callbacks.release($0, $1, $2) }
        ops.flush = { Callbacks.flush($0, $1, $2) }
        ops.opendir = { Callbacks.opendir($0, $1, $2) }
        ops.readdir = { Callbacks.readdir($0, $1, $2, $3, $4) }
        ops.readdirplus = { Callbacks.readdirplus($0, $1, $2, $3, $4) }
        ops.releasedir = { Callbacks.releasedir($0, $1, $2) }
        ops.statfs = { Callbacks.statfs($0, $1) }
        ops.getxattr = { Callbacks.getxattr($0, $1, $2, $3) }
        ops.listxattr = { Callbacks.listxattr($0, $1, $2) }
        ops.access = { Callbacks.access($0, $1, $2) }
        // Everything that would change the tree answers EROFS: the mount is read-only by design.
        ops.setattr = { req, _, _, _, _ in Reply(req!, "setattr").failure(.readOnly) }
        ops.mknod = { req, _, _, _, _ in Reply(req!, "mknod").failure(.readOnly) }
        ops.mkdir = { req, _, _, _ in Reply(req!, "mkdir").failure(.readOnly) }
        ops.unlink = { req, _, _ in Reply(req!, "unlink").failure(.readOnly) }
        ops.rmdir = { req, _, _ in Reply(req!, "rmdir").failure(.readOnly) }
        ops.symlink = { req, _, _, _ in Reply(req!, "symlink").failure(.readOnly) }
        ops.rename = { req, _, _, _, _, _ in Reply(req!, "rename").failure(.readOnly) }
        ops.link = { req, _, _, _ in Reply(req!, "link").failure(.readOnly) }
        ops.write = { req, _, _, _, _, _ in Reply(req!, "write").failure(.readOnly) }
        ops.create = { req, _, _, _, _ in Reply(req!, "create").failure(.readOnly) }
        ops.setxattr = { req, _, _, _, _, _ in Reply(req!, "setxattr").failure(.readOnly) }
        ops.removexattr = { req, _, _ in Reply(req!, "removexattr").failure(.readOnly) }
        ops.fallocate = { req, _, _, _, _, _ in Reply(req!, "fallocate").failure(.readOnly) }
        return ops
    }

    private static func context(_ req: fuse_req_t) -> FUSEContext {
        Unmanaged<FUSEContext>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    private static func initialize(_ userdata: UnsafeMutableRawPointer?, _ conn: UnsafeMutablePointer<fuse_conn_info>?) {
        let context = Unmanaged<FUSEContext>.fromOpaque(userdata!).takeUnretainedValue()
        if let conn, conn.pointee.capable & UInt32(FUSE_CAP_READDIRPLUS) != 0 {
            conn.pointee.want |= UInt32(FUSE_CAP_READDIRPLUS)
        }
        if let conn {
            // The kernel's read-ahead requests are "background" requests. Past
            // `congestion_threshold` of them in flight (libfuse's default 9 of 12), it stops
            // reading ahead and drops the pages it had added to the page cache, so a few parallel
            // readers with a 4 MiB read-ahead each (MountRuntime's KernelReadahead) would keep
            // dropping and re-adding their pages and fall back to one synchronous request per read.
            conn.pointee.max_background = maxBackgroundRequests
            conn.pointee.congestion_threshold = maxBackgroundRequests * 3 / 4
        }
        context.hooks.mountInitialized()
    }

    private static func lookup(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
        var reply = Reply(req!, "lookup")
        let mount = context(req!)
        // Dropbox names are UTF-8: other bytes name nothing (String(cString:) would repair them
        // into a name that might exist).
        guard let name = String(validatingCString: name!) else {
            return reply.negativeEntry(timeout: mount.timeouts.negativeEntry)
        }
        guard let outcome = reply.interruptible({ () throws(FSError) in
            try mount.filesystem.lookup(parent: InodeNumber(parent), name: name)
        }) else { return }
        switch outcome {
        case .success(let attributes):
            var timeouts = mount.timeouts
            if !mount.filesystem.kernelMayKeepEntry(named: name, found: attributes) { timeouts.entry = 0 }
            reply.entry(attributes, timeouts: timeouts)
        case .failure(.notFound):
            let keep = mount.filesystem.kernelMayKeepEntry(named: name, found: nil)
            reply.negativeEntry(timeout: keep ? mount.timeouts.negativeEntry : 0)
        case .failure(let error): reply.failure(error)
        }
    }

    private static func forget(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ count: UInt64) {
        context(req!).filesystem.forget(InodeNumber(inode), count: count)
        Reply(req!, "forget").none()
    }

    private static func forgetMulti(_ req: fuse_req_t?, _ count: Int, _ forgets: UnsafeMutablePointer<fuse_forget_data>?) {
        let filesystem = context(req!).filesystem
        for item in UnsafeBufferPointer(start: forgets, count: count) {
            filesystem.forget(InodeNumber(item.ino), count: item.nlookup)
        }
        Reply(req!, "forget_multi").none()
    }

    private static func getattr(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        var reply = Reply(req!, "getattr")
        let mount = context(req!)
        guard let outcome = reply.interruptible({ () throws(FSError) in try mount.filesystem.attributes(of: InodeNumber(inode)) })
        else { return }
        switch outcome {
        case .success(let attributes): reply.attributes(attributes, timeout: mount.timeouts.attributes)
        case .failure(let error): reply.failure(error)
        }
    }

    private static func readlink(_ req: fuse_req_t?, _ inode: fuse_ino_t) {
        var reply = Reply(req!, "readlink")
        let mount = context(req!)
        guard let outcome = reply.interruptible({ () throws(FSError) in try mount.filesystem.readLink(InodeNumber(inode)) })
        else { return }
        switch outcome {
        case .success(let target): reply.link(target)
        case .failure(let error): reply.failure(error)
        }
    }

    private static func open(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        var reply = Reply(req!, "open")
        let info = fi!
        if info.pointee.flags & O_ACCMODE != O_RDONLY || info.pointee.flags & O_TRUNC != 0 {
            return reply.failure(.readOnly)
        }
        let mount = context(req!)
        guard let outcome = reply.interruptible({ () throws(FSError) in try mount.filesystem.open(InodeNumber(inode)) })
        else { return }
        switch outcome {
        case .success(let opened):
            mount.hooks.fileOpened()
            info.pointee.fh = opened.handle.rawValue
            dbx_fi_set_keep_cache(info, opened.contentUnchanged ? 1 : 0)
            dbx_fi_set_direct_io(info, opened.kernelSizeMayBeStale || mount.directIO ? 1 : 0)
            if !reply.open(info) { mount.filesystem.release(opened.handle) }
        case .failure(let error):
            reply.failure(error)
        }
    }

    private static func read(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ size: Int, _ offset: off_t,
                             _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        var reply = Reply(req!, "read")
        let handle = FileHandleID(fi!.pointee.fh)
        let filesystem = context(req!).filesystem
        guard let outcome = reply.interruptible({ () throws(FSError) in
            try filesystem.readBytes(handle, offset: UInt64(offset), size: size)
        }) else { return }
        switch outcome {
        case .success(let bytes):
            // Straight from the read engine's buffers: no copy between download and kernel.
            var pending: Reply? = consume reply
            bytes.withSlices { pending.take()!.slices($0) }
        case .failure(let error):
            reply.failure(error)
        }
    }

    private static func release(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        context(req!).filesystem.release(FileHandleID(fi!.pointee.fh))
        Reply(req!, "release").ok()
    }

    private static func flush(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        Reply(req!, "flush").ok()
    }

    private static func opendir(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        var reply = Reply(req!, "opendir")
        let filesystem = context(req!).filesystem   // taken now: the request is freed by the reply
        guard let outcome = reply.interruptible({ () throws(FSError) in try filesystem.openDirectory(InodeNumber(inode)) })
        else { return }
        switch outcome {
        case .success(let handle):
            fi!.pointee.fh = handle.rawValue
            // Every change to a folder the kernel may have listed reaches it as an invalidation
            // (DropboxFilesystem.invalidateFoldersListedByReaders says how), so the kernel keeps
            // listings across opens: `find` run twice reads the second time from the kernel. Not
            // after an open that listed the folder again: its invalidations may not have landed.
            dbx_fi_set_cache_readdir(fi!, 1)
            dbx_fi_set_keep_cache(fi!, filesystem.kernelMayKeepListing(handle) ? 1 : 0)
            if !reply.open(fi!) { filesystem.releaseDirectory(handle) }
        case .failure(let error):
            reply.failure(error)
        }
    }

    private static func readdir(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ size: Int, _ offset: off_t,
                                _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        fillDirectory(req!, size: size, offset: offset, handle: fi!.pointee.fh, plus: false)
    }

    private static func readdirplus(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ size: Int, _ offset: off_t,
                                    _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        fillDirectory(req!, size: size, offset: offset, handle: fi!.pointee.fh, plus: true)
    }

    /// Packs as many entries from `offset` as fit in `size` bytes. With `plus`, each entry carries
    /// its attributes and counts as a lookup (except `.` and `..`, which the kernel does not count).
    private static func fillDirectory(_ req: fuse_req_t, size: Int, offset: off_t, handle: UInt64, plus: Bool) {
        let reply = Reply(req, plus ? "readdirplus" : "readdir")
        let mount = context(req)
        let timeouts = mount.timeouts
        // Entries are at least 24 bytes in the buffer (152 with attributes), so this many always
        // cover a full reply.
        let entries: [DirectoryEntry]
        switch Result(catching: { () throws(FSError) in
            try mount.filesystem.readDirectory(FileHandleID(handle), from: Int(offset), limit: size / (plus ? 152 : 24) + 1)
        }) {
        case .success(let batch): entries = batch
        case .failure(let error): return reply.failure(error)
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        var used = 0
        // Sizes the reply gives the kernel: only readdirplus gives any, and only for what fits.
        var reported: [(inode: InodeNumber, size: UInt64)] = []
        for entry in entries {
            let attributes = entry.attributes
            let remaining = size - used
            let slot = buffer.baseAddress!.advanced(by: used).assumingMemoryBound(to: CChar.self)
            let needed: Int
            let isDot = entry.name == "." || entry.name == ".."
            if plus {
                var param = fuse_entry_param()
                param.attr = stat(attributes)
                if !isDot {
                    param.ino = attributes.inode.rawValue
                    param.generation = 1
                    param.attr_timeout = timeouts.attributes
                    param.entry_timeout = timeouts.entry
                }
                needed = fuse_add_direntry_plus(req, slot, remaining, entry.name, &param, off_t(entry.offset))
            } else {
                var attr = stat(attributes)
                needed = fuse_add_direntry(req, slot, remaining, entry.name, &attr, off_t(entry.offset))
            }
            if needed > remaining { break }
            used += needed
            if plus && !isDot && attributes.kind == .file { reported.append((attributes.inode, attributes.size)) }
        }
        if !reported.isEmpty { mount.filesystem.sizesReported(reported) }
        reply.bytes(UnsafeRawBufferPointer(rebasing: buffer[0..<used]))
    }

    private static func releasedir(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        context(req!).filesystem.releaseDirectory(FileHandleID(fi!.pointee.fh))
        Reply(req!, "releasedir").ok()
    }

    private static func statfs(_ req: fuse_req_t?, _ inode: fuse_ino_t) {
        var reply = Reply(req!, "statfs")
        let filesystem = context(req!).filesystem
        guard let outcome = reply.interruptible({ () throws(FSError) in try filesystem.statistics() }) else { return }
        switch outcome {
        case .success(let stats): reply.statistics(stats)
        case .failure(let error): reply.failure(error)
        }
    }

    private static func getxattr(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ size: Int) {
        let reply = Reply(req!, "getxattr")
        let wanted = String(cString: name!)
        switch Result(catching: { () throws(FSError) in
            try context(req!).filesystem.extendedAttribute(wanted, of: InodeNumber(inode))
        }) {
        case .success(let value): answer(reply, AttributeAnswer(Array(value.utf8), bufferSize: size))
        case .failure(let error): reply.failure(error)
        }
    }

    private static func listxattr(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ size: Int) {
        let reply = Reply(req!, "listxattr")
        switch Result(catching: { () throws(FSError) in try context(req!).filesystem.extendedAttributes(of: InodeNumber(inode)) }) {
        case .success(let attributes):
            answer(reply, AttributeAnswer(attributes.flatMap { Array($0.name.utf8) + [0] }, bufferSize: size))
        case .failure(let error):
            reply.failure(error)
        }
    }

    private static func answer(_ reply: consuming Reply, _ answer: AttributeAnswer) {
        switch answer {
        case .size(let count): reply.attributeSize(count)
        case .bytes(let bytes): reply.bytes(bytes)
        case .failure(let error): reply.failure(error)
        }
    }

    private static func access(_ req: fuse_req_t?, _ inode: fuse_ino_t, _ mask: Int32) {
        let reply = Reply(req!, "access")
        if mask & W_OK != 0 { return reply.failure(.readOnly) }
        reply.ok()
    }
}
