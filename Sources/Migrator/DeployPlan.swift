import Foundation

/// What applying the pending migrations will do to the tables of a database: for each
/// statement, the locks it takes (and which of the app's statements each one blocks), the
/// tables it rewrites, scans or builds an index on, with their size in that database, and the
/// safer way to write it where there is one. `bbmigrate plan` prints it.
///
/// It is measured, not guessed from the text: every pending statement runs in a scratch
/// database built from the applied migrations, where its own locks are read from `pg_locks`,
/// a rewrite is a changed `relfilenode`, and a scan is a sequential scan counted in
/// `pg_stat_xact_user_tables`. The sizes come from the target's catalog (`reltuples`,
/// `relpages`); nothing in the target is changed or locked.
///
/// ```swift
/// let plan = try await migrator.plan()
/// for finding in plan.findings(largeTableRows: 100_000) { print(finding.risk, finding.table.name) }
/// ```
public struct DeployPlan: Sendable, Codable {
    /// A table's size in the target database (nil where it does not exist yet).
    public struct TableSize: Sendable, Codable, Equatable {
        /// `schema.table`, or `table` in `public`.
        public var name: String
        /// `reltuples` (or the live rows the statistics count when the table was never
        /// analyzed); nil for a table the pending migrations create.
        public var rows: Int64?
        /// `relpages` × the block size; nil when unknown.
        public var bytes: Int64?

        /// `events (2.6M rows, 1.1 GB)`, `events (new)`.
        public var description: String {
            guard let rows else { return "\(name) (new)" }
            var parts = ["\(Self.count(rows)) rows"]
            if let bytes, bytes > 0 { parts.append(Self.size(bytes)) }
            return "\(name) (\(parts.joined(separator: ", ")))"
        }

        static func count(_ rows: Int64) -> String {
            switch rows {
            case ..<10_000: "\(rows)"
            case ..<1_000_000: "\(Int((Double(rows) / 1000).rounded()))k"
            default: String(format: "%.1fM", Double(rows) / 1_000_000)
            }
        }

        static func size(_ bytes: Int64) -> String {
            let units = ["bytes", "kB", "MB", "GB", "TB"]
            var value = Double(bytes)
            var unit = 0
            while value >= 1024 && unit < units.count - 1 {
                value /= 1024
                unit += 1
            }
            return unit == 0 ? "\(bytes) bytes" : String(format: value < 10 ? "%.1f %@" : "%.0f %@", value, units[unit])
        }
    }

    /// A lock a statement takes on a table.
    public struct TableLock: Sendable, Codable, Equatable {
        public var table: TableSize
        /// `AccessExclusiveLock`, as `pg_locks` names it.
        public var mode: String
        /// The line of an earlier statement of the same file that took it (the file's
        /// transaction holds it until the file commits); nil when this statement took it.
        public var heldSinceLine: Int?

        /// What the app cannot do while it is held.
        public var blocks: LockEffect { LockEffect(mode: mode) }
    }

    /// Which of the app's statements a lock mode blocks.
    public enum LockEffect: String, Sendable, Codable {
        /// ACCESS EXCLUSIVE: every statement on the table, SELECT included.
        case readsAndWrites = "reads and writes"
        /// SHARE, SHARE ROW EXCLUSIVE, EXCLUSIVE: INSERT, UPDATE, DELETE (SELECT goes on).
        case writes
        /// The weaker modes: only other DDL and VACUUM wait.
        case nothingTheAppRuns = "nothing the app runs"

        init(mode: String) {
            switch mode {
            case "AccessExclusiveLock": self = .readsAndWrites
            case "ExclusiveLock", "ShareRowExclusiveLock", "ShareLock": self = .writes
            default: self = .nothingTheAppRuns
            }
        }
    }

    /// Work proportional to a table's size.
    public enum Work: String, Sendable, Codable {
        /// Every row is written again into a new file (a volatile default, a type change, VACUUM FULL).
        case rewrite
        /// Every row is read to check a constraint (SET NOT NULL, a CHECK or foreign key validated in place).
        case scan
        /// Every row is read to build an index.
        case indexBuild = "index build"
    }

    /// What `--fail-on` can fail on.
    public enum Risk: String, Sendable, Codable, CaseIterable {
        case rewrite
        case scan
        case blocksWrites = "blocks-writes"
        /// A statement of the app (`--app-statements`) that PostgreSQL accepted before the
        /// pending files and refuses after them (a column it reads was dropped or renamed).
        case breaksApp = "breaks-app"
    }

    /// One of the app's statements that the pending files break, or that could not be checked.
    public struct AppStatement: Sendable, Codable {
        /// `app.sql:12`
        public var location: String
        public var statement: String
        /// PostgreSQL's error after the pending files (or before them, for `checkable == false`).
        public var error: String
        /// False when PostgreSQL refused it before the pending files too (a parameter whose
        /// type it cannot infer, a statement for another schema): it was not checked.
        public var checkable: Bool
    }

    /// One pending statement, as measured.
    public struct Statement: Sendable, Codable {
        public var file: String
        public var line: Int
        /// The statement as written, shortened.
        public var statement: String
        /// Whether it runs in its file's transaction (its locks are held until the file commits).
        public var inTransaction: Bool
        public var locks: [TableLock]
        public var work: [WorkItem]
        /// No rewrite, and no scan or index build while the app's writes wait: what it does to
        /// the app is at most a brief lock, whatever the tables' sizes.
        public var safe: Bool
        /// The safer way to write it, or how to run it, in words.
        public var advice: String?

        /// The lock that blocks the app on `table`, if this statement holds one.
        func blockingLock(on table: String) -> TableLock? {
            locks.first { $0.table.name == table && $0.blocks != .nothingTheAppRuns }
        }
    }

    /// Work on one table.
    public struct WorkItem: Sendable, Codable, Equatable {
        public var kind: Work
        public var table: TableSize
    }

    /// A statement that `--fail-on` counts.
    public struct Finding: Sendable, Codable {
        public var risk: Risk
        public var file: String
        public var line: Int
        public var table: TableSize
        public var why: String
    }

    /// The target, as messages name it.
    public var target: String
    public var statements: [Statement]
    /// The app's statements the pending files break, and those that could not be checked.
    public var appStatements: [AppStatement] = []
    /// How many of the app's statements were checked.
    public var appStatementsChecked = 0

    /// The findings on tables of at least `largeTableRows` rows in the target (a table the
    /// pending migrations create counts as empty): a rewrite; a scan that validates in place
    /// (while the app's writes wait); and a lock that blocks the app's writes held while work
    /// proportional to the table's size is done. A strong lock around a change of the catalog
    /// alone is brief and is not a finding, nor is a scan or index build that lets writes go on
    /// (VALIDATE CONSTRAINT, CREATE INDEX CONCURRENTLY).
    public func findings(largeTableRows: Int64) -> [Finding] {
        var findings: [Finding] = []
        for statement in statements {
            for item in statement.work where (item.table.rows ?? 0) >= largeTableRows {
                let lock = statement.blockingLock(on: item.table.name)
                switch item.kind {
                case .rewrite:
                    findings.append(Finding(risk: .rewrite, file: statement.file, line: statement.line, table: item.table, why: "rewrites \(item.table.description)"))
                case .scan where lock != nil:
                    findings.append(Finding(risk: .scan, file: statement.file, line: statement.line, table: item.table, why: "scans \(item.table.description) to validate in place"))
                case .scan, .indexBuild:
                    break
                }
                if let lock {
                    findings.append(Finding(
                        risk: .blocksWrites, file: statement.file, line: statement.line, table: item.table,
                        why: "blocks \(lock.blocks.rawValue) on \(item.table.name) (\(Self.modeName(lock.mode))) during \(Self.workPhrase(item.kind)) of \(item.table.description)"))
                }
            }
        }
        for app in appStatements where app.checkable {
            let parts = app.location.split(separator: ":")
            findings.append(Finding(
                risk: .breaksApp, file: parts.dropLast().joined(separator: ":"), line: Int(parts.last ?? "") ?? 0,
                table: TableSize(name: "", rows: nil, bytes: nil), why: "the app's statement \(app.statement) fails after the pending files: \(app.error)"))
        }
        return findings
    }

    /// `ACCESS EXCLUSIVE` for `AccessExclusiveLock`.
    static func modeName(_ mode: String) -> String {
        var words: [String] = []
        var current = ""
        for character in mode.replacingOccurrences(of: "Lock", with: "") {
            if character.isUppercase && !current.isEmpty {
                words.append(current)
                current = ""
            }
            current.append(character)
        }
        if !current.isEmpty { words.append(current) }
        return words.joined(separator: " ").uppercased()
    }

    static func workPhrase(_ work: Work) -> String {
        switch work {
        case .rewrite: "a rewrite"
        case .scan: "a full scan"
        case .indexBuild: "an index build"
        }
    }

    /// The report a person reads: each statement with its locks, its work and the safer way,
    /// then the findings `--fail-on` would count.
    public func text(largeTableRows: Int64) -> String {
        var lines: [String] = []
        guard !statements.isEmpty else { return "bbmigrate plan: nothing pending in \(target)" }
        lines.append("bbmigrate plan: \(Set(statements.map(\.file)).count) pending file(s) against \(target) (table sizes from its catalog)")
        // Statements that lock no existing table and do no work (new objects, comments,
        // functions) are counted per file, not listed: --json lists every statement.
        var files: [(name: String, statements: [Statement])] = []
        for statement in statements {
            if files.last?.name == statement.file { files[files.count - 1].statements.append(statement) } else { files.append((statement.file, [statement])) }
        }
        for file in files {
            lines.append("")
            let inTransaction = file.statements.first?.inTransaction ?? true
            lines.append(file.name + (inTransaction ? " (one transaction: each lock is held until the file commits)" : " (no transaction: each statement on its own)"))
            let notable = file.statements.filter { !$0.locks.isEmpty || !$0.work.isEmpty }
            for statement in notable {
                lines.append("  line \(statement.line): \(statement.statement)")
                for lock in statement.locks {
                    let since = lock.heldSinceLine.map { " (held since line \($0) of this file)" } ?? ""
                    lines.append("    locks \(lock.table.description): \(Self.modeName(lock.mode)), blocks \(lock.blocks.rawValue)\(since)")
                }
                for item in statement.work {
                    let verb = switch item.kind {
                    case .rewrite: "rewrites"
                    case .scan: "scans every row of"
                    case .indexBuild: "builds an index, reading every row of"
                    }
                    let meanwhile = item.kind == .rewrite || statement.blockingLock(on: item.table.name) != nil ? "" : " (the app's reads and writes go on)"
                    lines.append("    \(verb) \(item.table.description)\(meanwhile)")
                }
                if statement.work.isEmpty, statement.locks.contains(where: { $0.blocks != .nothingTheAppRuns }) {
                    lines.append("    brief: a change of the catalog only (no rewrite, no scan)")
                }
                if let advice = statement.advice { lines.append("    \(statement.safe ? "note" : "safer"): \(advice)") }
                lines.append(statement.safe ? "    safe: no rewrite, and nothing reads every row while the app waits" : "    NOT SAFE on a large table")
            }
            let quiet = file.statements.count - notable.count
            if quiet > 0 {
                lines.append("  \(notable.isEmpty ? "" : "and ")\(quiet) statement(s) that lock no existing table (new objects, functions, comments): safe")
            }
        }
        if appStatementsChecked > 0 || !appStatements.isEmpty {
            lines.append("")
            let broken = appStatements.filter(\.checkable)
            lines.append("The app's statements: \(appStatementsChecked) checked, \(broken.count) fail after the pending files")
            for app in broken { lines.append("  \(app.location): \(app.statement)\n    \(app.error)") }
            for app in appStatements where !app.checkable {
                lines.append("  \(app.location): not checked, PostgreSQL refuses it already: \(app.error)")
            }
        }
        let findings = findings(largeTableRows: largeTableRows)
        lines.append("")
        if findings.isEmpty {
            lines.append("bbmigrate plan: no rewrite, scan or write-blocking work on a table of \(largeTableRows) rows or more")
        } else {
            lines.append("bbmigrate plan: \(findings.count) finding(s) on tables of \(largeTableRows) rows or more:")
            for finding in findings { lines.append("  \(finding.risk.rawValue): \(finding.file):\(finding.line) \(finding.why)") }
        }
        return lines.joined(separator: "\n")
    }
}
