// Dropping from the kernel's page cache the pages a long sequential read has passed.
//
// Every byte a buffered reader gets from the mount is first written into a page of the kernel's
// page cache, by the mount (its reply's copy), and the kernel keeps those pages until memory runs
// short. So a 1 GiB file read once grows the page cache by 1 GiB of memory that was free. On a
// machine that hands its free memory back to a host (a VM with free page reporting or a balloon,
// as the benchmark machine is: docs/reads-over-tls.md, "Where the swing comes from"), the first
// write of each such page costs a fault in the host, which made the mount's CPU per GiB swing
// between 1.2 and 4 CPU-s. Pages given back to the kernel are taken again by the next read-ahead
// at once, still backed, so a stream that drops what its reader has passed keeps reusing a few
// dozen MiB: a fresh mount's 1 GiB through 300 MB/s at 50 ms took 118-145 ticks of the mount's
// CPU against 208-246 keeping every page (docs/reads-over-tls.md, "Dropping what a stream has
// passed").
//
// It also keeps one streamed video or backup from pushing out of the page cache what the machine
// was using, which is why Linux now offers the same to applications for local files
// (`RWF_DONTCACHE`).
//
// What stays cached: every page of a file under `largeFile`; of a larger one, its first
// `keepHead` bytes (what file managers, `file` and players read again) and the `keepBehind` bytes
// behind the furthest read (the kernel sends a reader's reads up to its read-ahead, 4 MiB, ahead
// of where the reader is, and from several threads out of order: `ReadEngine.straggle`); and
// whatever a random reader reads. A random reader's reads can land within the stream's reach of
// each other and carry its furthest read forward, so a run drops only what its reads covered in
// bytes: a reader that jumped ahead 40 MiB in 4 KiB reads has read 4 KiB, not 40 MiB. A second
// read of a large file downloads again what was dropped; `--keep-page-cache` keeps it all, as a
// local disk would.
// Nothing is dropped while another handle has the file open (the page cache is per file, and
// that reader may be behind this one), nor for a handle that bypasses the page cache.

/// When a stream's passed pages are dropped, and how much at a time.
public struct DropBehind: Sendable, Equatable {
    /// Files smaller than this keep every page.
    public var largeFile: UInt64 = 512 << 20
    /// Bytes at the start of a file that are never dropped.
    public var keepHead: UInt64 = 4 << 20
    /// Bytes behind the furthest read that are kept.
    public var keepBehind: UInt64 = 32 << 20
    /// Pages are dropped this many bytes at a time: one notification to the kernel each.
    public var step: UInt64 = 8 << 20

    public init() {}

    /// Whether a file of `fileSize` bytes drops anything at all (most files never do).
    func applies(toFileOf fileSize: UInt64) -> Bool { fileSize >= largeFile }

    /// The bytes to drop now from a file of `fileSize` bytes, for a sequential run that began at
    /// `runStart`, whose reads have reached `furthest` and together came to `read` bytes, and
    /// below `dropped` of which everything was dropped already (or lay before the run). Nil until
    /// a whole step is due, and while the run's reads add up to less than the bytes from its
    /// start to the end of the range (it skipped ahead rather than read). Whole steps, so ranges
    /// stay page aligned.
    func due(fileSize: UInt64, runStart: UInt64, dropped: UInt64, furthest: UInt64, read: UInt64) -> Range<UInt64>? {
        guard applies(toFileOf: fileSize), furthest > keepBehind else { return nil }
        let from = max(dropped, runStart, keepHead)
        let until = (furthest - keepBehind) / step * step
        guard until >= from + step, read >= until - runStart else { return nil }
        return from..<until
    }
}
