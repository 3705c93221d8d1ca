import Foundation
import Postgres

/// Applies, inspects and verifies the SQL migrations of one database.
///
/// Every file runs in its own transaction together with its history row, so a failure leaves
/// the database exactly as it was before that file. Runs are serialized by an advisory lock
/// taken by polling; migration sessions set `lock_timeout` so a migration stuck behind the
/// app's traffic fails fast instead of blocking it.
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
        /// `lock_timeout` of migration sessions: how long a DDL statement may wait for a table lock.
        public var ddlLockTimeout: Duration
        /// Apply pending files older than the newest applied one.
        public var allowOutOfOrder: Bool
        /// Progress messages (stderr in the CLI).
        public var log: @Sendable (String) -> Void

        public init(
            directory: URL, lockTimeout: Duration = .seconds(60), ddlLockTimeout: Duration = .seconds(10),
            allowOutOfOrder: Bool = false, log: @escaping @Sendable (String) -> Void = { _ in }
        ) {
            self.directory = directory
            self.lockTimeout = lockTimeout
            self.ddlLockTimeout = ddlLockTimeout
            self.allowOutOfOrder = allowOutOfOrder
            self.log = log
        }
    }

    public let configuration: PostgresConfiguration
    public let options: Options
    /// A name for messages ("the embedded database", a redacted host…).
    public let targetDescription: String

    public init(configuration: PostgresConfiguration, options: Options, targetDescription: String = "the database") {
        var configuration = configuration
        configuration.applicationName = configuration.applicationName ?? "bbmigrate"
        self.configuration = configuration
        self.options = options
        self.targetDescription = targetDescription
    }

    func connect() async throws -> PostgresConnection {
        do {
            return try await PostgresConnection.connect(configuration)
        } catch {
            throw MigratorError.wrapConnection(error, target: targetDescription)
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

    /// Applies the pending files in version order, up to `target` if given. Returns what it
    /// applied (or, with `dryRun`, what it would apply; nothing is changed then).
    @discardableResult
    public func up(to target: Int? = nil, dryRun: Bool = false, progress: @Sendable (AppliedMigration) -> Void = { _ in }) async throws -> [AppliedMigration] {
        try await up(files(), to: target, dryRun: dryRun, progress: progress)
    }

    /// `up` over the given files instead of the folder's (the drift check applies exactly the
    /// files that were applied to the live database).
    @discardableResult
    func up(_ files: [MigrationFile], to target: Int? = nil, dryRun: Bool = false, progress: @Sendable (AppliedMigration) -> Void = { _ in }) async throws -> [AppliedMigration] {
        if let target, !files.contains(where: { $0.version == target }) {
            throw MigratorError.configuration("--to \(target): there is no migration file with that version", fix: "pick one of: \(files.map { MigrationFile.format($0.version) }.joined(separator: ", "))")
        }
        for file in files { try Self.checkShape(of: file) }

        if dryRun {
            let connection = try await connect()
            defer { Task { await connection.close() } }
            let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
            let plan = try await plan(entries, files: files, target: target, hasHistory: try await MigrationHistory.exists(connection), connection: connection)
            let would = plan.map { AppliedMigration(version: $0.version, name: $0.name, durationMs: 0, dryRun: true) }
            would.forEach(progress)
            return would
        }
        return try await withMigrationLock { connection in
            try await upLocked(files: files, target: target, connection: connection, progress: progress)
        }
    }

    private func upLocked(files: [MigrationFile], target: Int?, connection: PostgresConnection, progress: @Sendable (AppliedMigration) -> Void) async throws -> [AppliedMigration] {
        try await waitForKilledRuns(connection)
        let hasHistory = try await MigrationHistory.exists(connection)
        // Read the history only now that the lock is ours.
        let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
        let plan = try await plan(entries, files: files, target: target, hasHistory: hasHistory, connection: connection)
        if !hasHistory { try await MigrationHistory.create(connection) }
        try await connection.execute("SELECT set_config('client_connection_check_interval', '1000', false)")
        var applied: [AppliedMigration] = []
        for file in plan {
            let result = try await apply(file, on: connection)
            applied.append(result)
            progress(result)
        }
        return applied
    }

    /// A killed run's statement may still be running on the server for a moment (the server
    /// notices the dead client within `client_connection_check_interval`). Wait for it.
    private func waitForKilledRuns(_ connection: PostgresConnection) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + options.lockTimeout
        while clock.now < deadline {
            let busy = try await connection.fetchValue(Int.self, """
                SELECT count(*) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND application_name = \(configuration.applicationName ?? "bbmigrate") AND state <> 'idle'
                  AND query NOT LIKE '%pg_try_advisory_lock%' AND query NOT LIKE '%pg_locks%'
                """) ?? 0
            if busy == 0 { return }
            options.log("waiting for \(busy) statement(s) of an interrupted bbmigrate run to end on the server")
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    /// Which files to apply, refusing changed, missing and (unless allowed) out-of-order ones.
    private func plan(_ entries: [MigrationEntry], files: [MigrationFile], target: Int?, hasHistory: Bool, connection: PostgresConnection) async throws -> [MigrationFile] {
        if !entries.contains(where: { $0.state == .applied || $0.state == .changed || $0.state == .missing }) {
            let objects = try await connection.fetchValue(Int.self, """
                SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate') AND n.nspname NOT LIKE 'pg\\_%'
                  AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                """) ?? 0
            if objects > 0 {
                throw MigratorError.configuration(
                    "\(targetDescription) already holds \(objects) tables, views or sequences but has no migration history, so bbmigrate cannot tell which migrations it contains",
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
        return files.filter { file in wanted.contains(file.version) && file.version <= (target ?? Int.max) }
    }

    /// Refuses files that would break the one-transaction rule.
    static func checkShape(of file: MigrationFile) throws {
        let statements = SQLStatementSplitter.statements(file.sql)
        let control = /^(BEGIN|COMMIT|ROLLBACK|END|START\s+TRANSACTION|ABORT)\b/.ignoresCase()
        if let statement = statements.first(where: { $0.text.firstMatch(of: control) != nil }) {
            throw MigratorError.configuration(
                "\(file.fileName):\(statement.line): the file controls transactions itself (\(statement.text.prefix(20))…); bbmigrate runs each file in its own transaction",
                fix: "remove BEGIN/COMMIT from the file")
        }
        guard file.runsOutsideTransaction else { return }
        if let mixed = statements.first(where: { !SQLStatementSplitter.needsNoTransaction($0.text) }) {
            throw MigratorError.configuration(
                "\(file.fileName):\(mixed.line): a -- bbmigrate:no-transaction file may only hold statements that cannot run in a transaction (CREATE INDEX CONCURRENTLY, …), but it has: \(mixed.text.prefix(60))",
                fix: "move that statement to a normal migration file")
        }
    }

    private var lockTimeoutMilliseconds: String { String(options.ddlLockTimeout.milliseconds) }

    private func apply(_ file: MigrationFile, on connection: PostgresConnection) async throws -> AppliedMigration {
        options.log("applying \(file.fileName)…")
        let clock = ContinuousClock()
        let started = clock.now
        let timeout = lockTimeoutMilliseconds
        do {
            if file.runsOutsideTransaction {
                try await applyOutsideTransaction(file, on: connection, lockTimeout: timeout)
            } else {
                // Statement by statement inside the one transaction, so an error without a
                // position (division by zero, a constraint) still names its line. A SQL-standard
                // function body (BEGIN ATOMIC … END) holds bare semicolons: such a file runs whole.
                let statements = file.sql.range(of: "BEGIN ATOMIC", options: .caseInsensitive) == nil
                    ? SQLStatementSplitter.statements(file.sql) : [SQLStatementSplitter.Statement(text: file.sql, line: 1)]
                try await connection.transaction { connection in
                    try await connection.execute("SELECT set_config('lock_timeout', \(timeout), true)")
                    for statement in statements {
                        do {
                            try await connection.executeUnsafeRawSQL(statement.text)
                        } catch let error as PostgresError {
                            throw StatementFailure(error: error, statement: statement)
                        }
                    }
                    let elapsed = clock.now - started
                    try await MigrationHistory.record(connection, file, durationMs: elapsed.milliseconds)
                }
            }
            // A file's plain SET commands must not leak into the next file.
            try await connection.executeUnsafeRawSQL("RESET ALL")
            try await connection.execute("SELECT set_config('client_connection_check_interval', '1000', false)")
        } catch let failure as StatementFailure {
            throw locate(failure.error, in: file, statement: failure.statement)
        } catch let error as PostgresError {
            throw describe(error, in: file, text: file.sql)
        }
        let elapsed = clock.now - started
        return AppliedMigration(version: file.version, name: file.name, durationMs: elapsed.milliseconds, dryRun: false)
    }

    private func applyOutsideTransaction(_ file: MigrationFile, on connection: PostgresConnection, lockTimeout: String) async throws {
        let statements = SQLStatementSplitter.statements(file.sql)
        let done = Set(try await connection.query("""
            SELECT statement_index FROM bbmigrate.statement_progress WHERE version = \(file.version) AND file_checksum = \(file.checksum)
            """).decodeColumn(Int.self))
        if !done.isEmpty { options.log("resuming \(file.fileName): \(done.count) of \(statements.count) statements already ran") }
        try await connection.execute("SELECT set_config('lock_timeout', \(lockTimeout), false)")
        let clock = ContinuousClock()
        let started = clock.now
        for (index, statement) in statements.enumerated() where !done.contains(index) {
            do {
                try await connection.executeUnsafeRawSQL(statement.text)
            } catch let error as PostgresError {
                throw locate(error, in: file, statement: statement)
            }
            try await connection.execute("""
                INSERT INTO bbmigrate.statement_progress (version, statement_index, file_checksum) VALUES (\(file.version), \(index), \(file.checksum))
                ON CONFLICT (version, statement_index) DO UPDATE SET file_checksum = excluded.file_checksum
                """)
        }
        let elapsed = clock.now - started
        try await connection.transaction { connection in
            try await MigrationHistory.record(connection, file, durationMs: elapsed.milliseconds)
            try await connection.execute("DELETE FROM bbmigrate.statement_progress WHERE version = \(file.version)")
        }
    }

    struct StatementFailure: Error {
        let error: PostgresError
        let statement: SQLStatementSplitter.Statement
    }

    /// Places an error of one statement at its line (and column, when the server gave a position).
    func locate(_ error: PostgresError, in file: MigrationFile, statement: SQLStatementSplitter.Statement) -> MigratorError {
        guard let position = error.position else { return describe(error, in: file, line: statement.line, column: 1) }
        let inner = file.lineAndColumn(ofPosition: position, inText: statement.text)
        return describe(error, in: file, line: statement.line + inner.line - 1, column: inner.column)
    }

    /// `0005_events.sql:12:5: …` with the server's message, detail and hint.
    func describe(_ error: PostgresError, in file: MigrationFile, text: String? = nil, line: Int? = nil, column: Int? = nil) -> MigratorError {
        var location = file.fileName
        if let line {
            location += ":\(line):\(column ?? 1)"
        } else if let position = error.position {
            let (l, c) = file.lineAndColumn(ofPosition: position, inText: text)
            location += ":\(l):\(c)"
        }
        var message = "\(location): \(error.severity ?? "ERROR") \(error.sqlState.map { "\($0) " } ?? "")\(error.message)"
        if let detail = error.detail { message += "\n  detail: \(detail)" }
        if let hint = error.hint { message += "\n  hint: \(hint)" }
        if let context = error.context { message += "\n  context: \(context)" }
        switch error.kind {
        case .lockNotAvailable:
            return .lockTimeout(
                message + "\n\(file.fileName) waited more than \(options.ddlLockTimeout) for a table lock: another session (a long query or an open transaction) holds it. Nothing of this file was applied.",
                fix: "retry when traffic is lower, find the blocker in pg_stat_activity, or raise --ddl-lock-timeout")
        case .connectionFailure, .adminShutdown:
            return .connection(message + "\nThe connection was lost while applying \(file.fileName); the server rolled the file back.", fix: "run bbmigrate up again once the server is reachable")
        default:
            return .migrationFailed(
                message + (file.runsOutsideTransaction
                    ? "\nStatements of \(file.fileName) before this one stay applied (it runs outside a transaction); a rerun resumes after them."
                    : "\nThe file was rolled back: nothing of \(file.fileName) was applied."),
                fix: "fix \(file.fileName) and run bbmigrate up again")
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
        return try await withMigrationLock { connection in
            try await MigrationHistory.create(connection)
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
        return try await withMigrationLock { connection in
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

    /// Runs `body` on a migration session while holding the migration lock (taken on a second,
    /// dedicated connection and released afterwards).
    func withMigrationLock<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await connect()
        defer { Task { await connection.close() } }
        let lockConnection = try await connect()
        defer { Task { await lockConnection.close() } }
        let lock = try await MigrationLock.acquire(on: lockConnection, timeout: options.lockTimeout, log: options.log)
        do {
            let value = try await body(connection)
            try? await lock.release()
            return value
        } catch {
            try? await lock.release()
            throw error
        }
    }
}

extension Duration {
    /// Whole milliseconds.
    var milliseconds: Int { Int(components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000) }
}
