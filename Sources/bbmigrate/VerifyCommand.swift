import ArgumentParser
import Foundation
import Migrator
import Postgres

/// `bbmigrate verify`: checksums, pending files and live schema drift.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check that applied files are unchanged, nothing is pending, and the live schema is what the migrations produce.",
        discussion: """
            Takes the migration lock first, so a verify during an up waits for it (exit 4 after --lock-timeout). \
            The schema is compared with a scratch database built from the applied migrations (dropped afterwards, \
            or by a later verify if this one is killed), or with --schema-file. Objects that belong to \
            extensions and other sessions' temporary tables are never drift. Exit 1 on any problem; exit 7 when \
            everything else passed but the schema could not be compared (no CREATEDB and no --scratch-url or \
            --schema-file).
            """)

    @OptionGroup var target: TargetOptions
    @Flag(name: .customLong("allow-pending"), help: "Do not fail because files are pending or out of order.") var allowPending = false
    @Option(name: .customLong("scratch-url"), help: "Server (URL or conninfo) on which to build the scratch database; default: the target's server.")
    var scratchURL: String?
    @Option(name: .customLong("schema-file"), help: "Compare with this file (written by bbmigrate dump) instead of a scratch database.")
    var schemaFile: String?
    @OptionGroup var ignore: IgnoreOptions

    struct Output: Encodable {
        var ok: Bool
        var exitCode: Int32
        var checksumsMatch: Bool
        var upToDate: Bool
        var schema: VerificationReport.SchemaCheck
        var comparedWith: String?
        var schemaSkippedReason: String?
        var problems: [String]
    }

    func run() async throws {
        var code = MigrationExitCode.ok
        try await target.run {
            let migrator = try await target.migrator()
            let report = try await migrator.verify(VerifyOptions(
                allowPending: allowPending, scratch: scratchURL.map { PostgresConfiguration($0) },
                schemaFile: schemaFile.map { URL(fileURLWithPath: $0) }, ignore: ignore.value))
            code = report.exitCode
            if target.json {
                printJSON(Output(
                    ok: report.passed, exitCode: report.exitCode.rawValue, checksumsMatch: report.checksumsMatch, upToDate: report.upToDate,
                    schema: report.schema, comparedWith: report.comparedWith, schemaSkippedReason: report.schemaSkippedReason, problems: report.problems))
                return
            }
            print("checksums: \(report.checksumsMatch ? "ok" : "FAILED")")
            print("pending:   \(report.upToDate ? "ok" : "FAILED")")
            switch report.schema {
            case .matches: print("schema:    ok (matches \(report.comparedWith ?? "the migrations"))")
            case .drift: print("schema:    FAILED (differs from \(report.comparedWith ?? "the migrations"))")
            case .skipped: print("schema:    NOT CHECKED: \(report.schemaSkippedReason ?? "")")
            }
            for problem in report.problems { print("  " + problem) }
            switch report.exitCode {
            case .ok: print("bbmigrate: verify passed")
            case .verifyIncomplete: print("bbmigrate: verify INCOMPLETE: the schema was not compared (exit 7)")
            default: print("bbmigrate: verify FAILED: \(report.problems.count) problem(s)")
            }
        }
        if code != .ok { throw ExitCode(code.rawValue) }
    }
}

/// `--ignore-schema` and `--ignore-extension`, repeatable or comma-separated.
struct IgnoreOptions: ParsableArguments {
    @Option(name: .customLong("ignore-schema"), help: "A schema to leave out of the comparison (repeat, or separate with commas).")
    var schemas: [String] = []
    @Option(name: .customLong("ignore-extension"), help: "An extension to leave out (its objects are always left out; this also hides the extension itself).")
    var extensions: [String] = []

    var value: SchemaSnapshot.Ignore {
        func split(_ list: [String]) -> [String] {
            list.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        return SchemaSnapshot.Ignore(schemas: split(schemas), extensions: split(extensions))
    }
}
