import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import Testing

/// Managed and least-privilege servers: a database that already holds extension objects, and
/// a schema owner that is neither superuser nor CREATEDB.
@Suite struct ManagedServerTests {
    @Test func upAndBaselineWorkOnADatabaseThatAlreadyHoldsExtensionObjects() async throws {
        let (database, connection) = try await emptyDatabase()
        try await connection.execute("CREATE EXTENSION pg_stat_statements")
        let up = try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(up.status == 0, "\(up.stderr)")
        #expect(try await bbmigrate("verify", "--ignore-extension", "pg_stat_statements", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)

        // A database with the schema and the extension but no history: baseline records it.
        try await connection.execute("DROP SCHEMA bbmigrate CASCADE")
        let baseline = try await bbmigrate("baseline", String(repositoryMigrationCount), "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(baseline.status == 0, "\(baseline.stderr)")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations WHERE baselined") == repositoryMigrationCount)
    }

    @Test func aSchemaOwnerWithoutCreateOnTheDatabaseNeedsItsBookkeepingSchemaMadeForIt() async throws {
        let (database, connection) = try await emptyDatabase()
        let (owner, asOwner) = try await loginRole("bb_schema_owner", "NOSUPERUSER NOCREATEDB NOCREATEROLE", on: connection, database: database)
        try await connection.execute("ALTER SCHEMA public OWNER TO \(identifier: owner)")
        try await connection.execute("REVOKE CREATE ON DATABASE \(identifier: database.name) FROM PUBLIC")
        let refused = try await bbmigrate("up", "--url", asOwner, "--dir", repositoryMigrations.path)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("What to do: have an administrator run: CREATE SCHEMA bbmigrate AUTHORIZATION \(owner);"))
        try await connection.execute("CREATE SCHEMA bbmigrate AUTHORIZATION \(identifier: owner)")
        let up = try await bbmigrate("up", "--url", asOwner, "--dir", repositoryMigrations.path)
        #expect(up.status == 0, "\(up.stderr)")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations WHERE applied_by = \(owner)") == repositoryMigrationCount)
        let baseline = try await bbmigrate("status", "--exit-code", "--url", asOwner, "--dir", repositoryMigrations.path)
        #expect(baseline.status == 0)
    }

    @Test func aSchemaOwnerWithoutSuperuserOrCreateDBMigratesAndOwnsEverything() async throws {
        let (database, connection) = try await emptyDatabase()
        let (owner, asOwner) = try await loginRole("bb_owner", "NOSUPERUSER NOCREATEDB NOCREATEROLE", on: connection, database: database)
        try await connection.execute("ALTER DATABASE \(identifier: database.name) OWNER TO \(identifier: owner)")
        let up = try await bbmigrate("up", "--url", asOwner, "--dir", repositoryMigrations.path)
        #expect(up.status == 0, "\(up.stderr)")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations WHERE applied_by = \(owner)") == repositoryMigrationCount)
        #expect(try await connection.fetchValue(Int.self, """
            SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind = 'r' AND pg_get_userbyid(c.relowner) <> \(owner)
            """) == 0)
        #expect(try await bbmigrate("status", "--exit-code", "--url", asOwner, "--dir", repositoryMigrations.path).status == 0)
    }
}
