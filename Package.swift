// swift-tools-version: 6.0
// dbx-mount: a read-only FUSE mount of a Dropbox account, and the Dropbox emulator it is tested against.
//
// Layering (each arrow is "depends on"):
//   dbx-mount (CLI) -> MountRuntime -> FUSEAdapter -> DropboxFS (core) -> DropboxClient (API, pure Swift)
//                                                     DropboxFS -> CPartMemory (a part's memory: copy in, move pages)
//                                                                         ^ CurlTransport (the only libcurl user)
//   MetadataCache (SQLite) implements the core's MetadataStore. docs/ARCHITECTURE.md draws the graph.
//   dbx-emulator (CLI) -> DropboxEmulator (SwiftNIO server; shares no code with the client)
import PackageDescription

let package = Package(
    name: "dbx-mount",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "dbx-mount", targets: ["DBXMount"]),
        .executable(name: "dbx-emulator", targets: ["DBXEmulator"]),
        .library(name: "DropboxEmulator", targets: ["DropboxEmulator"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.30.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
    ],
    targets: [
        // C module: fuse3 and curl headers plus wrappers for what Swift cannot call (macros, variadics).
        .target(
            name: "CShims",
            path: "CShims",
            linkerSettings: [.linkedLibrary("fuse3"), .linkedLibrary("curl")]
        ),
        // Dropbox API v2 client: models, errors, routes. Pure Swift; talks HTTP through `HTTPTransport`.
        .target(
            name: "DropboxClient",
            dependencies: [.product(name: "Logging", package: "swift-log")]
        ),
        // The one module that imports libcurl: an `HTTPTransport` with pooled, reused connections.
        .target(
            name: "CurlTransport",
            dependencies: ["CShims", "DropboxClient"]
        ),
        // The filesystem core: inodes, metadata cache, reads. No network, no FUSE; its only C is
        // CPartMemory below.
        .target(
            name: "DropboxFS",
            dependencies: ["DropboxClient", "DropboxCase", "CPartMemory", .product(name: "Logging", package: "swift-log")]
        ),
        // Two C functions for read-ahead buffers: the copy into them with streaming stores, which
        // Swift cannot emit, and the move of their pages with mremap, which it cannot call
        // (CPartMemory/StreamingCopy.c and MovePages.c say why they pay).
        .target(name: "CPartMemory"),
        // How Dropbox lowercases paths: shared by the core's name index and the emulator's path_lower.
        .target(name: "DropboxCase"),
        // The system SQLite (libsqlite3-dev), for MetadataCache only.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        // The persistent cache: a mount's tree and cursor in SQLite, so a remount needs no full listing.
        .target(
            name: "MetadataCache",
            dependencies: [
                "CSQLite", "DropboxFS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // Dropbox's thumbnails in the freedesktop.org thumbnail cache, where file managers look
        // before they read an image: implements the core's ThumbnailStore.
        .target(
            name: "ThumbnailCache",
            dependencies: [
                "DropboxFS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // Thin FUSE low-level adapter: unpacks C arguments, calls the core, replies exactly once; the
        // errno table and the kernel-notification seam. Nothing about the process around a mount.
        .target(
            name: "FUSEAdapter",
            // DropboxClient only for `CallCancellation`: an interrupted request abandons its calls.
            dependencies: ["CShims", "DropboxFS", "DropboxClient"]
        ),
        // The process around a mount: session start and teardown, daemonizing, signals, systemd
        // notify, the kernel's read-ahead knob in sysfs, malloc tuning, the stats line.
        .target(
            name: "MountRuntime",
            dependencies: [
                "CShims", "FUSEAdapter", "DropboxFS", "DropboxClient",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .executableTarget(
            name: "DBXMount",
            dependencies: [
                "MountRuntime", "DropboxFS", "DropboxClient", "CurlTransport", "MetadataCache", "ThumbnailCache",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The system libgd (libgd-dev), for the emulator's thumbnails only.
        .systemLibrary(name: "CGD", path: "Sources/CGD", providers: [.apt(["libgd-dev"])]),
        // The Dropbox emulator: serves a local directory as the Dropbox API v2 subset.
        .target(
            name: "DropboxEmulator",
            dependencies: [
                "CGD",
                "DropboxCase",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .executableTarget(
            name: "DBXEmulator",
            dependencies: [
                "DropboxEmulator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Shared test doubles: a fake Dropbox for the core, a fake transport for the client, a
        // seeded generator for randomized tests, a log recorder. Used by test targets only.
        .target(
            name: "TestSupport",
            dependencies: ["DropboxClient", "DropboxFS", .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport"
        ),
        .testTarget(name: "DropboxFSTests", dependencies: ["DropboxFS", "DropboxClient", "DropboxCase", "TestSupport",
                                                         .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "DropboxClientTests",
                    dependencies: ["DropboxClient", "CurlTransport", "DropboxEmulator", "TestSupport"]),
        // The emulator's tests speak raw HTTP to it: they need no fake.
        .testTarget(name: "DropboxEmulatorTests", dependencies: ["DropboxEmulator"]),
        .testTarget(name: "MetadataCacheTests", dependencies: ["MetadataCache", "DropboxFS", "CSQLite", "TestSupport"]),
        .testTarget(name: "ThumbnailCacheTests", dependencies: ["ThumbnailCache", "DropboxFS", "TestSupport"]),
        .testTarget(name: "FUSEAdapterTests", dependencies: ["FUSEAdapter", "DropboxFS", "DropboxClient", "TestSupport"]),
        .testTarget(name: "MountRuntimeTests", dependencies: ["MountRuntime", "DropboxFS", "DropboxClient", "TestSupport"]),
    ]
)
