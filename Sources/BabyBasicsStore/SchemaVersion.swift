public import Postgres

/// The database schema version this build of the repository module was written for, and the
/// start-up check that refuses to run against an older database.
///
/// ```swift
/// let pool = PostgresPool(configuration: PostgresConfiguration(databaseURL))
/// try await pool.withConnection { try await SchemaVersion.check($0) }   // at service start-up
/// ```
public enum SchemaVersion {
    /// The newest migration (`Migrations/NNNN_…sql`) this module's SQL relies on.
    public static let required = 30

    /// The newest version recorded by `bbmigrate` in `bbmigrate.schema_migrations`, or `nil`
    /// when the database was never migrated.
    ///
    /// From migration 23 on, through `schema_version()`, which every role may call: a service
    /// checks as its least-privilege role, which cannot read `bbmigrate`'s schema. An older
    /// database is read directly (that needs the rights of the schema's owner).
    public static func current(_ connection: PostgresConnection) async throws -> Int? {
        if try await connection.fetchValue(Bool.self, "SELECT to_regprocedure('schema_version()') IS NOT NULL") == true {
            return try await connection.fetchValue(Int.self, "SELECT schema_version()")
        }
        guard try await connection.fetchValue(Bool.self, "SELECT to_regclass('bbmigrate.schema_migrations') IS NOT NULL") == true else {
            return nil
        }
        return try await connection.fetchValue(Int.self, "SELECT max(version) FROM bbmigrate.schema_migrations")
    }

    /// Throws `SchemaVersionError` unless the database is at `required` or newer.
    public static func check(_ connection: PostgresConnection) async throws {
        let current: Int?
        do {
            current = try await Self.current(connection)
        } catch let error as PostgresError where error.sqlState == "42501" {
            // Older than schema_version(), and this role may not read the history: too old.
            throw SchemaVersionError(current: nil, required: required, historyUnreadable: true)
        }
        guard let current, current >= required else {
            throw SchemaVersionError(current: current, required: required)
        }
    }
}

/// The database is older than this build of the service needs.
///
/// ```swift
/// do { try await SchemaVersion.check(connection) } catch let error as SchemaVersionError { print(error) }
/// ```
public struct SchemaVersionError: Error, Sendable, CustomStringConvertible {
    /// The database's version (`nil`: never migrated, or unreadable by this role).
    public let current: Int?
    public let required: Int
    /// The history exists but this role may not read it: the database predates
    /// `schema_version()` (migration 23), so it is older than required.
    public var historyUnreadable = false

    public init(current: Int?, required: Int, historyUnreadable: Bool = false) {
        self.current = current
        self.required = required
        self.historyUnreadable = historyUnreadable
    }

    public var description: String {
        let state = historyUnreadable
            ? "is older than schema version 23 (this role may not read its migration history)"
            : current.map { "is at schema version \($0)" } ?? "has no migration history (it was never migrated)"
        return "The database \(state), but this build of the service needs version \(required). Nothing was changed. "
            + "Run `bbmigrate up` against this database (with the same DATABASE_URL), then start the service again."
    }
}
