import Logging
import Synchronization

/// A logger that keeps every line, so a test can count lines, read their metadata, and check that
/// no secret appears in them.
public final class LogRecorder: Sendable {
    public struct Line: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]

        /// Level, message and metadata (sorted by key) on one line, for searching.
        public var text: String {
            ([level.rawValue, message] + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })
                .joined(separator: " ")
        }
    }

    private let recorded = Mutex<[Line]>([])

    public init() {}

    public var lines: [Line] { recorded.withLock { $0 } }

    /// The lines at `level` or above.
    public func at(_ level: Logger.Level) -> [Line] { lines.filter { $0.level >= level } }

    /// A logger into this recorder that passes lines at `level` and above.
    public func logger(level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: "test") { _ in Handler(recorder: self) }
        logger.logLevel = level
        return logger
    }

    struct Handler: LogHandler {
        let recorder: LogRecorder
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var flat: [String: String] = [:]
            for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) { flat[key] = "\(value)" }
            let line = Line(level: event.level, message: "\(event.message)", metadata: flat)
            recorder.recorded.withLock { $0.append(line) }
        }
    }
}
