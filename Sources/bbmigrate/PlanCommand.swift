import ArgumentParser
import Foundation
import Migrator
import Postgres

/// `bbmigrate plan`: the locks, rewrites and scans the pending files will cause, measured.
struct PlanCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plan",
        abstract: "Say which locks, rewrites and scans the pending files will cause, on tables of which size, and the safer way to write each.",
        discussion: """
            Each pending statement runs in a scratch database built from the applied migrations (on the \
            target's server, or on --scratch-url; a statement that changes the whole server, such as ALTER ROLE \
            or DROP DATABASE, needs --scratch-url), where its locks are read from pg_locks, a rewrite is a table \
            that got a new file, and a scan is a sequential scan PostgreSQL counted. Table sizes come from the \
            target's catalog (reltuples, relpages). The target itself is only read: nothing is changed or \
            locked there, and a transaction pooler is refused as up refuses it.

            --app-statements app.sql prepares the app's statements before and after the pending files: one \
            that worked before and fails after (a dropped column it still reads) is a breaks-app finding.

            For CI: --fail-on rewrite,scan,blocks-writes,breaks-app exits 8 when a pending statement rewrites a table, \
            scans it to validate while writes wait, or blocks writes while doing work proportional to its size, \
            on a table of at least --large-table-rows rows (100000). A brief change of the catalog under a \
            strong lock is reported, with advice, but does not fail. Other exit codes are up's.
            """)

    @OptionGroup var target: TargetOptions
    @Option(name: .customLong("to"), help: "Plan the pending files up to this version.") var version: Int?
    @Option(name: .customLong("scratch-url"), help: "Server (URL or conninfo) on which to build the scratch database; default: the target's server.")
    var scratchURL: String?
    @Option(name: .customLong("fail-on"), help: "Exit 8 on any of: rewrite, scan, blocks-writes, breaks-app (repeat, or separate with commas).")
    var failOn: [String] = []
    @Option(name: .customLong("large-table-rows"), help: "The size from which a table counts for --fail-on, in rows.")
    var largeTableRows: Int64 = 100_000
    @Option(name: .customLong("app-statements"), help: "A file of the app's SQL statements ($1 parameters allowed): each one the pending files break is a finding (breaks-app).")
    var appStatements: String?
    @Flag(name: .customLong("allow-out-of-order"), help: "Plan pending files older than the newest applied one too.") var allowOutOfOrder = false

    struct Output: Encodable {
        var ok: Bool
        var exitCode: Int32
        var target: String
        var largeTableRows: Int64
        var failOn: [DeployPlan.Risk]
        var statements: [DeployPlan.Statement]
        var appStatementsChecked: Int
        var appStatements: [DeployPlan.AppStatement]
        var findings: [DeployPlan.Finding]
    }

    func run() async throws {
        var code = MigrationExitCode.ok
        try await target.run {
            let risks = try parseRisks()
            guard largeTableRows >= 0 else {
                throw MigratorError.configuration("--large-table-rows must be 0 or more", fix: "pass a number of rows, for example --large-table-rows 100000")
            }
            let migrator = try await target.migrator(allowOutOfOrder: allowOutOfOrder)
            let plan = try await migrator.plan(to: version, scratch: scratchURL.map { PostgresConfiguration($0) },
                                               appStatements: appStatements.map { URL(fileURLWithPath: $0) })
            let findings = plan.findings(largeTableRows: largeTableRows)
            let failing = findings.filter { risks.contains($0.risk) }
            code = failing.isEmpty ? .ok : .planFoundRisk
            if target.json {
                printJSON(Output(ok: failing.isEmpty, exitCode: code.rawValue, target: plan.target, largeTableRows: largeTableRows,
                                 failOn: risks, statements: plan.statements, appStatementsChecked: plan.appStatementsChecked,
                                 appStatements: plan.appStatements, findings: findings))
                return
            }
            print(plan.text(largeTableRows: largeTableRows))
            if !failing.isEmpty {
                print("bbmigrate plan: FAILED: \(failing.count) finding(s) of the kinds --fail-on names (\(risks.map(\.rawValue).joined(separator: ", "))); exit 8")
            }
        }
        if code != .ok { throw ExitCode(code.rawValue) }
    }

    private func parseRisks() throws -> [DeployPlan.Risk] {
        let names = failOn.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
        return try names.map { name in
            guard let risk = DeployPlan.Risk(rawValue: name) else {
                throw MigratorError.configuration("--fail-on \(name): not one of \(DeployPlan.Risk.allCases.map(\.rawValue).joined(separator: ", "))",
                                                  fix: "pass --fail-on rewrite,scan,blocks-writes,breaks-app (any of them)")
            }
            return risk
        }
    }
}
