import CShims
import Dispatch
import DropboxClient
import DropboxFS
import Synchronization

/// The answer to one FUSE request. It is non-copyable and every answer consumes it, so no code path
/// can reply twice; one dropped without an answer replies `EIO` from its deinit (fuser's rule), so
/// no path can leave the kernel waiting either.
///
/// Each answer also ends the request's timing: with an observer (the mount's metrics), how long the
/// operation took and whether it failed is reported once, as the answer goes out.
///
/// A request that may wait on Dropbox can be interrupted (`allowInterrupt`): when the caller gets a
/// signal (Ctrl-C, SIGKILL) the kernel sends FUSE_INTERRUPT and waits for the answer, so the
/// interrupt is answered EINTR at once and the worker's own answer, when it comes, is dropped.
/// The interrupt also cancels the Dropbox calls the worker makes in `interruptible`, so the worker
/// and its connection are free within a second rather than at the call's deadline.
struct Reply: ~Copyable {
    private let request: fuse_req_t
    private let operation: StaticString
    /// The mount's `FUSEContext`, as libfuse holds it (a raw pointer: `discard` needs trivially
    /// destroyed fields), and when the request came (monotonic ns); nil and 0 when nobody times
    /// requests.
    private let context: UnsafeMutableRawPointer?
    private let started: UInt64
    /// A retained `InterruptGate` once `allowInterrupt` was called (a raw pointer, as `context`).
    private var gate: UnsafeMutableRawPointer?

    init(_ request: fuse_req_t, _ operation: StaticString) {
        self.request = request
        self.operation = operation
        let context = fuse_req_userdata(request)
        let timed = context.map { Unmanaged<FUSEContext>.fromOpaque($0).takeUnretainedValue().operationObserver != nil } ?? false
        self.context = timed ? context : nil
        started = timed ? Self.monotonicNanoseconds() : 0
    }

    deinit {
        ended(failed: true)
        if claim() { fuse_reply_err(request, EIO) }
    }

    /// Lets a signal to the caller end the request with EINTR while the worker is still at it
    /// (libfuse's `fuse_req_interrupt_func`). Call it after taking everything the callback needs
    /// from the request: from here on an interrupt may answer, and free, the request at any time.
    /// False if the request was interrupted already: it is answered, and the work is not needed.
    private mutating func allowInterrupt() -> Bool {
        let gate = Unmanaged.passRetained(InterruptGate())
        self.gate = gate.toOpaque()
        fuse_req_interrupt_func(request, Reply.interrupted, gate.toOpaque())
        return gate.takeUnretainedValue().state.load(ordering: .acquiring) == InterruptGate.open
    }

    /// Runs `work`, which may wait on Dropbox, with the request interruptible (`allowInterrupt`)
    /// and the Dropbox calls it makes cancelled by the interrupt. Nil if the request was
    /// interrupted already: it is answered, and the work is not needed.
    mutating func interruptible<T>(_ work: () throws(FSError) -> T) -> Result<T, FSError>? {
        guard allowInterrupt() else { return nil }
        let calls = gate.map { Unmanaged<InterruptGate>.fromOpaque($0).takeUnretainedValue().calls }
        return Result { () throws(FSError) in try CallCancellation.obeying(calls, work) }
    }

    /// libfuse calls this when the kernel interrupts the request, from the thread reading
    /// /dev/fuse or, for a request interrupted before `allowInterrupt`, from inside
    /// `fuse_req_interrupt_func`. The EINTR goes out from another thread: answering here would
    /// free the request while libfuse still holds it.
    private static let interrupted: fuse_interrupt_func_t = { request, data in
        guard let request, let data else { return }
        let gate = Unmanaged<InterruptGate>.fromOpaque(data).takeUnretainedValue()
        guard gate.state.compareExchange(expected: InterruptGate.open, desired: InterruptGate.interrupted,
                                         ordering: .acquiringAndReleasing).exchanged else { return }
        gate.calls.cancel()
        let address = UInt(bitPattern: request)
        DispatchQueue.global().async { fuse_reply_err(OpaquePointer(bitPattern: address), EINTR) }
    }

    /// Whether this reply may answer: always, unless an interrupt answered first. Once it has
    /// won, no interrupt can answer any more (`fuse_req_interrupt_func` with no function waits
    /// out one under way).
    private func claim() -> Bool {
        guard let gate else { return true }
        let box = Unmanaged<InterruptGate>.fromOpaque(gate)
        let won = box.takeUnretainedValue().state.compareExchange(expected: InterruptGate.open, desired: InterruptGate.answered,
                                                                  ordering: .acquiringAndReleasing).exchanged
        if won { fuse_req_interrupt_func(request, nil, nil) }
        box.release()
        return won
    }

    private func ended(failed: Bool) {
        guard let context,
              let observer = Unmanaged<FUSEContext>.fromOpaque(context).takeUnretainedValue().operationObserver else { return }
        observer.operationEnded(operation, seconds: Double(Self.monotonicNanoseconds() &- started) * 1e-9, failed: failed)
    }

    private static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }

    /// The corresponding C function is `fuse_reply_err`; 0 means success for requests with no data.
    /// Private: every other errno goes through `failure`, so the table in `Errno.swift` is the only one.
    private consuming func error(_ code: Int32) {
        ended(failed: code != 0)
        if claim() { fuse_reply_err(request, code) }
        discard self
    }

    /// An error answer; its errno comes from the one table (`Errno.swift`).
    consuming func failure(_ error: FSError) { self.error(error.errno) }

    consuming func ok() { self.error(0) }

    /// The corresponding C function is `fuse_reply_none` (forget has no reply).
    consuming func none() {
        fuse_reply_none(request)
        ended(failed: false)
        discard self
    }

    /// The corresponding C function is `fuse_reply_entry`.
    consuming func entry(_ attributes: NodeAttributes, timeouts: KernelCacheTimeouts) {
        var entry = fuse_entry_param()
        entry.ino = attributes.inode.rawValue
        entry.generation = 1
        entry.attr = stat(attributes)
        entry.attr_timeout = timeouts.attributes
        entry.entry_timeout = timeouts.entry
        if claim() { fuse_reply_entry(request, &entry) }
        ended(failed: false)
        discard self
    }

    /// A negative entry: "no such name", cached by the kernel for `timeout` seconds.
    consuming func negativeEntry(timeout: Double) {
        var entry = fuse_entry_param()
        entry.entry_timeout = timeout
        if claim() { fuse_reply_entry(request, &entry) }
        ended(failed: false)
        discard self
    }

    /// The corresponding C function is `fuse_reply_attr`.
    consuming func attributes(_ attributes: NodeAttributes, timeout: Double) {
        var attr = stat(attributes)
        if claim() { fuse_reply_attr(request, &attr, timeout) }
        ended(failed: false)
        discard self
    }

    /// The corresponding C function is `fuse_reply_readlink`.
    consuming func link(_ target: String) {
        if claim() { _ = target.withCString { fuse_reply_readlink(request, $0) } }
        ended(failed: false)
        discard self
    }

    /// The corresponding C function is `fuse_reply_open`. False if the kernel did not take the
    /// reply (the request is gone: the connection was aborted, or an older kernel gave up on an
    /// interrupted `open(2)`): it will never release this handle, so the caller must.
    consuming func open(_ info: UnsafeMutablePointer<fuse_file_info>) -> Bool {
        let taken = claim() && fuse_reply_open(request, info) == 0
        ended(failed: false)
        discard self
        return taken
    }

    /// The corresponding C function is `fuse_reply_buf`.
    consuming func bytes(_ buffer: UnsafeRawBufferPointer) {
        if claim() { fuse_reply_buf(request, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count) }
        ended(failed: false)
        discard self
    }

    consuming func bytes(_ array: [UInt8]) {
        let request = self.request
        if claim() { array.withUnsafeBytes { buffer in
            _ = fuse_reply_buf(request, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        } }
        ended(failed: false)
        discard self
    }

    /// Several buffers as one answer, without joining them first. The corresponding C functions
    /// are `fuse_reply_buf` (one slice) and `fuse_reply_iov`.
    consuming func slices(_ slices: [UnsafeRawBufferPointer]) {
        if !claim() {
            // Interrupted: answered already.
        } else if slices.count <= 1 {
            let buffer = slices.first ?? UnsafeRawBufferPointer(start: nil, count: 0)
            fuse_reply_buf(request, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        } else {
            let vectors = slices.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count) }
            _ = vectors.withUnsafeBufferPointer { fuse_reply_iov(request, $0.baseAddress, Int32($0.count)) }
        }
        ended(failed: false)
        discard self
    }

    /// The corresponding C function is `fuse_reply_xattr` (the size a getxattr/listxattr needs).
    consuming func attributeSize(_ size: Int) {
        if claim() { fuse_reply_xattr(request, size) }
        ended(failed: false)
        discard self
    }

    /// The corresponding C function is `fuse_reply_statfs`.
    consuming func statistics(_ stats: FilesystemStatistics) {
        var vfs = statvfs()
        let block = FilesystemStatistics.blockSize
        vfs.f_bsize = UInt(block)
        vfs.f_frsize = UInt(block)
        vfs.f_blocks = UInt(max(stats.allocatedBytes, stats.usedBytes) / block)
        vfs.f_bfree = UInt(stats.allocatedBytes > stats.usedBytes ? (stats.allocatedBytes - stats.usedBytes) / block : 0)
        vfs.f_bavail = vfs.f_bfree
        vfs.f_files = UInt(stats.nodeCount + FilesystemStatistics.freeNodes)
        vfs.f_ffree = UInt(FilesystemStatistics.freeNodes)
        vfs.f_favail = vfs.f_ffree
        vfs.f_namemax = UInt(FilesystemStatistics.maximumNameLength)
        if claim() { fuse_reply_statfs(request, &vfs) }
        ended(failed: false)
        discard self
    }
}

/// How long the kernel may trust what we tell it, in seconds.
struct KernelCacheTimeouts {
    var entry: Double
    var attributes: Double
    var negativeEntry: Double
}

/// `struct stat` for a node.
func stat(_ attributes: NodeAttributes) -> stat {
    var st = CShims.stat()
    // Not the node id the kernel addresses the node by (`fuse_entry_param.ino`): a number that is
    // the same in every mount, for backup tools that compare it.
    st.st_ino = UInt(attributes.serialNumber)
    let typeBits = switch attributes.kind {
    case .directory: UInt32(S_IFDIR)
    case .file: UInt32(S_IFREG)
    case .symlink: UInt32(S_IFLNK)
    }
    st.st_mode = typeBits | attributes.permissions
    st.st_nlink = UInt(attributes.linkCount)
    st.st_uid = attributes.uid
    st.st_gid = attributes.gid
    st.st_size = Int(clamping: attributes.size)
    st.st_blocks = Int(clamping: attributes.blocks)
    st.st_blksize = 4096
    let time = timespec(tv_sec: Int(attributes.modified), tv_nsec: 0)
    st.st_mtim = time
    st.st_ctim = time
    st.st_atim = time
    return st
}

/// The getxattr/listxattr protocol: a size of 0 asks how long the answer is; a buffer too small
/// for it is ERANGE.
enum AttributeAnswer: Equatable {
    case size(Int)
    case bytes([UInt8])
    case failure(FSError)

    init(_ bytes: [UInt8], bufferSize: Int) {
        if bufferSize == 0 { self = .size(bytes.count) }
        else if bufferSize < bytes.count { self = .failure(.bufferTooSmall) }
        else { self = .bytes(bytes) }
    }
}

/// Who answers an interruptible request: the worker or the interrupt, decided once.
final class InterruptGate: Sendable {
    static let open = 0, answered = 1, interrupted = 2
    let state = Atomic<Int>(InterruptGate.open)
    /// Cancelled by the interrupt: the request's Dropbox calls are no longer waited for.
    let calls = CallCancellation()
}
