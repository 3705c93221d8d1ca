import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate up`: apply pending migrations.
struct UpCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "up",
        abstract: "Apply pending migrations in version order, each in its own transaction with its history row.",
        discussion: "A failed file leaves the database exactly as before that file (exit 5). Runs are serialized by an advisory lock (exit 4 on --lock-timeout).")

    @OptionGroup var target: TargetOptions
    @Option(name: .customLong("to"), help: "Stop after this version.") var version: Int?
    @Flag(name: .customLong("dry-run"), help: "Show what would be applied; change nothing.") var dryRun = false
    @Flag(name: .customLong("allow-out-of-order"), help: "Apply pending files older than the newest applied one.") var allowOutOfOrder = false

    struct Output: Encodable {
        var ok = true
        var dryRun: Bool
        var applied: [AppliedMigration]
        var durationMs: Int
        var newestVersion: Int?
    }

    func run() async throws {
        try await target.run {
            let migrator = try await target.migrator(allowOutOfOrder: allowOutOfOrder)
            let clock = ContinuousClock()
            let started = clock.now
            let json = target.json
            let dryRun = self.dryRun
            let applied = try await migrator.up(to: version, dryRun: dryRun) { migration in
                guard !json else { return }
                print(dryRun ? "would apply \(migration.id)" : "applied \(migration.id) (\(migration.durationMs) ms)")
            }
            let elapsed = milliseconds(clock.now - started)
            let newest = try await migrator.status().filter { $0.state == .applied }.map(\.version).max()
            if json {
                printJSON(Output(dryRun: dryRun, applied: applied, durationMs: elapsed, newestVersion: newest))
                return
            }
            let at = newest.map { "database at version \(MigrationFile.format($0))" } ?? "no migration applied yet"
            if dryRun {
                print("bbmigrate: dry run: \(applied.count) migration(s) would be applied; nothing was changed; \(at)")
            } else if applied.isEmpty {
                print("bbmigrate: nothing to apply; \(at)")
            } else {
                print("bbmigrate: applied \(applied.count) migration(s) in \(elapsed) ms; \(at)")
            }
        }
    }
}
