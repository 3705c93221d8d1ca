import EmbeddedPostgres
public import Logging
import Synchronization

/// Collects log records in memory, for tests that check what a library logs (and what it
/// must never log).
///
/// ```swift
/// let capture = LogCapture()
/// var configuration = PostgresConfiguration(url)
/// configuration.logger = capture.logger(level: .trace)
/// // … run queries …
/// #expect(capture.records.contains { $0.message == "connected" })
/// ```
public final class LogCapture: Sendable {
    /// One log call: its level, message and metadata (the logger's and the call's).
    public struct Record: Sendable, CustomStringConvertible {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]
        public var label: String

        /// The record as one line: label, level, message and every metadata value.
        public var description: String {
            "\(label) \(level) \(message) " + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
    }

    private let stored = Mutex<[Record]>([])

    public init() {}

    /// Everything logged so far, oldest first.
    public var records: [Record] { stored.withLock { $0 } }

    /// Forgets what was logged so far.
    public func clear() { stored.withLock { $0.removeAll() } }

    /// A logger whose records land here.
    public func logger(label: String = "postgres", level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: label) { label in Handler(label: label, capture: self) }
        logger.logLevel = level
        return logger
    }

    fileprivate func append(_ record: Record) { stored.withLock { $0.append(record) } }

    private struct Handler: LogHandler {
        let label: String
        let capture: LogCapture
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            capture.append(Record(
                level: event.level, message: "\(event.message)",
                metadata: merged.mapValues { "\($0)" }, label: label))
        }
    }
}
