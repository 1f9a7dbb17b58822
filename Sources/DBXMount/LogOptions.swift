// Where a mount's log lines go, and how many. In the foreground: stderr. Daemonized (stderr is
// /dev/null after the fork): the file named by --log-file, else syslog. The level is notice by
// default (failures, and what an administrator asked for: SIGHUP, SIGUSR1); -v adds info, -vv
// debug, -vvv trace; -q leaves errors only.

import ArgumentParser
import Foundation
import Glibc
import Logging

struct LogOptions: ParsableArguments {
    @Flag(name: .customShort("v"), help: "Log more: -v info, -vv debug, -vvv trace (default: notice).")
    var verbose: Int

    @Flag(name: .customShort("q"), help: "Log errors only.")
    var quiet = false

    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error or critical (default notice).",
                               valueName: "level"))
    var logLevel: String?

    @Option(help: ArgumentHelp("Append log lines to this file (default: stderr in the foreground, syslog when daemonized).",
                               valueName: "path"))
    var logFile: String?

    /// The level from --log-level (or -o log_level=), else -q, else -d, else -v's count.
    func level(_ list: MountOptionList, debug: Bool) throws(UsageError) -> Logger.Level {
        if let name = logLevel ?? list.settings["log_level"] {
            guard let level = Logger.Level(rawValue: name.lowercased()) else {
                throw UsageError("unknown log level '\(name)' (trace, debug, info, notice, warning, error, critical)")
            }
            return level
        }
        if quiet { return .error }
        if debug { return .debug }
        switch verbose {
        case 0: return .notice
        case 1: return .info
        case 2: return .debug
        default: return .trace
        }
    }

    /// Installs the process's log handler. Called once, before the daemonizing fork (the file is
    /// opened here, so a bad path fails the mount with a message instead of losing every line).
    func bootstrap(_ list: MountOptionList, foreground: Bool, debug: Bool) throws(UsageError) {
        let level = try level(list, debug: debug)
        let path = logFile ?? list.settings["log_file"]
        if foreground && path == nil {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        } else if let path {
            guard !path.isEmpty else { throw UsageError("--log-file needs a path") }
            let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640)
            guard fd >= 0 else {
                throw UsageError("cannot open log file \(path): \(String(cString: strerror(errno)))")
            }
            LoggingSystem.bootstrap { label in FileLogHandler(fd: fd, label: label, logLevel: level) }
        } else {
            openlog("dbx-mount", LOG_PID, LOG_DAEMON)
            LoggingSystem.bootstrap { label in SyslogLogHandler(logLevel: level) }
        }
    }
}

/// Renders one line: `key=value ... message`, metadata sorted, as StreamLogHandler does.
private func render(_ message: Logger.Message, _ metadata: Logger.Metadata) -> String {
    let fields = metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
    return (fields + ["\(message)"]).joined(separator: " ")
}

/// Appends timestamped lines to an open file. One `write` per line, and O_APPEND, so lines from
/// several threads never interleave.
struct FileLogHandler: LogHandler {
    let fd: Int32
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    init(fd: Int32, label: String, logLevel: Logger.Level) {
        self.fd = fd
        self.label = label
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?,
             source: String, file: String, function: String, line: UInt) {
        var time = Glibc.time(nil)
        var parts = tm()
        gmtime_r(&time, &parts)
        var stamp = [CChar](repeating: 0, count: 32)
        strftime(&stamp, stamp.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        let text = "\(String(cString: stamp)) \(level) dbx-mount[\(getpid())]: "
            + render(message, metadata.merging(explicit ?? [:]) { $1 }) + "\n"
        _ = text.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count - 1) }
    }
}

/// Sends lines to syslog(3) (the journal, under systemd), at the matching priority.
struct SyslogLogHandler: LogHandler {
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?,
             source: String, file: String, function: String, line: UInt) {
        let priority: Int32 = switch level {
        case .trace, .debug: LOG_DEBUG
        case .info: LOG_INFO
        case .notice: LOG_NOTICE
        case .warning: LOG_WARNING
        case .error: LOG_ERR
        case .critical: LOG_CRIT
        }
        let text = render(message, metadata.merging(explicit ?? [:]) { $1 })
        // syslog is variadic; vsyslog takes the arguments Swift can build. "%s" keeps a `%` in a
        // file name from being read as a format.
        text.withCString { line in withVaList([line]) { vsyslog(priority, "%s", $0) } }
    }
}
