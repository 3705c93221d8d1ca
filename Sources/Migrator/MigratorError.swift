import Foundation
import Postgres

/// A failure of the migration engine, with the exit code the CLI uses.
///
/// | code | meaning |
/// | --- | --- |
/// | 1 | verification failed (checksum, drift, pending, out of order) |
/// | 2 | usage or configuration error |
/// | 3 | cannot connect |
/// | 4 | lock timeout |
/// | 5 | a migration failed |
///
/// ```swift
/// do { try await migrator.up() } catch let error as MigratorError { exit(error.exitCode) }
/// ```
public enum MigratorError: Error, Sendable, CustomStringConvertible {
    case verification(String, fix: String?)
    case configuration(String, fix: String?)
    case connection(String, fix: String?)
    case lockTimeout(String, fix: String?)
    case migrationFailed(String, fix: String?)

    public var exitCode: Int32 {
        switch self {
        case .verification: 1
        case .configuration: 2
        case .connection: 3
        case .lockTimeout: 4
        case .migrationFailed: 5
        }
    }

    public var message: String {
        switch self {
        case .verification(let message, _), .configuration(let message, _), .connection(let message, _),
             .lockTimeout(let message, _), .migrationFailed(let message, _):
            message
        }
    }

    public var fix: String? {
        switch self {
        case .verification(_, let fix), .configuration(_, let fix), .connection(_, let fix),
             .lockTimeout(_, let fix), .migrationFailed(_, let fix):
            fix
        }
    }

    public var description: String {
        message + (fix.map { "\nWhat to do: \($0)" } ?? "")
    }

    /// Maps a connection-level `PostgresError` to exit code 3; anything else stays as is.
    static func wrapConnection(_ error: any Error, target: String) -> any Error {
        if let error = error as? PostgresError, error.kind == .connectionFailure || error.kind == .invalidConfiguration {
            let message = "cannot connect to \(target): \(error.message)"
            let fix = "check --url / DATABASE_URL / PG* variables, and that the server is running"
            if error.kind == .invalidConfiguration { return MigratorError.configuration(message, fix: fix) }
            return MigratorError.connection(message, fix: fix)
        }
        return error
    }
}
