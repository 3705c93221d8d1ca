import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate`: applies and verifies Baby Basics' SQL migrations.
@main
struct BBMigrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bbmigrate",
        abstract: "Apply and verify the Baby Basics database migrations.",
        discussion: """
            Which database, first match wins: --url, DATABASE_URL, libpq's PG* variables (when PGHOST, \
            PGDATABASE or PGSERVICE is set), else the embedded PostgreSQL in .bbdata/ (started on demand). \
            A --url or DATABASE_URL that is set but empty is an error (exit 2), never a fall-back.

            Exit codes:
            \(MigrationExitCode.allCases.map { "  \($0.rawValue)  \($0.meaning)" }.joined(separator: "\n"))

            Results go to stdout (--json for machines, on success and failure alike), progress and errors to stderr.
            """,
        subcommands: [UpCommand.self, PlanCommand.self, StatusCommand.self, VerifyCommand.self, DumpCommand.self, NewCommand.self,
                      BaselineCommand.self, RepairCommand.self, EmbeddedCommand.self]
    )

    /// Parses, runs, and maps ArgumentParser's usage exit code (64) to ours (2).
    static func main() async {
        CommandLogging.bootstrapped
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                exit(withError: error)
            }
            if code.rawValue == 64 || code == .validationFailure {
                let message = fullMessage(for: error)
                FileHandle.standardError.write(Data((message + "\n").utf8))
                if CommandLine.arguments.contains("--json") {
                    printJSON(FailureOutput(exitCode: MigrationExitCode.usage.rawValue, error: message, fix: "see bbmigrate help"))
                }
                Foundation.exit(MigrationExitCode.usage.rawValue)
            }
            exit(withError: error)
        }
    }
}
