import EmbeddedPostgres
import Foundation
import Postgres
import Testing

@Suite struct VerifyCommandTests {
    @Test func aCleanDatabaseVerifies() async throws {
        let (database, _) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("bbmigrate: verify passed"))
    }

    @Test func handMadeChangesAreDriftWithALineEach() async throws {
        let (database, connection) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        try await connection.executeUnsafeRawSQL("""
            DROP INDEX idx_events_child_time;
            ALTER TABLE events ADD COLUMN mood text;
            ALTER TABLE children ALTER COLUMN timezone SET DEFAULT 'Europe/Paris';
            """)
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 1)
        #expect(verify.stdout.contains("missing index idx_events_child_time on events"), "\(verify.stdout)")
        #expect(verify.stdout.contains("unexpected column events.mood"))
        #expect(verify.stdout.contains("column children.timezone: default differs"))
        let json = try await bbmigrate("verify", "--json", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        let decoded = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect((decoded?["problems"] as? [String])?.count == 3)
        #expect(decoded?["schema"] as? String == "drift")
        #expect(decoded?["exit_code"] as? Int == 1)
    }

    @Test func aChangedFileIsCaughtLineEndingsAreNotAChangeAndRepairRecordsWhy() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder(copyingRepository: true)
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
        let name = "0002_users.sql"
        let original = try folder.read(name)

        // CRLF and a byte-order mark alone are not a change.
        try folder.write(name, "\u{FEFF}" + original.replacingOccurrences(of: "\n", with: "\r\n"))
        let unchanged = try await bbmigrate("verify", "--url", database.connectionString, "--dir", folder.path)
        #expect(unchanged.status == 0, "\(unchanged.stdout)")

        try folder.write(name, original + "\n-- an edit after the fact\n")
        let status = try await bbmigrate("status", "--url", database.connectionString, "--dir", folder.path)
        #expect(status.stdout.contains("CHANGED       0002_users"))
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", folder.path)
        #expect(verify.status == 1)
        #expect(verify.stdout.contains("0002_users.sql: changed since it was applied"))
        let up = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(up.status == 1)

        let repair = try await bbmigrate("repair", "2", "--reason", "comment added after release", "--url", database.connectionString, "--dir", folder.path)
        #expect(repair.status == 0, "\(repair.stderr)")
        #expect(try await connection.fetchValue(String.self, "SELECT reason FROM bbmigrate.repairs WHERE version = 2") == "comment added after release")
        #expect(try await bbmigrate("verify", "--url", database.connectionString, "--dir", folder.path).status == 0)
    }
}
