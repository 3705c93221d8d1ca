import ArgumentParser
import Foundation

/// `bbmigrate`: applies and verifies Baby Basics' SQL migrations.
@main
struct BBMigrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bbmigrate",
        abstract: "Apply and verify the Baby Basics database migrations.",
        discussion: """
            Which database, first match wins: --url, DATABASE_URL, libpq's PG* variables (when PGHOST, \
            PGDATABASE or PGSERVICE is set), else the embedded PostgreSQL in .bbdata/ (started on demand).

            Exit codes: 0 ok · 1 verification failed (checksum, drift, pending) · 2 usage or configuration \
            error · 3 cannot connect · 4 lock timeout · 5 a migration failed.
            Results go to stdout (--json for machines), progress and errors to stderr.
            """,
        subcommands: [UpCommand.self, StatusCommand.self, VerifyCommand.self, NewCommand.self,
                      BaselineCommand.self, RepairCommand.self, EmbeddedCommand.self]
    )

    /// Parses, runs, and maps ArgumentParser's usage exit code (64) to ours (2).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .success || code.rawValue == ExitStatus.ok.rawValue {
                exit(withError: error)
            }
            if code.rawValue == 64 || code == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(ExitStatus.usage.rawValue)
            }
            exit(withError: error)
        }
    }
}

/// Exit codes, documented in the README; CI relies on them.
enum ExitStatus: Int32 {
    case ok = 0
    case verificationFailed = 1
    case usage = 2
    case cannotConnect = 3
    case lockTimeout = 4
    case migrationFailed = 5
}
