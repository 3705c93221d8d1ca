import Foundation
import Logging
import Postgres

/// Applies a `-- bbmigrate:no-transaction` file: its statements one at a time, outside a
/// transaction, recording each in `bbmigrate.statement_progress` with its own checksum.
///
/// - A rerun after a failure resumes after the statements that ran, and refuses (exit 1) when
///   one of those statements was edited since: the file cannot be half-skipped.
/// - A `CREATE INDEX CONCURRENTLY` that fails leaves an INVALID index behind; it is dropped
///   (`DROP INDEX CONCURRENTLY`) and the message says so, or says the exact command to run.
/// - A failure after some statements ran exits 6, "partially applied".
struct NoTransactionRun {
    let file: MigrationFile
    let statements: [SQLScript.Statement]
    let migrator: Migrator
    let session: MigrationSession

    struct Progress {
        let index: Int
        let statementChecksum: String?
        let fileChecksum: String
    }

    static func checksum(_ statement: SQLScript.Statement) -> String {
        MigrationFile.checksum(of: statement.text)
    }

    func run(lockTimeout: String) async throws {
        let connection = session.connection
        let file = self.file
        let done = try await alreadyRun()
        if !done.isEmpty { migrator.options.logger.info("resuming \(file.fileName): \(done.count) of \(statements.count) statements already ran") }
        try await connection.execute("SELECT set_config('lock_timeout', \(lockTimeout), false)")
        let clock = ContinuousClock()
        let started = clock.now
        var ranNow = 0
        for (index, statement) in statements.enumerated() where !done.contains(index) {
            try await dropInvalidLeftover(of: statement)
            let invalidBefore = try await invalidIndexes()
            do {
                try await connection.executeUnsafeRawSQL(statement.text)
            } catch let error as PostgresError {
                let cleanup = await dropIndexLeftInvalid(by: statement, besides: invalidBefore)
                throw migrator.locate(error, in: file, statement: statement, partially: !done.isEmpty || ranNow > 0)
                    .adding(cleanup)
            }
            ranNow += 1
            try migrator.checkStringMode(await connection.parameterStatus("standard_conforming_strings"), file: file, statement: statement)
            let statementIndex = index
            try await bookkeeping(after: statement) { connection in
                try await connection.execute("""
                    INSERT INTO bbmigrate.statement_progress (version, statement_index, file_checksum, statement_checksum)
                    VALUES (\(file.version), \(statementIndex), \(file.checksum), \(Self.checksum(statement)))
                    ON CONFLICT (version, statement_index)
                    DO UPDATE SET file_checksum = excluded.file_checksum, statement_checksum = excluded.statement_checksum
                    """)
            }
        }
        let elapsed = (clock.now - started).milliseconds
        try await bookkeeping(after: statements.last) { connection in
            try await MigrationHistory.record(connection, file, durationMs: elapsed)
            try await connection.execute("DELETE FROM bbmigrate.statement_progress WHERE version = \(file.version)")
        }
    }

    /// bbmigrate's own writes, in a read-write transaction as the migration user whatever the
    /// file's SET ROLE or settings; a failure here comes after statements ran, so it is
    /// "partially applied".
    func bookkeeping(after statement: SQLScript.Statement?, _ body: @Sendable (isolated PostgresConnection) async throws -> Void) async throws {
        do {
            try await session.connection.transaction(.init(readWrite: true)) { connection in
                try await connection.executeUnsafeRawSQL("SET LOCAL SESSION AUTHORIZATION DEFAULT; SET LOCAL statement_timeout = 0; SET LOCAL transaction_read_only = off")
                try await body(connection)
            }
        } catch {
            let line = statement.map { ":\($0.line)" } ?? ""
            throw MigratorError.partiallyApplied(
                "\(file.fileName)\(line): the statement ran, but bbmigrate could not record it: \((error as? PostgresError)?.message ?? "\(error)"); \(file.fileName) is PARTIALLY APPLIED",
                fix: "make bbmigrate.statement_progress writable by the migration user, then run bbmigrate up again (the unrecorded statement runs again: write it with IF NOT EXISTS)")
        }
    }

    /// The statements of this file a previous run completed; refuses when one of them no
    /// longer reads as it ran.
    func alreadyRun() async throws -> Set<Int> {
        let rows = try await session.connection.query("""
            SELECT statement_index, statement_checksum, file_checksum FROM bbmigrate.statement_progress
            WHERE version = \(file.version) ORDER BY statement_index
            """)
        var done = Set<Int>()
        for row in rows {
            let (index, statementChecksum, fileChecksum) = try row.decode((Int, String?, String).self)
            let same: Bool
            if index < statements.count, let statementChecksum {
                same = statementChecksum == Self.checksum(statements[index])
            } else {
                same = index < statements.count && fileChecksum == file.checksum // recorded before statement checksums
            }
            guard same else {
                let line = index < statements.count ? " at line \(statements[index].line)" : ""
                throw MigratorError.verification(
                    "\(file.fileName) was edited after a partial run: statement \(index + 1)\(line) already ran, but the file no longer holds that statement as it ran, so bbmigrate cannot tell what is left to do",
                    fix: "restore \(file.fileName) as it was (git checkout) and run bbmigrate up again; or finish it by hand, then DELETE FROM bbmigrate.statement_progress WHERE version = \(file.version) and record it with bbmigrate repair after it is applied")
            }
            done.insert(index)
        }
        return done
    }

    /// An earlier run's concurrent build of this very index failed and could not clean up
    /// (its blocker still held a lock): drop that INVALID index now, so the statement can run.
    func dropInvalidLeftover(of statement: SQLScript.Statement) async throws {
        guard let (schema, name) = statement.concurrentIndexName else { return }
        let connection = session.connection
        // Unqualified, the index lives where the name resolves first on the search path.
        let leftover = try await connection.query("""
            SELECT n.nspname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relname = \(name) AND (NOT x.indisvalid OR NOT x.indisready)
              AND (n.nspname = \(schema) OR (\(schema) IS NULL AND n.nspname = ANY (current_schemas(false))))
            ORDER BY array_position(current_schemas(false), n.nspname::name) NULLS LAST
            LIMIT 1
            """).decodeColumn(String.self)
        for schemaName in leftover {
            try await connection.execute("DROP INDEX CONCURRENTLY IF EXISTS \(identifier: schemaName, name)")
            migrator.options.logger.info("dropped the INVALID index \(schemaName).\(name) left by an earlier failed build of \(file.fileName):\(statement.line)")
        }
    }

    /// Indexes PostgreSQL has not finished building (INVALID or not ready), by oid.
    func invalidIndexes() async throws -> Set<Int64> {
        Set(try await session.connection.query("""
            SELECT indexrelid::bigint FROM pg_index WHERE NOT indisvalid OR NOT indisready
            """).decodeColumn(Int64.self))
    }

    /// Drops the INVALID index the failed statement itself left behind (its own name, new since
    /// the statement began; another session's build in progress is never touched). Says what it
    /// did, or what to run; for a statement that names no index, only says what it sees.
    func dropIndexLeftInvalid(by statement: SQLScript.Statement, besides before: Set<Int64>) async -> String? {
        let connection = session.connection
        guard let rows = try? await connection.query("""
            SELECT x.indexrelid::bigint, n.nspname, c.relname FROM pg_index x
            JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE NOT x.indisvalid OR NOT x.indisready
            """) else { return nil }
        let own = statement.concurrentIndexName
        var notes: [String] = []
        for row in rows {
            guard let (oid, schema, name) = try? row.decode((Int64, String, String).self), !before.contains(oid) else { continue }
            guard let own, own.name == name, own.schema == nil || own.schema == schema else {
                notes.append("The index \(schema).\(name) became INVALID while this statement ran; if the statement left it (and no other session is building it), drop it: DROP INDEX CONCURRENTLY IF EXISTS \(Self.quoted(schema)).\(Self.quoted(name));")
                continue
            }
            let command = "DROP INDEX CONCURRENTLY IF EXISTS \(Self.quoted(schema)).\(Self.quoted(name));"
            do {
                try await connection.execute("DROP INDEX CONCURRENTLY IF EXISTS \(identifier: schema, name)")
                notes.append("The failed build left the INVALID index \(schema).\(name) behind; bbmigrate dropped it (\(command)).")
            } catch {
                notes.append("The failed build left the INVALID index \(schema).\(name) behind and bbmigrate could not drop it (\((error as? PostgresError)?.message ?? "\(error)")). Run: \(command)")
            }
        }
        return notes.isEmpty ? nil : notes.joined(separator: "\n")
    }

    /// `"name"` as psql would need it typed, for messages only.
    static func quoted(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

extension MigratorError {
    /// The same error with a line of what was cleaned up after it.
    func adding(_ note: String?) -> MigratorError {
        guard let note else { return self }
        switch self {
        case .verification(let message, let fix): return .verification(message + "\n" + note, fix: fix)
        case .configuration(let message, let fix): return .configuration(message + "\n" + note, fix: fix)
        case .connection(let message, let fix): return .connection(message + "\n" + note, fix: fix)
        case .lockTimeout(let message, let fix): return .lockTimeout(message + "\n" + note, fix: fix)
        case .migrationFailed(let message, let fix): return .migrationFailed(message + "\n" + note, fix: fix)
        case .partiallyApplied(let message, let fix): return .partiallyApplied(message + "\n" + note, fix: fix)
        }
    }
}
