import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate baseline VERSION`.
struct BaselineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baseline",
        abstract: "Record versions up to VERSION as applied, without running them, for a database that already has that schema.")

    @OptionGroup var target: TargetOptions
    @Argument(help: "The newest version the database already contains.") var version: Int

    func run() async throws {
        try await target.run {
            let entries = try await target.migrator().baseline(version)
            let recorded = entries.filter { $0.baselined == true }
            if target.json {
                printJSON(StatusCommand.Output(needsAttention: entries.contains { $0.state != .applied }, migrations: entries))
            } else {
                recorded.forEach { print("baselined \($0.id)") }
                print("bbmigrate: recorded \(recorded.count) version(s) as applied without running them; run bbmigrate up for the rest")
            }
        }
    }
}

/// `bbmigrate repair VERSION --reason TEXT`.
struct RepairCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repair",
        abstract: "Accept the changed checksum of an applied file on purpose; the old and new checksums and the reason go to bbmigrate.repairs.")

    @OptionGroup var target: TargetOptions
    @Argument(help: "The applied version whose file changed.") var version: Int
    @Option(help: "Why the change is safe (kept in the audit table).") var reason: String

    struct Output: Encodable {
        var ok = true
        var version: Int
        var oldChecksum: String
        var newChecksum: String
        var reason: String
    }

    func run() async throws {
        try await target.run {
            let (old, new) = try await target.migrator().repair(version, reason: reason)
            if target.json {
                printJSON(Output(version: version, oldChecksum: old, newChecksum: new, reason: reason))
            } else if old == new {
                print("bbmigrate: \(MigrationFile.format(version)) already matches its file; nothing to repair")
            } else {
                print("bbmigrate: accepted the new checksum of \(MigrationFile.format(version)) (\(old.prefix(12))… → \(new.prefix(12))…), reason recorded")
            }
        }
    }
}
