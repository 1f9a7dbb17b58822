import CShims
import DropboxFS
import Foundation

/// Tells the kernel to forget dentries and inodes that changed in Dropbox, and the pages a long
/// stream has passed (`KernelInvalidation.pages`). It runs on its own thread because libfuse
/// forbids notifying from the execution path of a related request: a lookup that relists a folder
/// would otherwise deadlock invalidating that folder's entries, and a read dropping pages would
/// wait on pages the kernel holds locked until that very read is answered.
/// The corresponding C functions are `fuse_lowlevel_notify_inval_entry`, `_delete` and `_inval_inode`.
public final class KernelInvalidator: @unchecked Sendable {
    // `session` stays valid until `stop()` returns (MountRuntime's MountSession calls it before destroying the
    // session); `pending`, `stopping` and `running` are only touched under `condition`.
    private let session: OpaquePointer
    private let condition = NSCondition()
    private var pending: [KernelInvalidation] = []
    private var stopping = false
    private var running = false

    public init(session: OpaquePointer) { self.session = session }

    public func start() {
        condition.lock()
        defer { condition.unlock() }
        guard !running, !stopping else { return }
        running = true
        let thread = Thread { [self] in run() }
        thread.name = "dbx-invalidate"
        thread.start()
    }

    public func enqueue(_ invalidations: [KernelInvalidation]) {
        condition.lock()
        if !stopping {
            pending.append(contentsOf: invalidations)
            condition.signal()
        }
        condition.unlock()
    }

    /// Stops the thread and waits for it, so no notification reaches a destroyed session.
    public func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while pending.isEmpty && !stopping { condition.wait() }
            if stopping {
                running = false
                condition.broadcast()
                condition.unlock()
                return
            }
            // The batch takes the queue's storage and the queue starts empty: keeping its capacity
            // would copy-allocate the largest batch ever seen (a SIGHUP's whole tree) every time.
            let batch = pending
            pending = []
            condition.unlock()
            for invalidation in batch { send(invalidation) }
        }
    }

    private func send(_ invalidation: KernelInvalidation) {
        // ENOENT ("not cached") is the common, harmless answer; nothing else is actionable either.
        switch invalidation {
        case .entry(let parent, let name):
            _ = name.withCString { fuse_lowlevel_notify_inval_entry(session, parent.rawValue, $0, name.utf8.count) }
        case .removed(let parent, let name, let node):
            let result = name.withCString {
                fuse_lowlevel_notify_delete(session, parent.rawValue, node.rawValue, $0, name.utf8.count)
            }
            // The kernel forgets the entry before it checks the node, so a name that leads
            // elsewhere by now (ENOENT) or a folder with entries still in use (ENOTEMPTY) is
            // forgotten all the same; a kernel without the call (ENOSYS) is told the old way.
            if result == -ENOSYS {
                _ = name.withCString { fuse_lowlevel_notify_inval_entry(session, parent.rawValue, $0, name.utf8.count) }
            }
        case .inode(let inode):
            _ = fuse_lowlevel_notify_inval_inode(session, inode.rawValue, 0, 0)
        case .attributes(let inode):
            _ = fuse_lowlevel_notify_inval_inode(session, inode.rawValue, -1, 0)   // a negative offset: attributes only
        case .pages(let inode, let range):
            // The kernel waits for any of these pages being read; none of its reads waits for this thread.
            _ = fuse_lowlevel_notify_inval_inode(session, inode.rawValue, off_t(range.lowerBound), off_t(range.count))
        }
    }
}
