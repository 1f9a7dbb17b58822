// glibc tuning for a process that moves multi-MiB buffers, and the resident-memory figure the stats
// line reports.

import CShims
import Foundation

enum ProcessMemory {
    /// Read-ahead buffers are several MiB. glibc's dynamic mmap threshold, raised by the first
    /// such free, would serve later ones from per-thread arenas that keep freed memory; a fixed
    /// threshold keeps every large buffer its own mapping, returned when freed, so the process
    /// stays within the read budget. Called before the session starts (no thread runs yet).
    static func useFixedMmapThreshold() {
        _ = mallopt(M_MMAP_THRESHOLD, 256 << 10)
    }

    /// glibc gives a thread that finds the arenas busy an arena of its own, up to eight per core,
    /// and each arena keeps what its threads freed. A mount runs up to 16 FUSE threads and a
    /// download thread per request in flight: with five large files streamed at once (plain HTTP,
    /// the 111,000-entry benchmark tree), glibc's 16 arenas held about 30 MiB more than one, two
    /// or four did (peak RSS 360–367 MiB in eight runs; with two, 322–336 in seven of eight, once
    /// 359). One arena per core, and at least two, since at most that many threads run at once;
    /// four parallel readers used no more CPU with two. A limit the user set for glibc
    /// (`MALLOC_ARENA_MAX`, or `glibc.malloc.arena_max` in `GLIBC_TUNABLES`) is left as it is.
    /// Called before the session starts (no thread runs yet).
    static func limitArenasToCores() {
        if getenv("MALLOC_ARENA_MAX") != nil { return }
        if let tunables = getenv("GLIBC_TUNABLES"),
           String(cString: tunables).contains("glibc.malloc.arena_max") { return }
        let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        _ = mallopt(M_ARENA_MAX, Int32(clamping: max(2, cores)))
    }

    /// Gives freed heap back to the system (after a full listing, or a save of the tree).
    static func returnFreedHeap() {
        _ = malloc_trim(0)
    }

    /// Resident memory, from /proc/self/statm (its second field, in pages).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
