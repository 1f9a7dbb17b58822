// swift-tools-version: 6.0
// dbx-mount: a read-only FUSE mount of a Dropbox account, and the Dropbox emulator it is tested against.
//
// Layering (each arrow is "depends on"):
//   dbx-mount (CLI) -> FUSEAdapter -> DropboxFS (core) -> DropboxClient (API, pure Swift)
//                                                          ^ CurlTransport (the only libcurl user)
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
        // The filesystem core: inodes, metadata cache, reads. No C, no network, no FUSE.
        .target(
            name: "DropboxFS",
            dependencies: ["DropboxClient", .product(name: "Logging", package: "swift-log")]
        ),
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
        // Thin FUSE low-level adapter: unpacks C arguments, calls DropboxFS, replies exactly once.
        .target(
            name: "FUSEAdapter",
            dependencies: ["CShims", "DropboxFS", .product(name: "Logging", package: "swift-log")]
        ),
        .executableTarget(
            name: "DBXMount",
            dependencies: [
                "FUSEAdapter", "DropboxFS", "DropboxClient", "CurlTransport", "MetadataCache",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The Dropbox emulator: serves a local directory as the Dropbox API v2 subset.
        .target(
            name: "DropboxEmulator",
            dependencies: [
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
        .testTarget(name: "DropboxFSTests", dependencies: ["DropboxFS", "DropboxClient"]),
        .testTarget(name: "DropboxClientTests", dependencies: ["DropboxClient", "CurlTransport", "DropboxEmulator"]),
        .testTarget(name: "DropboxEmulatorTests", dependencies: ["DropboxEmulator"]),
        .testTarget(name: "MetadataCacheTests", dependencies: ["MetadataCache", "DropboxFS", "CSQLite"]),
    ]
)
