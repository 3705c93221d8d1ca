import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate status`: where each version stands.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show each version: applied (when, by whom, how long), pending, changed, file missing, or out of order.")

    @OptionGroup var target: TargetOptions
    @Flag(name: .customLong("exit-code"), help: "Exit 1 when anything is pending, changed, missing or out of order (for CI).")
    var exitCode = false

    struct Output: Encodable {
        var ok = true
        /// Something is pending, changed, missing or out of order.
        var needsAttention: Bool
        var migrations: [MigrationEntry]
    }

    func run() async throws {
        var needsAttention = false
        try await target.run {
            let entries = try await target.migrator().status()
            needsAttention = entries.contains { $0.state != .applied }
            if target.json {
                printJSON(Output(needsAttention: needsAttention, migrations: entries))
            } else {
                entries.forEach { print($0.summary) }
                let counts = Dictionary(grouping: entries, by: \.state).mapValues(\.count)
                let parts: [(MigrationState, String)] = [(.applied, "applied"), (.pending, "pending"), (.changed, "changed"), (.missing, "missing"), (.outOfOrder, "out of order")]
                print("bbmigrate: " + parts.compactMap { state, label in counts[state].map { "\($0) \(label)" } }.joined(separator: ", ") + (entries.isEmpty ? "no migrations" : ""))
            }
        }
        if exitCode && needsAttention { throw ExitCode(MigrationExitCode.verificationFailed.rawValue) }
    }
}
