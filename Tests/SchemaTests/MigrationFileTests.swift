import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

@Suite struct MigrationFileTests {
    @Test func filesAreNamedNNNNSnakeCase() throws {
        let names = try migrationFiles().map(\.lastPathComponent)
        #expect(names.count >= 5)
        for name in names {
            #expect(name.wholeMatch(of: /\d{4}_[a-z0-9]+(_[a-z0-9]+)*\.sql/) != nil, "\(name)")
        }
        let versions = names.map { $0.prefix(4) }
        #expect(Set(versions).count == versions.count, "duplicate versions")
    }

    @Test func psqlAppliesEveryFileAsIs() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let psql = ["/usr/bin/psql", "/usr/local/bin/psql", "/opt/homebrew/bin/psql"].first { FileManager.default.isExecutableFile(atPath: $0) }
        let binary = try #require(psql, "psql is not installed")
        for file in try migrationFiles() {
            let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PG") }
            let result = try await ChildProcess.spawn(
                [binary, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", database.connectionString, "-f", file.path], environment: environment).result()
            #expect(result.status == 0, "psql failed on \(file.lastPathComponent): \(result.stderr)")
        }
        let connection = try await database.connect()
        let tables = try await connection.query("""
            SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1
            """).decodeColumn(String.self)
        #expect(tables == ["caregivers", "children", "event_history", "events", "invites", "sync_counters", "sync_state", "sync_tombstones", "time_zone_names", "users"])
    }

    @Test func everyTableColumnAndIndexIsCommented() async throws {
        let (connection, _) = try await migratedDatabase()
        let uncommented = try await connection.query("""
            SELECT c.relkind::text || ' ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'v') AND obj_description(c.oid, 'pg_class') IS NULL
            UNION ALL
            SELECT 'column ' || c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
              AND col_description(c.oid, a.attnum) IS NULL
            """).decodeColumn(String.self)
        #expect(uncommented.isEmpty, "missing COMMENT: \(uncommented)")
    }
}
