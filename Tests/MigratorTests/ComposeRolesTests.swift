import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import Testing

/// docker-compose.yml's roles, for real: docker/initdb/01-roles.sql as the superuser, then every
/// migration as babybasics_owner (not a superuser), then the app as babybasics_api.
@Suite struct ComposeRolesTests {
    static let initScript = repositoryMigrations.deletingLastPathComponent().appendingPathComponent("docker/initdb/01-roles.sql")

    @Test func migrationsRunAsTheNonSuperuserOwnerAndTheAppRoleIsLeastPrivilege() async throws {
        let (database, superuser) = try await emptyDatabase()
        let script = try String(contentsOf: Self.initScript, encoding: .utf8)
        try await superuser.executeUnsafeRawSQL(script)
        try await superuser.executeUnsafeRawSQL(script) // idempotent

        let ownerURL = database.connectionString.replacingOccurrences(of: "postgresql://postgres@", with: "postgresql://babybasics_owner:babybasics-owner-dev-only@")
        let owner = try await PostgresConnection.connect(ownerURL)
        #expect(try await owner.fetchValue(Bool.self, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") == false)
        let applied = try await Migrator(configuration: PostgresConfiguration(ownerURL), options: .init(directory: repositoryMigrations)).up()
        #expect(applied.count == repositoryMigrationCount)
        #expect(try await owner.fetchValue(String.self, "SELECT tableowner FROM pg_tables WHERE tablename = 'events'") == "babybasics_owner")
        await owner.close()

        let appURL = database.connectionString.replacingOccurrences(of: "postgresql://postgres@", with: "postgresql://babybasics_api:babybasics-api-dev-only@")
        let app = try await PostgresConnection.connect(appURL)
        #expect(try await app.fetchValue(Bool.self, "SELECT pg_has_role('babybasics_app', 'MEMBER')") == true)
        // The app's login carries the server's bounds, where a DBA sees them (\drds).
        #expect(try await app.fetchValue(String.self, "SHOW statement_timeout") == "10s")
        #expect(try await app.fetchValue(String.self, "SHOW lock_timeout") == "3s")
        #expect(try await app.fetchValue(String.self, "SHOW idle_in_transaction_session_timeout") == "30s")
        #expect(try await app.fetchValue(Bool.self, "SELECT has_table_privilege('events', 'INSERT')") == true)
        for refused in ["CREATE TABLE scratch (id int)", "DELETE FROM events"] {
            do {
                try await app.executeUnsafeRawSQL(refused)
                Issue.record("the app role could run: \(refused)")
            } catch let error as PostgresError {
                #expect(error.kind == .insufficientPrivilege, "\(refused): \(error)")
            }
        }
        await app.close()
    }
}
