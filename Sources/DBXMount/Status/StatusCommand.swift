import ArgumentParser
import Foundation
import MountRuntime

#if canImport(Glibc)
import Glibc
#endif

/// `dbx-mount status [MOUNTPOINT]`: asks a running mount, through its control socket, how it
/// stands (docs/CONTROL.md); with no mount point, every mount of this user.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show how running mounts stand: first listing, change feed, cache, reads, Dropbox calls.",
        discussion: """
            Asks each mount through its control socket in $XDG_RUNTIME_DIR/dbx-mount, \
            /run/user/UID/dbx-mount or /tmp/dbx-mount-UID (wherever the mount put it), which only \
            the mounting user can open. Exit status: 0 when every mount asked answered, 1 otherwise \
            (a path that is not a dbx-mount, or no mount at all; with --json, stdout then holds \
            no object, or [] when no mount point was named).
            """)

    @Argument(help: "A dbx-mount mount point (default: all of this user's mounts).")
    var mountpoint: String?

    @Flag(help: "Print the status as JSON (one object per mount, in an array when no mount point is named).")
    var json = false

    @Flag(help: "Redraw every half second until every first listing is done (on a terminal only).")
    var watch = false

    func run() throws {
        let directories = ControlSocket.directories()
        let sockets: [(path: String, named: String?)]
        if let mountpoint {
            guard let resolved = realpath(mountpoint, nil) else {
                fail("\(mountpoint): \(String(cString: strerror(errno)))")
            }
            let absolute = String(cString: resolved)
            free(resolved)
            guard let path = ControlSocket.existingPath(forMountpoint: absolute, in: directories) else {
                fail(notAMount(absolute, socket: nil))
            }
            sockets = [(path, absolute)]
        } else {
            sockets = directories.flatMap { ControlSocket.all(in: $0) }.map { ($0, nil) }
        }
        let interactive = watch && !json && isatty(STDOUT_FILENO) == 1
        var drawnLines = 0
        while true {
            var statuses: [MountStatus] = []
            var problems: [String] = []
            for socket in sockets {
                do throws(ControlSocket.Failure) {
                    statuses.append(try Self.status(at: socket.path))
                } catch where error.stale && socket.named == nil {
                    unlink(socket.path)   // a mount that was killed left it; nobody will answer
                } catch {
                    problems.append(socket.named.map { notAMount($0, socket: socket.path) } ?? error.description)
                }
            }
            if mountpoint == nil && statuses.isEmpty && problems.isEmpty {
                if json { FileHandle.standardOutput.write(Data("[]\n".utf8)) }
                fail("no dbx-mount is mounted by this user (no control socket answers in \(directories.joined(separator: " or ")))")
            }
            if json {
                // One object for a named mount, an array for all; a named mount that did not answer
                // leaves stdout empty (the reason goes to stderr), so a JSON reader is never handed
                // a blank line.
                let objects = statuses.map { $0.json(pretty: false) }
                if mountpoint == nil {
                    FileHandle.standardOutput.write(Data(("[" + objects.joined(separator: ",") + "]\n").utf8))
                } else if let object = objects.first {
                    FileHandle.standardOutput.write(Data((object + "\n").utf8))
                }
            } else {
                let text = statuses.map { StatusView(status: $0, now: Date()).render() }.joined(separator: "\n")
                // Back over the last drawing and clear it: the block redraws in place.
                let redraw = interactive && drawnLines > 0 ? "\u{1B}[\(drawnLines)A\u{1B}[J" : ""
                FileHandle.standardOutput.write(Data((redraw + text + "\n").utf8))
                drawnLines = text.split(separator: "\n", omittingEmptySubsequences: false).count
            }
            for problem in problems { FileHandle.standardError.write(Data("dbx-mount status: \(problem)\n".utf8)) }
            let listing = statuses.contains { $0.firstListing.map { !$0.done } ?? false }
            guard interactive, listing, problems.isEmpty else {
                if !problems.isEmpty { throw ExitCode(1) }
                return
            }
            Thread.sleep(forTimeInterval: 0.5)
        }
    }

    static func status(at path: String) throws(ControlSocket.Failure) -> MountStatus {
        let answer = try ControlSocket.request(["command": "status"], at: path)
        guard answer["ok"] as? Bool == true, let object = answer["status"], let status = MountStatus(jsonObject: object) else {
            throw ControlSocket.Failure(description: "\(path) answered: \(answer["error"] as? String ?? "something that is not a status")")
        }
        return status
    }

    private func notAMount(_ path: String, socket: String?) -> String {
        if Self.isDbxMount(path) {
            guard let socket else {
                return "\(path) is a dbx-mount, but no control socket of this user's is there for it (mounted by another user?)"
            }
            return "\(path) is a dbx-mount, but its control socket \(socket) does not answer (mounted by another user, or hung?)"
        }
        return "\(path) is not a dbx-mount mount point"
    }

    /// Whether /proc/mounts lists `path` as a dbx-mount (type fuse.dbx-mount).
    static func isDbxMount(_ path: String) -> Bool {
        guard let mounts = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) else { return false }
        return mounts.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 2 && fields[1] == path && fields[2] == "fuse.dbx-mount"
        }
    }

    private func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("dbx-mount status: \(message)\n".utf8))
        Foundation.exit(1)
    }
}
