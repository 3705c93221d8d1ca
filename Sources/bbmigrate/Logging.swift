import Foundation
import Logging

/// bbmigrate's log lines on stderr: `bbmigrate: applying 0003_events.sql…`, and at `debug`
/// each statement the connections run (`postgres: statement db.query.text=… duration_ms=…`).
/// Results stay on stdout, so `--json` output is never mixed with logs.
struct StderrLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var line = "\(label): \(event.message)"
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        // Metadata only where it says something: at debug and below, or on a warning.
        if !merged.isEmpty, logLevel <= .debug || event.level >= .warning {
            line += " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\(Self.oneLine("\($0.value)"))" }.joined(separator: " ")
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// A multi-line value (SQL text) on one line: a record is one line of stderr.
    static func oneLine(_ text: String) -> String {
        text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }
}

enum CommandLogging {
    /// Sends every `Logger` of the process to stderr through `StderrLogHandler`, before any
    /// command runs: stdout carries only results (a URL, `--json`). bbmigrate's own progress
    /// starts at `info`; every other logger (the connections, those the embedded cluster opens
    /// included) at `warning`, so a run does not print each connection it opens.
    static let bootstrapped: Void = LoggingSystem.bootstrap { label in
        StderrLogHandler(label: label, logLevel: label == "bbmigrate" ? .info : .warning)
    }

    /// The migrator's logger and the connections' logger for `level`: progress at `info` by
    /// default; the connections' own records (each statement at `debug`, slow ones at
    /// `warning`) only when `--log-level` or `BB_LOG_LEVEL` asks for them.
    static func loggers(level requested: String?) throws -> (migrator: Logger, connections: Logger) {
        _ = bootstrapped
        let text = requested ?? ProcessInfo.processInfo.environment["BB_LOG_LEVEL"]
        var level = Logger.Level.info
        if let text, !text.isEmpty {
            guard let parsed = Logger.Level(rawValue: text.lowercased()) else {
                throw LogLevelError(text: text)
            }
            level = parsed
        }
        var migrator = Logger(label: "bbmigrate")
        migrator.logLevel = level
        var connections = Logger(label: "postgres")
        connections.logLevel = text == nil || text?.isEmpty == true ? .warning : level
        return (migrator, connections)
    }
}

struct LogLevelError: Error, CustomStringConvertible {
    let text: String
    var description: String {
        "unknown log level \"\(text)\": use trace, debug, info, notice, warning, error or critical (--log-level or BB_LOG_LEVEL)"
    }
}
