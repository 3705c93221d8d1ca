public import Foundation
public import Logging
public import Postgres

/// Applies, inspects and verifies the SQL migrations of one database.
///
/// Every file runs in its own transaction together with its history row, statement by
/// statement as `psql -1 -f` would send them, so a failure leaves the database exactly as it was
/// before that file. A file whose leading comments say `-- bbmigrate:no-transaction` runs its
/// statements one by one outside a transaction, recording each as it completes. Runs are
/// serialized by an advisory lock held on the working session (see `MigrationSession`);
/// migration statements get `lock_timeout`, so one stuck behind the app's traffic fails fast
/// instead of blocking it.
///
/// Before anything runs, every pending file is read strictly (UTF-8, cut as psql cuts it) and
/// checked: no transaction control in it, no statement that cannot run in a transaction unless
/// the file is marked, no psql meta-command.
///
/// ```swift
/// let migrator = Migrator(configuration: PostgresConfiguration(url), options: .init(directory: migrationsURL))
/// let applied = try await migrator.up()
/// for entry in try await migrator.status() { print(entry.summary) }
/// ```
public struct Migrator: Sendable {
    /// Options
    ///
    /// ```swift
    /// let options = Migrator.Options(directory: migrations, lockTimeout: .seconds(30))
    /// ```
    public struct Options: Sendable {
        /// Where the `NNNN_name.sql` files are.
        public var directory: URL
        /// How long to wait for another run's migration lock.
        public var lockTimeout: Duration
        /// `lock_timeout` of migration statements: how long one may wait for a table lock.
        public var ddlLockTimeout: Duration
        /// Apply pending files older than the newest applied one.
        public var allowOutOfOrder: Bool
        /// Refuse a transaction pooler (on by default; the scratch database of `verify` skips it).
        public var detectPooler: Bool
        /// Progress (each file applied, lock waits, leftovers cleaned up) at `info`; the
        /// CLI sends it to stderr. The connections log through the configuration's logger.
        public var logger: Logger

        public init(
            directory: URL, lockTimeout: Duration = .seconds(60), ddlLockTimeout: Duration = .seconds(10),
            allowOutOfOrder: Bool = false, detectPooler: Bool = true, logger: Logger = Logger(label: "bbmigrate")
        ) {
            self.directory = directory
            self.lockTimeout = lockTimeout
            self.ddlLockTimeout = ddlLockTimeout
            self.allowOutOfOrder = allowOutOfOrder
            self.detectPooler = detectPooler
            self.logger = logger
        }
    }

    public let configuration: PostgresConfiguration
    public let options: Options
    /// A name for messages ("the embedded database", a redacted host…).
    public let targetDescription: String

    public init(configuration: PostgresConfiguration, options: Options, targetDescription: String = "the database") {
        var configuration = configuration
        configuration.applicationName = configuration.applicationName ?? "bbmigrate"
        configuration.statementCacheCapacity = 0
        self.configuration = configuration
        self.options = options
        self.targetDescription = targetDescription
    }

    /// A plain connection for reading (status, dry run): no lock, no pooler check.
    func connect() async throws -> PostgresConnection {
        do {
            return try await PostgresConnection.connect(configuration)
        } catch {
            throw MigratorError.classify(error, target: targetDescription)
        }
    }

    /// Opens the working session and takes the migration lock, runs `body`, and releases both.
    func withLockedSession<T: Sendable>(purpose: String, _ body: (MigrationSession) async throws -> T) async throws -> T {
        let session = try await MigrationSession.open(configuration, target: targetDescription, detectPooler: options.detectPooler)
        do {
            try await session.acquireLock(timeout: options.lockTimeout, purpose: purpose, logger: options.logger)
            let value = try await body(session)
            await session.releaseLock()
            await session.close()
            return value
        } catch {
            await session.releaseLock()
            await session.close()
            throw MigratorError.classify(error, target: targetDescription)
        }
    }

    /// The files in the migrations folder.
    public func files() throws -> [MigrationFile] { try MigrationFile.load(from: options.directory) }

    // MARK: status

    /// Every version, from the files and the history.
    public func status() async throws -> [MigrationEntry] {
        let files = try files()
        let connection = try await connect()
        defer { Task { await connection.close() } }
        return MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
    }

    // MARK: up

    /// Applies the pending files in version order, up to `target` if given, and returns what
    /// it applied. `progress` hears of each file as soon as it is recorded, so a caller still
    /// knows what was applied when a later file fails.
    @discardableResult
    public func up(to target: Int? = nil, progress: @Sendable (AppliedMigration) -> Void = { _ in }) async throws -> [AppliedMigration] {
        try await up(files(), to: target, progress: progress)
    }

    /// `up` over the given files instead of the folder's (the drift check applies exactly the
    /// files that were applied to the live database).
    @discardableResult
    func up(_ files: [MigrationFile], to target: Int? = nil, progress: @Sendable (AppliedMigration) -> Void = { _ in }) async throws -> [AppliedMigration] {
        try checkTarget(target, in: files)
        return try await withLockedSession(purpose: "up") { session in
            let connection = session.connection
            let hasHistory = try await MigrationHistory.exists(connection)
            // Read the history only now that the lock is ours.
            let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
            let plan = try await filesToApply(entries, files: files, target: target, connection: connection)
            try await MigrationHistory.createOrUpgrade(connection, exists: hasHistory)
            var applied: [AppliedMigration] = []
            for planned in plan {
                let result = try await apply(planned, in: session)
                applied.append(result)
                progress(result)
                try await session.resetState()
                try await session.ensureLockHeld(after: planned.file.fileName)
            }
            return applied
        }
    }

    /// What `up` would run, statement by statement, without changing anything.
    ///
    /// ```swift
    /// for file in try await migrator.dryRun() { print(file.script(ddlLockTimeout: .seconds(10))) }
    /// ```
    public func dryRun(to target: Int? = nil) async throws -> [PlannedMigration] {
        let files = try files()
        try checkTarget(target, in: files)
        let connection = try await connect()
        defer { Task { await connection.close() } }
        let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
        return try await filesToApply(entries, files: files, target: target, connection: connection)
    }

    private func checkTarget(_ target: Int?, in files: [MigrationFile]) throws {
        if let target, !files.contains(where: { $0.version == target }) {
            throw MigratorError.configuration("--to \(target): there is no migration file with that version", fix: "pick one of: \(files.map { MigrationFile.format($0.version) }.joined(separator: ", "))")
        }
    }

    /// Which files to apply, refusing changed, missing and (unless allowed) out-of-order ones,
    /// and checking every file to apply before any of them runs.
    func filesToApply(_ entries: [MigrationEntry], files: [MigrationFile], target: Int?, connection: PostgresConnection) async throws -> [PlannedMigration] {
        if !entries.contains(where: { $0.state == .applied || $0.state == .changed || $0.state == .missing }) {
            let objects = try await connection.fetchValue(Int.self, """
                SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate') AND n.nspname NOT LIKE 'pg\\_%'
                  AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                  AND NOT EXISTS (SELECT FROM pg_depend d
                                  WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
                """) ?? 0
            if objects > 0 {
                throw MigratorError.configuration(
                    "\(targetDescription) already holds \(objects) tables, views or sequences (not counting extensions' own) but has no migration history, so bbmigrate cannot tell which migrations it contains",
                    fix: "if it already has the schema up to version N, record that with `bbmigrate baseline N`; otherwise point --url at an empty database")
            }
        }
        if let changed = entries.first(where: { $0.state == .changed }) {
            throw MigratorError.verification(
                "\(changed.id).sql was changed after it was applied (checksum \(changed.appliedChecksum?.prefix(12) ?? "?")… in the database, \(changed.fileChecksum?.prefix(12) ?? "?")… on disk)",
                fix: "restore the file (git checkout), or if the change is deliberate and harmless: bbmigrate repair \(changed.version) --reason \"…\"")
        }
        if let missing = entries.first(where: { $0.state == .missing }) {
            throw MigratorError.verification(
                "\(missing.id).sql was applied to \(targetDescription) but is not in \(options.directory.path)",
                fix: "restore the file, or check that --dir points at the right folder")
        }
        let outOfOrder = entries.filter { $0.state == .outOfOrder }
        if !outOfOrder.isEmpty && !options.allowOutOfOrder {
            throw MigratorError.verification(
                "\(outOfOrder.map { $0.id + ".sql" }.joined(separator: ", ")) is older than the newest applied migration and was never applied",
                fix: "renumber it after the newest version, or apply it anyway with --allow-out-of-order")
        }
        let wanted = Set(entries.filter { $0.state == .pending || $0.state == .outOfOrder }.map(\.version))
        return try files.filter { wanted.contains($0.version) && $0.version <= (target ?? Int.max) }.map(PlannedMigration.init)
    }

    // MARK: Applying one file

    private var lockTimeoutMilliseconds: String { String(options.ddlLockTimeout.milliseconds) }

    private func apply(_ planned: PlannedMigration, in session: MigrationSession) async throws -> AppliedMigration {
        let file = planned.file
        options.logger.info("applying \(file.fileName)…")
        let clock = ContinuousClock()
        let started = clock.now
        let timeout = lockTimeoutMilliseconds
        if file.runsOutsideTransaction {
            try await NoTransactionRun(file: file, statements: planned.statements, migrator: self, session: session).run(lockTimeout: timeout)
        } else {
            do {
                try await session.connection.transaction { connection in
                    try await connection.execute("SELECT set_config('lock_timeout', \(timeout), true)")
                    for statement in planned.statements {
                        do {
                            try await connection.executeUnsafeRawSQL(statement.text)
                        } catch let error as PostgresError {
                            throw StatementFailure(error: error, statement: statement)
                        }
                        try checkStringMode(connection.parameterStatus("standard_conforming_strings"), file: file, statement: statement)
                        // Second line of defence: whatever the guards missed, a statement that
                        // ended bbmigrate's transaction stops the file before it is recorded.
                        guard connection.isInTransaction else {
                            throw MigratorError.partiallyApplied(
                                "\(file.fileName):\(statement.line): this statement ended bbmigrate's transaction (a COMMIT or ROLLBACK inside it); what ran before it may be committed, and \(file.fileName) is NOT recorded as applied",
                                fix: "check what \(file.fileName) left behind, remove the transaction control, then run bbmigrate up again")
                        }
                    }
                    // The file may have changed the role or the timeouts: record as the migration user.
                    try await connection.executeUnsafeRawSQL("SET SESSION AUTHORIZATION DEFAULT; RESET statement_timeout")
                    try await MigrationHistory.record(connection, file, durationMs: (clock.now - started).milliseconds)
                }
            } catch let failure as StatementFailure {
                throw locate(failure.error, in: file, statement: failure.statement, partially: false)
            } catch let error as PostgresError {
                throw describe(error, in: file, partially: false)
            }
        }
        return AppliedMigration(version: file.version, name: file.name, durationMs: (clock.now - started).milliseconds)
    }

    /// A file that turns `standard_conforming_strings` off changes how the rest of it must be
    /// read; bbmigrate cut it assuming `on`, so it stops.
    func checkStringMode(_ status: String?, file: MigrationFile, statement: SQLScript.Statement) throws {
        guard status == nil || status == "on" else {
            throw MigratorError.configuration(
                "\(file.fileName):\(statement.line): this statement turned standard_conforming_strings off, which changes how the rest of the file is read; bbmigrate does not support that",
                fix: "remove the setting from \(file.fileName) (write E'…' strings where backslash escapes are meant)")
        }
    }

    struct StatementFailure: Error {
        let error: PostgresError
        let statement: SQLScript.Statement
    }

    /// Places an error of one statement at its line (and column, when the server gave a position).
    func locate(_ error: PostgresError, in file: MigrationFile, statement: SQLScript.Statement, partially: Bool) -> MigratorError {
        guard let position = error.position else { return describe(error, in: file, line: statement.line, column: 1, partially: partially) }
        let (line, column) = statement.lineAndColumn(ofCharacter: position)
        return describe(error, in: file, line: line, column: column, partially: partially)
    }

    /// `0005_events.sql:12:5: …` with the server's message, detail and hint. `partially`: some
    /// statements of this (no-transaction) file are applied.
    func describe(_ error: PostgresError, in file: MigrationFile, line: Int? = nil, column: Int? = nil, partially: Bool, cleanup: String? = nil) -> MigratorError {
        var location = file.fileName
        if let line { location += ":\(line):\(column ?? 1)" }
        var message = "\(location): \(error.severity ?? "ERROR") \(error.sqlState.map { "\($0) " } ?? "")\(error.message)"
        if let detail = error.detail { message += "\n  detail: \(detail)" }
        if let hint = error.hint { message += "\n  hint: \(hint)" }
        if let context = error.context { message += "\n  context: \(context)" }
        if let cleanup { message += "\n" + cleanup }
        let lockWait = error.kind == .lockNotAvailable
            ? "\nThe statement waited more than \(options.ddlLockTimeout) (--ddl-lock-timeout) for a lock: another session (a long query or an open transaction) holds one it needs."
            : ""
        if partially {
            return .partiallyApplied(
                message + lockWait + "\n\(file.fileName) is PARTIALLY APPLIED: it runs outside a transaction, and its statements before this one stay applied (recorded in bbmigrate.statement_progress).",
                fix: "fix the cause and run bbmigrate up again: it resumes after the statements that ran")
        }
        switch error.kind {
        case .lockNotAvailable:
            return .lockTimeout(
                message + lockWait + " Nothing of \(file.fileName) was applied.",
                fix: "retry when traffic is lower, find the blocker in pg_stat_activity, or raise --ddl-lock-timeout")
        case .connectionFailure, .adminShutdown:
            return .connection(
                message + "\nThe connection was lost while applying \(file.fileName); "
                    + (file.runsOutsideTransaction ? "the statement that was running may or may not have completed." : "the server rolled the file back."),
                fix: "run bbmigrate up again once the server is reachable")
        default:
            return .migrationFailed(message + "\nNothing of \(file.fileName) was applied.", fix: "fix \(file.fileName) and run bbmigrate up again")
        }
    }

    // MARK: baseline and repair

    /// Records every file up to `version` as applied, without running it, for a database that
    /// already has that schema. Refused when the history is not empty.
    public func baseline(_ version: Int) async throws -> [MigrationEntry] {
        let allFiles = try self.files()
        let files = allFiles.filter { $0.version <= version }
        guard files.contains(where: { $0.version == version }) else {
            throw MigratorError.configuration("there is no migration file with version \(version)", fix: "pass the version of an existing file")
        }
        return try await withLockedSession(purpose: "baseline") { session in
            let connection = session.connection
            try await MigrationHistory.createOrUpgrade(connection, exists: try await MigrationHistory.exists(connection))
            let existing = try await MigrationHistory.read(connection)
            guard existing.isEmpty else {
                throw MigratorError.configuration("\(targetDescription) already has a migration history (\(existing.count) versions); baseline is for a database that has none", fix: "use bbmigrate status to see where it stands")
            }
            try await connection.transaction { connection in
                for file in files { try await MigrationHistory.record(connection, file, durationMs: 0, baselined: true) }
            }
            return MigrationEntry.reconcile(files: allFiles, history: try await MigrationHistory.read(connection))
        }
    }

    /// Accepts the current checksum of applied `version` on purpose, keeping the old one, the
    /// new one and `reason` in `bbmigrate.repairs`.
    public func repair(_ version: Int, reason: String) async throws -> (old: String, new: String) {
        guard !reason.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw MigratorError.configuration("repair needs a reason", fix: "pass --reason \"why the file changed\"")
        }
        guard let file = try files().first(where: { $0.version == version }) else {
            throw MigratorError.configuration("there is no migration file with version \(version)", fix: "restore the file first")
        }
        return try await withLockedSession(purpose: "repair") { session in
            let connection = session.connection
            guard let row = try await MigrationHistory.read(connection).first(where: { $0.version == version }) else {
                throw MigratorError.configuration("version \(version) was never applied to \(targetDescription), so there is nothing to repair", fix: "run bbmigrate up")
            }
            guard row.checksum != file.checksum else { return (row.checksum, file.checksum) }
            try await connection.transaction { connection in
                try await connection.execute("""
                INSERT INTO bbmigrate.repairs (version, old_checksum, new_checksum, reason) VALUES (\(version), \(row.checksum), \(file.checksum), \(reason))
                """)
                try await connection.execute("""
                UPDATE bbmigrate.schema_migrations SET checksum = \(file.checksum), checksum_algorithm = \(MigrationFile.checksumAlgorithm), name = \(file.name)
                WHERE version = \(version)
                """)
            }
            return (row.checksum, file.checksum)
        }
    }
}

/// A file `up` will apply, already cut into statements and checked.
///
/// ```swift
/// for planned in try await migrator.dryRun() { print(planned.file.fileName, planned.statements.count) }
/// ```
public struct PlannedMigration: Sendable {
    public let file: MigrationFile
    public let statements: [SQLScript.Statement]

    /// Cuts and checks `file`: refused (exit 2) with file and line, before anything runs, when it
    /// controls transactions, holds a statement that cannot run in a transaction without the
    /// no-transaction marker, or mixes such statements with others.
    init(_ file: MigrationFile) throws {
        self.file = file
        statements = try file.statements()
        for statement in statements where statement.controlsTransaction {
            let words = ([statement.words] + statement.innerParts).first(where: SQLScript.Statement.isTransactionControl) ?? statement.words
            let hidden = statement.kind == .transactionControl ? "" : " (hidden inside the statement that starts there, which psql also sends as one piece)"
            throw MigratorError.configuration(
                "\(file.fileName):\(statement.line): \(words.prefix(2).joined(separator: " ")) controls the transaction\(hidden), but bbmigrate runs each file in a transaction of its own (and records it there); a COMMIT or ROLLBACK here would end it early",
                fix: "remove the transaction control from \(file.fileName); bbmigrate commits the file when every statement succeeded")
        }
        if file.runsOutsideTransaction {
            if let mixed = statements.first(where: { $0.kind == .other }) {
                throw MigratorError.configuration(
                    "\(file.fileName):\(mixed.line): a \(MigrationFile.noTransactionMarker) file may only hold statements that cannot run in a transaction (CREATE INDEX CONCURRENTLY, …) and SET, RESET or COMMENT ON, but it has: \(mixed.excerpt)",
                    fix: "move that statement to a normal migration file")
            }
        } else if let lonely = statements.first(where: { $0.kind == .needsNoTransaction }) {
            throw MigratorError.configuration(
                "\(file.fileName):\(lonely.line): \(lonely.excerpt) cannot run inside a transaction, and bbmigrate runs this file in one",
                fix: "put it in a file of its own whose leading comment says \(MigrationFile.noTransactionMarker)")
        }
    }

    /// The SQL `up` sends for this file, with file and line before each statement, as psql
    /// would run it (`psql -X -v ON_ERROR_STOP=1 -f`).
    public func script(ddlLockTimeout: Duration) -> String {
        var lines: [String] = []
        let timeout = String(ddlLockTimeout.milliseconds)
        if file.runsOutsideTransaction {
            lines.append("-- \(file.fileName): outside a transaction, one statement at a time (\(MigrationFile.noTransactionMarker))")
            lines.append("SELECT set_config('lock_timeout', '\(timeout)', false);")
        } else {
            lines.append("-- \(file.fileName): in one transaction with its history row")
            lines.append("BEGIN;")
            lines.append("SELECT set_config('lock_timeout', '\(timeout)', true);")
        }
        for statement in statements {
            lines.append("-- \(file.fileName):\(statement.textLine)")
            // A `--` comment on the last line would swallow the semicolon.
            let lastLine = statement.text.split(separator: "\n", omittingEmptySubsequences: false).last ?? ""
            lines.append(statement.text + (lastLine.contains("--") ? "\n;" : ";"))
        }
        if !file.runsOutsideTransaction { lines.append("SET SESSION AUTHORIZATION DEFAULT; RESET statement_timeout;") }
        lines.append("INSERT INTO bbmigrate.schema_migrations (version, name, checksum, checksum_algorithm, duration_ms, baselined) "
            + "VALUES (\(file.version), '\(file.name)', '\(file.checksum)', '\(MigrationFile.checksumAlgorithm)', <duration_ms>, false);")
        lines.append(file.runsOutsideTransaction ? "DELETE FROM bbmigrate.statement_progress WHERE version = \(file.version);" : "COMMIT;")
        lines.append(MigrationSession.resetSQL + ";\n" + MigrationSession.prepareSQL + ";")
        return lines.joined(separator: "\n")
    }
}

extension SQLScript.Statement {
    /// The file's line and column of the 1-based character `position` of `text` (the server's
    /// error position counts characters of the statement it was sent).
    public func lineAndColumn(ofCharacter position: Int) -> (line: Int, column: Int) {
        var line = textLine
        var column = textColumn
        var index = 1
        for scalar in text.unicodeScalars {
            if index == position { break }
            if scalar == "\n" {
                line += 1
                column = 1
            } else {
                column += 1
            }
            index += 1
        }
        return (line, column)
    }
}

extension Duration {
    /// Whole milliseconds.
    var milliseconds: Int { Int(components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000) }
}
