import ArgumentParser
import Foundation
import Migrator
import Postgres

/// `bbmigrate verify`: checksums, pending files and live schema drift.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check that applied files are unchanged, nothing is pending, and the live schema matches what the migrations produce.",
        discussion: "The migrations are applied into a temporary scratch database (dropped afterwards) and both catalogs are compared. Exit 1 on any difference.")

    @OptionGroup var target: TargetOptions
    @Flag(name: .customLong("allow-pending"), help: "Do not fail because files are pending or out of order.") var allowPending = false
    @Option(name: .customLong("scratch-url"), help: "Server (URL or conninfo) on which to build the scratch database; default: the target's server.")
    var scratchURL: String?

    struct Output: Encodable {
        var ok: Bool
        var checksumsMatch: Bool
        var upToDate: Bool
        var schemaMatches: Bool
        var problems: [String]
    }

    func run() async throws {
        var passed = true
        try await target.run {
            let migrator = try await target.migrator()
            let report = try await migrator.verify(allowPending: allowPending, scratch: scratchURL.map { PostgresConfiguration($0) })
            passed = report.passed
            if target.json {
                printJSON(Output(ok: report.passed, checksumsMatch: report.checksumsMatch, upToDate: report.upToDate, schemaMatches: report.schemaMatches, problems: report.problems))
                return
            }
            print("checksums: \(report.checksumsMatch ? "ok" : "FAILED")")
            print("pending:   \(report.upToDate ? "ok" : "FAILED")")
            print("schema:    \(report.schemaMatches ? "ok (matches the migrations)" : "FAILED (drift)")")
            for problem in report.problems { print("  " + problem) }
            print(report.passed ? "bbmigrate: verify passed" : "bbmigrate: verify FAILED: \(report.problems.count) problem(s)")
        }
        if !passed { throw ExitCode(ExitStatus.verificationFailed.rawValue) }
    }
}
