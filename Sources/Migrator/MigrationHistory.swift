public import Foundation
public import Postgres

/// The history table, `bbmigrate.schema_migrations`, and its companions.
///
/// - `schema_migrations`: one row per applied (or baselined) version.
/// - `repairs`: every checksum accepted on purpose with `bbmigrate repair`, and why.
/// - `statement_progress`: statements of a no-transaction file already run, so a rerun resumes.
///
/// ```swift
/// let rows = try await MigrationHistory.read(connection)
/// ```
public enum MigrationHistory {
    /// One applied version.
    ///
    /// ```swift
    /// for row in try await MigrationHistory.read(connection) { print(row.version, row.appliedAt) }
    /// ```
    public struct Row: Sendable, Codable, Equatable {
        public var version: Int
        public var name: String
        public var checksum: String
        public var checksumAlgorithm: String
        public var appliedAt: Date
        public var appliedBy: String
        public var durationMs: Int
        public var executionOrder: Int
        public var baselined: Bool
    }

    static let schemaSQL = """
        CREATE SCHEMA IF NOT EXISTS bbmigrate;
        COMMENT ON SCHEMA bbmigrate IS 'bbmigrate''s bookkeeping: which migration files were applied, when, by whom, and repairs.';
        """

    static let createSQL = """
        CREATE TABLE IF NOT EXISTS bbmigrate.schema_migrations (
            version            integer     PRIMARY KEY,
            name               text        NOT NULL,
            checksum           text        NOT NULL,
            checksum_algorithm text        NOT NULL,
            applied_at         timestamptz NOT NULL DEFAULT now(),
            applied_by         text        NOT NULL DEFAULT session_user,
            duration_ms        bigint      NOT NULL,
            execution_order    bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
            baselined          boolean     NOT NULL DEFAULT false
        );
        COMMENT ON TABLE bbmigrate.schema_migrations IS 'One row per migration file applied (or recorded by bbmigrate baseline), written in the same transaction as the file.';
        CREATE TABLE IF NOT EXISTS bbmigrate.repairs (
            id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            version      integer     NOT NULL,
            old_checksum text        NOT NULL,
            new_checksum text        NOT NULL,
            reason       text        NOT NULL CHECK (btrim(reason) <> ''),
            repaired_at  timestamptz NOT NULL DEFAULT now(),
            repaired_by  text        NOT NULL DEFAULT session_user
        );
        COMMENT ON TABLE bbmigrate.repairs IS 'Audit of bbmigrate repair: a changed migration file accepted on purpose, with the reason.';
        CREATE TABLE IF NOT EXISTS bbmigrate.statement_progress (
            version            integer     NOT NULL,
            statement_index    integer     NOT NULL,
            file_checksum      text        NOT NULL,
            applied_at         timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (version, statement_index)
        );
        COMMENT ON TABLE bbmigrate.statement_progress IS 'Statements of a -- bbmigrate:no-transaction file already run; a rerun skips them. Cleared when the file is recorded.';
        """

    /// Added after the first release: the checksum of each statement that ran, so that a file
    /// edited after a partial run cannot be half-skipped on resume.
    static let upgradeSQL = """
        ALTER TABLE bbmigrate.statement_progress ADD COLUMN IF NOT EXISTS statement_checksum text;
        COMMENT ON COLUMN bbmigrate.statement_progress.statement_checksum IS 'SHA-256 of the statement''s text as it ran; a resumed run refuses a file whose already-run statements changed.';
        """

    /// Creates the tables if missing, and adds what later versions of bbmigrate need (call
    /// while holding the migration lock). Touches nothing when everything is there, so a role
    /// without CREATE on the database can migrate once the schema exists.
    static func createOrUpgrade(_ connection: PostgresConnection, exists: Bool) async throws {
        if !exists {
            // A schema owner without CREATE on the database can still migrate once an
            // administrator has made the bookkeeping schema for it.
            let schemaExists = try await connection.fetchValue(Bool.self, "SELECT to_regnamespace('bbmigrate') IS NOT NULL") ?? false
            if !schemaExists {
                let mayCreate = try await connection.fetchValue(Bool.self, "SELECT has_database_privilege(current_database(), 'CREATE')") ?? false
                guard mayCreate else {
                    let user = try await connection.fetchValue(String.self, "SELECT current_user::text") ?? "the migration user"
                    throw MigratorError.configuration(
                        "\(user) may not create the schema bbmigrate, where bbmigrate keeps its history (no CREATE privilege on this database)",
                        fix: "have an administrator run: CREATE SCHEMA bbmigrate AUTHORIZATION \(user);  (or GRANT CREATE ON DATABASE … TO \(user))")
                }
            }
            try await connection.transaction { try await $0.executeUnsafeRawSQL((schemaExists ? "" : schemaSQL) + createSQL + upgradeSQL) }
            return
        }
        let current = try await connection.fetchValue(Bool.self, """
            SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'bbmigrate.statement_progress'::regclass
                           AND attname = 'statement_checksum' AND NOT attisdropped)
            """) ?? false
        if !current {
            try await connection.transaction { try await $0.executeUnsafeRawSQL(upgradeSQL) }
        }
    }

    /// Whether the history table exists.
    public static func exists(_ connection: PostgresConnection) async throws -> Bool {
        try await connection.fetchValue(Bool.self, "SELECT to_regclass('bbmigrate.schema_migrations') IS NOT NULL") ?? false
    }

    /// Every row, by version; empty when the table does not exist yet.
    public static func read(_ connection: PostgresConnection) async throws -> [Row] {
        guard try await exists(connection) else { return [] }
        return try await connection.fetchAll(Row.self, """
            SELECT version, name, checksum, checksum_algorithm, applied_at, applied_by, duration_ms, execution_order, baselined
            FROM bbmigrate.schema_migrations ORDER BY version
            """)
    }

    static func record(_ connection: isolated PostgresConnection, _ file: MigrationFile, durationMs: Int, baselined: Bool = false) async throws {
        try await connection.execute("""
            INSERT INTO bbmigrate.schema_migrations (version, name, checksum, checksum_algorithm, duration_ms, baselined)
            VALUES (\(file.version), \(file.name), \(file.checksum), \(MigrationFile.checksumAlgorithm), \(durationMs), \(baselined))
            """)
    }
}
