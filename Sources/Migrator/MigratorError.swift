import Foundation
import Postgres

/// The exit codes of `bbmigrate`, in one place: the CLI exits with them, the README's table is
/// this one, and CI scripts may rely on them.
///
/// | code | meaning |
/// | --- | --- |
/// | 0 | ok: everything asked for was done (or verified) |
/// | 1 | verification failed: a changed, missing or out-of-order file, pending files at `verify`, or schema drift |
/// | 2 | usage or configuration: bad flags, an empty `DATABASE_URL`, a badly named, non-UTF-8 or unsplittable file, a guard refused a file, a non-empty database without history, a transaction pooler |
/// | 3 | cannot connect |
/// | 4 | lock: the migration lock was not free within `--lock-timeout` or was lost, or a statement hit `--ddl-lock-timeout`; nothing of the failing file was applied |
/// | 5 | a migration failed; nothing of the failing file was applied (files before it were) |
/// | 6 | partially applied: a `-- bbmigrate:no-transaction` file stopped after some of its statements ran; a rerun resumes |
/// | 7 | verify incomplete: checksums and pending files are fine, but the schema comparison could not run (the reason is printed) |
/// | 8 | `plan --fail-on` found what it was told to fail on (a rewrite, a scan, a lock that blocks writes) |
///
/// ```swift
/// exit(MigrationExitCode.lockTimeout.rawValue)
/// ```
public enum MigrationExitCode: Int32, Sendable, CaseIterable, Codable {
    case ok = 0
    case verificationFailed = 1
    case usage = 2
    case cannotConnect = 3
    case lockTimeout = 4
    case migrationFailed = 5
    case partiallyApplied = 6
    case verifyIncomplete = 7
    case planFoundRisk = 8

    /// One line for help texts and the README.
    public var meaning: String {
        switch self {
        case .ok: "ok"
        case .verificationFailed: "verification failed (changed, missing or out-of-order file; pending at verify; schema drift)"
        case .usage: "usage or configuration error (bad flag, empty DATABASE_URL, bad file, guard, transaction pooler)"
        case .cannotConnect: "cannot connect"
        case .lockTimeout: "migration lock not free in time or lost, or a statement waited too long for a table lock"
        case .migrationFailed: "a migration failed; nothing of that file was applied"
        case .partiallyApplied: "a no-transaction file stopped partway; run up again to resume"
        case .verifyIncomplete: "verify could not compare the schema (reason printed); the rest passed"
        case .planFoundRisk: "plan found what --fail-on names (a rewrite, a scan, or a lock that blocks writes, on a large table)"
        }
    }
}

/// A failure of the migration engine, with the exit code the CLI uses.
///
/// ```swift
/// do { try await migrator.up() } catch let error as MigratorError { exit(error.exitCode.rawValue) }
/// ```
public enum MigratorError: Error, Sendable, CustomStringConvertible {
    case verification(String, fix: String?)
    case configuration(String, fix: String?)
    case connection(String, fix: String?)
    case lockTimeout(String, fix: String?)
    case migrationFailed(String, fix: String?)
    case partiallyApplied(String, fix: String?)

    public var exitCode: MigrationExitCode {
        switch self {
        case .verification: .verificationFailed
        case .configuration: .usage
        case .connection: .cannotConnect
        case .lockTimeout: .lockTimeout
        case .migrationFailed: .migrationFailed
        case .partiallyApplied: .partiallyApplied
        }
    }

    public var message: String {
        switch self {
        case .verification(let message, _), .configuration(let message, _), .connection(let message, _),
             .lockTimeout(let message, _), .migrationFailed(let message, _), .partiallyApplied(let message, _):
            message
        }
    }

    public var fix: String? {
        switch self {
        case .verification(_, let fix), .configuration(_, let fix), .connection(_, let fix),
             .lockTimeout(_, let fix), .migrationFailed(_, let fix), .partiallyApplied(_, let fix):
            fix
        }
    }

    public var description: String {
        message + (fix.map { "\nWhat to do: \($0)" } ?? "")
    }

    /// Any error as a `MigratorError`: connection-level `PostgresError`s exit 3, other server
    /// errors 5, anything else 2.
    public static func classify(_ error: any Error, target: String = "the database") -> MigratorError {
        switch error {
        case let error as MigratorError: return error
        case let error as PostgresError where error.kind == .invalidConfiguration:
            return .configuration("cannot connect to \(target): \(error.message)", fix: "check --url / DATABASE_URL / PG* variables")
        case let error as PostgresError where error.kind == .connectionFailure || error.kind == .adminShutdown:
            return .connection("cannot reach \(target): \(error.message)", fix: "check --url / DATABASE_URL / PG* variables, and that the server is running; then run the command again")
        case let error as PostgresError: return .migrationFailed(error.description, fix: nil)
        default: return .configuration("\(error)", fix: nil)
        }
    }
}
