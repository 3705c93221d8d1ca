import EmbeddedPostgres
import PostgresTestKit
import Foundation
@testable import Migrator
import Postgres
import Testing

/// The working session: nothing one file sets reaches the next, the migration lock holds for
/// the whole run (and a run stops if it is lost), and a transaction pooler is refused.
@Suite struct SessionTests {
    @Test func aFilesRoleSettingsAndTempTablesDoNotLeakIntoTheNext() async throws {
        let (database, connection) = try await emptyDatabase()
        let role = "bb_leak_\(UInt32.random(in: 0...UInt32.max))"
        try await connection.execute("CREATE ROLE \(identifier: role)")
        try await connection.execute("GRANT CREATE ON SCHEMA public TO \(identifier: role)")
        let folder = try MigrationFolder()
        try folder.write("0001_as_role.sql", """
            SET ROLE \(role);
            SET search_path = pg_catalog;
            SET statement_timeout = '5min';
            CREATE TEMP TABLE scratch_notes (v text);
            CREATE TABLE public.owned_by_role (id int);
            LISTEN bb_leak;
            """)
        try folder.write("0002_next.sql", """
            DO $$
            BEGIN
              IF current_user <> session_user THEN RAISE 'role leaked: %', current_user; END IF;
              IF current_setting('statement_timeout') <> '0' THEN RAISE 'statement_timeout leaked'; END IF;
              IF current_setting('search_path') NOT LIKE '%public%' THEN RAISE 'search_path leaked'; END IF;
              IF EXISTS (SELECT FROM pg_listening_channels()) THEN RAISE 'LISTEN leaked'; END IF;
            END $$;
            CREATE TEMP TABLE scratch_notes (v text);
            CREATE TABLE owned_by_migrator (id int);
            """)
        let result = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 0, "\(result.stderr)")
        let owners = try await connection.query("""
            SELECT relname::text || ' ' || pg_get_userbyid(relowner)::text FROM pg_class WHERE relname IN ('owned_by_role', 'owned_by_migrator') ORDER BY 1
            """).decodeColumn(String.self)
        // 0002 ran as the migration user, in public, without 0001's settings, temp table or LISTEN.
        #expect(owners == ["owned_by_migrator postgres", "owned_by_role \(role)"])
        #expect(try await connection.fetchValue(String.self, "SELECT applied_by FROM bbmigrate.schema_migrations WHERE version = 2") == "postgres")
    }

    /// Which errors of a new session mean "it ended before its settings arrived, nothing was
    /// done: open another" (the idle-session killer under load), and which fail at once.
    @Test func onlyASessionEndedEarlyIsOpenedAgain() {
        var killed = PostgresError(kind: PostgresError.kind(forSQLState: "57P05"), message: "terminating connection due to idle-session timeout", sqlState: "57P05")
        #expect(MigrationSession.endedBeforeItsSettings(killed))
        killed = PostgresError(kind: .connectionFailure, message: "the connection is broken")
        killed.lostConnectionOutcome = .safe
        #expect(MigrationSession.endedBeforeItsSettings(killed))
        #expect(!MigrationSession.endedBeforeItsSettings(PostgresError(kind: .connectionFailure, message: "connection refused")))
        #expect(!MigrationSession.endedBeforeItsSettings(PostgresError(kind: .connectionFailure, message: "password authentication failed for user \"x\"", sqlState: "28P01")))
        #expect(!MigrationSession.endedBeforeItsSettings(PostgresError(kind: .syntaxError, message: "syntax error", sqlState: "42601")))
    }

    @Test func theLockSurvivesAnIdleSessionKillerAndASecondRunnerWaits() async throws {
        let (database, connection) = try await emptyDatabase()
        try await connection.execute("ALTER DATABASE \(identifier: database.name) SET idle_session_timeout = '300ms'")
        let folder = try MigrationFolder()
        try folder.write("0001_slow.sql", "CREATE TABLE a (id int);\nSELECT pg_sleep(1.5);\n")
        try folder.write("0002_slow.sql", "CREATE TABLE b (id int);\nSELECT pg_sleep(1.5);\n")
        let first = try CLIProcess(["up", "--url", database.connectionString, "--dir", folder.path])
        try await waitFor(connection, "SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(1.5)%' AND state = 'active'")
        let second = try CLIProcess(["up", "--url", database.connectionString, "--dir", folder.path])
        let results = [try await first.wait(), try await second.wait()]
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
        #expect(results.filter { $0.stdout.contains("bbmigrate: applied 2 migration(s)") }.count == 1)
        #expect(results.filter { $0.stdout.contains("nothing to apply") }.count == 1)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == 2)
    }

    @Test func aRunThatLosesItsLockStops() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_unlocks.sql", "CREATE TABLE a (id int);\nSELECT pg_advisory_unlock_all();\n")
        try folder.write("0002_never.sql", "CREATE TABLE b (id int);\n")
        let result = try await bbmigrate("up", "--json", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 4, "\(result.stderr)")
        #expect(result.stderr.contains("the migration lock was lost after 0001_unlocks.sql"))
        let decoded = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect((decoded["applied"] as? [[String: Any]])?.compactMap { $0["version"] as? Int } == [1])
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('b') IS NULL") == true)
    }

    @Test func aTransactionPoolerIsRefusedWithAFixAndASessionPoolerWorks() async throws {
        let (database, connection) = try await emptyDatabase()
        let transactionPool = try await PgBouncer.start(in: database.cluster, mode: .transaction)
        defer { transactionPool.stop() }
        let refused = try await bbmigrate("up", "--url", transactionPool.connectionString(database: database.name), "--dir", repositoryMigrations.path)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("transaction pooler"))
        #expect(refused.stderr.contains("What to do: point --url (or DATABASE_URL) for bbmigrate at the PostgreSQL server itself"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('bbmigrate.schema_migrations') IS NULL") == true)

        let sessionPool = try await PgBouncer.start(in: database.cluster, mode: .session)
        defer { sessionPool.stop() }
        let applied = try await bbmigrate("up", "--url", sessionPool.connectionString(database: database.name), "--dir", repositoryMigrations.path)
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == repositoryMigrationCount)
    }
}
