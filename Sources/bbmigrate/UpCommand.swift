import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate up`: apply pending migrations.
struct UpCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "up",
        abstract: "Apply pending migrations in version order, each in its own transaction with its history row.",
        discussion: """
            Exit 0 means every pending file ran as written and is recorded. A failed file leaves the database \
            as it was before that file (exit 5; files before it stay applied and are listed). A \
            -- bbmigrate:no-transaction file that stops partway exits 6; run up again to resume. Runs are \
            serialized by an advisory lock (exit 4 after --lock-timeout). --dry-run prints the exact SQL, \
            statement by statement with file and line, and changes nothing.
            """)

    @OptionGroup var target: TargetOptions
    @Option(name: .customLong("to"), help: "Stop after this version.") var version: Int?
    @Flag(name: .customLong("dry-run"), help: "Print the SQL that would run, with file and line; change nothing.") var dryRun = false
    @Flag(name: .customLong("allow-out-of-order"), help: "Apply pending files older than the newest applied one.") var allowOutOfOrder = false

    struct Output: Encodable {
        var ok = true
        var dryRun = false
        var applied: [AppliedMigration]
        var durationMs: Int
        var newestVersion: Int?
    }

    struct DryRunOutput: Encodable {
        struct File: Encodable {
            var version: Int
            var file: String
            var inTransaction: Bool
            var statements: [Statement]
        }
        struct Statement: Encodable {
            var line: Int
            var sql: String
        }
        var ok = true
        var dryRun = true
        var files: [File]
        var sql: String
    }

    func run() async throws {
        let log = AppliedLog()
        try await target.run(extra: { log.all }) {
            let migrator = try await target.migrator(allowOutOfOrder: allowOutOfOrder)
            if dryRun { return try await printDryRun(migrator) }
            let clock = ContinuousClock()
            let started = clock.now
            let json = target.json
            let applied = try await migrator.up(to: version) { migration in
                log.append(migration)
                if !json { print("applied \(migration.id) (\(migration.durationMs) ms)") }
            }
            let elapsed = milliseconds(clock.now - started)
            let newest = try await migrator.status().filter { $0.state == .applied }.map(\.version).max()
            if json {
                printJSON(Output(applied: applied, durationMs: elapsed, newestVersion: newest))
                return
            }
            let at = newest.map { "database at version \(MigrationFile.format($0))" } ?? "no migration applied yet"
            print(applied.isEmpty ? "bbmigrate: nothing to apply; \(at)" : "bbmigrate: applied \(applied.count) migration(s) in \(elapsed) ms; \(at)")
        }
    }

    private func printDryRun(_ migrator: Migrator) async throws {
        let plan = try await migrator.dryRun(to: version)
        let scripts = plan.map { $0.script(ddlLockTimeout: migrator.options.ddlLockTimeout) }
        if target.json {
            printJSON(DryRunOutput(
                files: plan.map { planned in
                    .init(version: planned.file.version, file: planned.file.fileName, inTransaction: !planned.file.runsOutsideTransaction,
                          statements: planned.statements.map { .init(line: $0.line, sql: $0.text) })
                },
                sql: scripts.joined(separator: "\n\n")))
            return
        }
        scripts.forEach { print($0 + "\n") }
        print("-- bbmigrate: dry run: \(plan.count) migration(s) would be applied; nothing was changed")
    }
}
