import ArgumentParser
import DropboxFS

/// How file contents are read (issue 6): the read-ahead memory budget and the optional on-disk
/// block cache. Each flag has an `-o` form for fstab (`readahead_memory=MIB`, `block_cache_dir=PATH`,
/// `block_cache_size=MIB`); a flag wins over its `-o` form.
struct ReadOptions: ParsableArguments {
    @Option(help: ArgumentHelp("MiB all open files together may hold read ahead (default 256; 0 reads only what is asked).",
                               valueName: "MiB"))
    var readaheadMemory: Int?

    @Option(help: ArgumentHelp("Keep downloaded blocks in this directory, across mounts (default: no block cache).",
                               valueName: "path"))
    var blockCacheDir: String?

    @Option(help: ArgumentHelp("MiB the block cache may use; least recently used blocks go first (default 1024).",
                               valueName: "MiB"))
    var blockCacheSize: Int?

    @Option(help: ArgumentHelp("Keep this folder (a path inside the mount, such as /Photos/2024) available offline; repeatable; needs --block-cache-dir as its store.",
                               valueName: "path"))
    var pin: [String] = []

    @Option(help: ArgumentHelp("MB/s pinned folders may be fetched at, all together (default: no limit; four files at a time).",
                               valueName: "MB/s"))
    var pinBandwidth: Int?

    /// `--pin-bandwidth`, else `-o pin_bandwidth=`, in bytes per second; nil for no limit.
    func pinBandwidth(_ list: MountOptionList) throws(UsageError) -> UInt64? {
        let megabytes: UInt64
        if let pinBandwidth {
            guard pinBandwidth > 0 else { throw UsageError("--pin-bandwidth needs a positive number of MB/s, not \(pinBandwidth)") }
            megabytes = UInt64(pinBandwidth)
        } else if let value = try list.number("pin_bandwidth") {
            guard value > 0 else { throw UsageError("pin_bandwidth needs a positive number of MB/s") }
            megabytes = UInt64(value)
        } else {
            return nil
        }
        return megabytes * 1_000_000
    }

    /// Folders to pin at mount time: the flags, and every `-o pin=PATH`.
    func pins(_ list: MountOptionList) -> [String] {
        pin + list.pins
    }

    @Flag(help: ArgumentHelp("Bypass the kernel's page cache: reads go straight from read-ahead to the reader, which saves a copy and about 0.25 CPU-s per GiB on long streams, but every read reaches dbx-mount (nothing re-read is cached by the kernel). mmap still works on Linux 6.6 and later; on older kernels a shared mmap fails (ENODEV)."))
    var directIO = false

    /// Whether files are opened with `direct_io` (the flag, else `-o direct_io`).
    func directIO(_ list: MountOptionList) -> Bool {
        directIO || list.settings["direct_io"] != nil
    }

    @Flag(help: ArgumentHelp("Keep every page of a file streamed in the kernel's page cache, as a local disk does. By default, of a file of 512 MiB or more read sequentially, only its first 4 MiB and the 32 MiB behind the reader stay cached: a long stream reuses a few dozen MiB of memory instead of filling the page cache, and a second read downloads the rest again."))
    var keepPageCache = false

    /// Whether the pages a long read passed stay cached (the flag, else `-o keep_page_cache`).
    func keepPageCache(_ list: MountOptionList) -> Bool {
        keepPageCache || list.settings["keep_page_cache"] != nil
    }

    /// The read engine's options from these flags, else their `-o` forms, else the defaults.
    func readAhead(_ list: MountOptionList) throws(UsageError) -> ReadAheadOptions {
        var options = ReadAheadOptions()
        // With `direct_io` nothing reaches the page cache, so there is nothing to drop.
        if keepPageCache(list) || directIO(list) { options.dropBehind = nil }
        if let mib = try mebibytes(readaheadMemory, list, "readahead_memory") { options.memoryBudget = mib << 20 }
        if let mib = try mebibytes(blockCacheSize, list, "block_cache_size") { options.blockCacheBytes = mib << 20 }
        if let directory = blockCacheDir ?? list.settings["block_cache_dir"] {
            guard !directory.isEmpty else { throw UsageError("--block-cache-dir needs a directory") }
            options.blockCacheDirectory = directory
        }
        return options
    }

    private func mebibytes(_ flag: Int?, _ list: MountOptionList, _ name: String) throws(UsageError) -> UInt64? {
        if let flag {
            guard flag >= 0 else { throw UsageError("--\(name.replacingOccurrences(of: "_", with: "-")) needs a number of MiB, not \(flag)") }
            return UInt64(flag)
        }
        return try list.number(name).map(UInt64.init)
    }
}
