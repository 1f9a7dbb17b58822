import ArgumentParser
import Foundation
import MountRuntime

#if canImport(Glibc)
import Glibc
#endif

/// `dbx-mount pin PATH...` and `dbx-mount unpin PATH...`: ask the mount that holds each folder,
/// through its control socket, to keep it whole in its block cache (available offline), or to stop.
struct PinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Keep folders of a mount available offline (whole in its block cache, refreshed as they change).",
        discussion: """
            Each PATH is a folder under a dbx-mount mount point. The mount fetches its files in the \
            background; 'dbx-mount status' shows how far. Pins last across remounts. Needs a mount \
            with --block-cache-dir whose --block-cache-size holds the folder.
            """)

    @Argument(help: "Folders under a dbx-mount mount point.")
    var paths: [String]

    func run() throws { try PinRequest.send("pin", paths: paths) }
}

struct UnpinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unpin",
        abstract: "Stop keeping folders available offline (their blocks become ordinary cache).")

    @Argument(help: "Pinned folders under a dbx-mount mount point.")
    var paths: [String]

    func run() throws { try PinRequest.send("unpin", paths: paths) }
}

enum PinRequest {
    /// Seconds `pin` and `unpin` wait for the mount's answer.
    static let answerWait: Double = 60

    /// Sends `command` for each path to the mount that holds it; one line per failure, exit 1 if any.
    static func send(_ command: String, paths: [String]) throws {
        let directories = ControlSocket.directories()
        var failed = false
        for path in paths {
            do throws(ControlSocket.Failure) {
                let (socket, inside) = try locate(path, directories: directories)
                // The mount answers a pin once it knows the folder's size: right after mounting that
                // waits for the first listing (up to 15 s), and a shared link's folder is listed
                // first. Giving up sooner would report a failure for a pin the mount then applies.
                let answer = try ControlSocket.request(["command": command, "path": inside], at: socket,
                                                       timeout: answerWait)
                guard answer["ok"] as? Bool == true else {
                    throw ControlSocket.Failure(description: answer["error"] as? String ?? "the mount refused")
                }
                if let pin = answer["pin"] as? [String: Any], let total = pin["bytes_total"] as? Int {
                    print("\(path): pinned, \(total >> 20) MiB in \(pin["files"] as? Int ?? 0) files; see dbx-mount status")
                }
            } catch {
                FileHandle.standardError.write(Data("dbx-mount \(command): \(error.description)\n".utf8))
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }

    /// The control socket of the mount holding `path`, and the path inside that mount: the nearest
    /// ancestor of `path` (itself included) that a mount of this user answers for.
    static func locate(_ path: String, directories: [String]) throws(ControlSocket.Failure) -> (socket: String, inside: String) {
        let absolute = try resolved(path)
        var candidate = absolute
        while true {
            if let socket = ControlSocket.existingPath(forMountpoint: candidate, in: directories) {
                let inside = String(absolute.dropFirst(candidate == "/" ? 0 : candidate.count))
                return (socket, inside.isEmpty ? "/" : inside)
            }
            guard candidate != "/", let slash = candidate.lastIndex(of: "/") else { break }
            candidate = slash == candidate.startIndex ? "/" : String(candidate[..<slash])
        }
        throw ControlSocket.Failure(description: "\(absolute) is not under a dbx-mount mount point of this user")
    }

    /// `path` made absolute with its symlinks resolved, as far as it exists: a folder pinned and
    /// then removed or renamed on Dropbox must still be unpinned by its name (and a pin of a
    /// missing folder gets the mount's own "no such folder").
    static func resolved(_ path: String) throws(ControlSocket.Failure) -> String {
        var existing = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var missing: [Substring] = []
        while true {
            if let real = realpath(existing, nil) {
                defer { free(real) }
                let base = String(cString: real)
                return missing.isEmpty ? base : (base == "/" ? "" : base) + "/" + missing.reversed().joined(separator: "/")
            }
            let failure = errno
            guard failure == ENOENT, let slash = existing.lastIndex(of: "/"), existing != "/" else {
                throw ControlSocket.Failure(description: "\(path): \(String(cString: strerror(failure)))")
            }
            let leaf = existing[existing.index(after: slash)...]
            if !leaf.isEmpty && leaf != "." { missing.append(leaf) }
            existing = slash == existing.startIndex ? "/" : String(existing[..<slash])
        }
    }
}
