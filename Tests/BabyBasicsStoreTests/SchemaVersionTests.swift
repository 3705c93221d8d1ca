import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Migrator
import Postgres
import Testing

@Suite struct SchemaVersionTests {
    static let migrations = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Migrations")

    @Test func requiredVersionIsTheNewestMigrationFile() throws {
        let newest = try MigrationFile.load(from: Self.migrations).map(\.version).max()
        #expect(newest == SchemaVersion.required, "bump SchemaVersion.required when adding a migration the module relies on")
    }

    @Test func refusesANeverMigratedDatabase() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let connection = try await database.connect()
        do {
            try await SchemaVersion.check(connection)
            Issue.record("an empty database passed the schema check")
        } catch let error as SchemaVersionError {
            #expect(error.current == nil)
            #expect(error.description.contains("bbmigrate up"))
        }
    }

    /// The check runs where a service runs it: as its least-privilege role, which may not
    /// read bbmigrate's schema. Before `schema_version()` it failed with "permission denied";
    /// now it passes on the current schema and, on an older one, says the schema is too old.
    @Test func theAppRoleCanCheckTheVersion() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let migrator = Migrator(configuration: PostgresConfiguration(database.connectionString + TestCitus.firstMigrationOptions), options: .init(directory: Self.migrations))
        try await migrator.up(to: 22) // the last version before schema_version() (23)
        let app = try await PostgresConnection.connect(database.connectionString + "&options=-crole%3Dbabybasics_app")
        do {
            try await SchemaVersion.check(app)
            Issue.record("an older schema passed the check")
        } catch let error as SchemaVersionError {
            #expect(error.historyUnreadable)
            #expect(error.description.contains("bbmigrate up"))
        }
        try await migrator.up()
        try await SchemaVersion.check(app)
        #expect(try await SchemaVersion.current(app) == SchemaVersion.required)
        // Still nothing else of the history is readable by the role.
        await #expect(throws: PostgresError.self) { _ = try await app.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") }
        await app.close()
    }

    @Test func refusesAnOlderSchemaAndAcceptsTheRequiredOne() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let migrator = Migrator(configuration: PostgresConfiguration(database.connectionString + TestCitus.firstMigrationOptions), options: .init(directory: Self.migrations))
        try await migrator.up(to: SchemaVersion.required - 1)
        let connection = try await database.connect()
        do {
            try await SchemaVersion.check(connection)
            Issue.record("an older schema passed the check")
        } catch let error as SchemaVersionError {
            #expect(error.current == SchemaVersion.required - 1)
            #expect(error.description.contains("needs version \(SchemaVersion.required)"))
        }
        try await migrator.up()
        try await SchemaVersion.check(connection)
        #expect(try await SchemaVersion.current(connection) == SchemaVersion.required)
    }
}
