import EmbeddedPostgres
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

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

    /// What pg_dump shows and verify once missed: a column's statistics target and storage,
    /// and a privilege the owner revoked from itself. A GRANT then REVOKE that leaves the
    /// defaults is no drift.
    @Test func statisticsStorageAndTheOwnersOwnPrivilegesAreCompared() async throws {
        let (database, connection) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        try await connection.executeUnsafeRawSQL("""
            GRANT SELECT ON children TO PUBLIC;
            REVOKE SELECT ON children FROM PUBLIC;
            """)
        let same = try await bbmigrate("verify", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(same.status == 0, "\(same.stdout)")
        try await connection.executeUnsafeRawSQL("""
            ALTER TABLE events ALTER COLUMN notes SET STATISTICS 500;
            ALTER TABLE events ALTER COLUMN notes SET STORAGE EXTERNAL;
            REVOKE DELETE ON users FROM CURRENT_USER;
            """)
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 1)
        #expect(verify.stdout.contains("column events.notes: statistics target differs"), "\(verify.stdout)")
        #expect(verify.stdout.contains("column events.notes: storage differs"), "\(verify.stdout)")
        #expect(verify.stdout.contains("grants on table users to its owner differ (expected: the default (all); found: INSERT, MAINTAIN") || verify.stdout.contains("grants on table users to its owner differ (expected: the default (all); found: INSERT, REFERENCES"), "\(verify.stdout)")
        // The dump shows them too, so a schema file in review does.
        let dump = try await bbmigrate("dump", "--url", database.connectionString)
        #expect(dump.stdout.contains("ALTER TABLE events ALTER COLUMN notes SET STATISTICS 500;"), "\(dump.stdout.suffix(2000))")
        #expect(dump.stdout.contains("ALTER TABLE events ALTER COLUMN notes SET STORAGE EXTERNAL;"))
        #expect(dump.stdout.contains("-- the owner's own privileges on table users, not the default: INSERT"))
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

    @Test func verifyWaitsForARunningUpAndSaysSoInsteadOfReportingDrift() async throws {
        let (database, connection) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        let key = try #require(try await connection.fetchValue(Int64.self, "SELECT hashtextextended(current_database() || '/bbmigrate.schema_migrations', 0)"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT pg_try_advisory_lock(\(key))") == true)
        // What a half-done up would look like: a table no migration made yet.
        try await connection.execute("CREATE TABLE half_done (id int)")
        let verify = try await bbmigrate("verify", "--lock-timeout", "1", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 4, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stderr.contains("another bbmigrate run is migrating"))
        #expect(verify.stderr.contains("server process \(await connection.backendPID)"))
        #expect(!verify.stdout.contains("half_done"))
    }

    @Test func otherSessionsTempTablesAndExtensionObjectsAreNotDrift() async throws {
        let (database, connection) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        let other = try await database.connect()
        try await other.execute("CREATE TEMP TABLE someone_elses_scratch (id int PRIMARY KEY)")
        try await connection.execute("CREATE EXTENSION pg_stat_statements")
        try await connection.execute("CREATE SCHEMA audit")
        try await connection.execute("CREATE TABLE audit.log (id int)")
        let verify = try await bbmigrate("verify", "--json", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 1)
        let problems = try #require(try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [String: Any])["problems"] as? [String]
        #expect(problems?.sorted() == [
            "unexpected column audit.log.id (not created by any migration)",
            "unexpected extension pg_stat_statements (not created by any migration)",
            "unexpected schema audit (not created by any migration)",
            "unexpected table audit.log (not created by any migration)",
        ])
        let ignored = try await bbmigrate(
            "verify", "--ignore-extension", "pg_stat_statements", "--ignore-schema", "audit,other",
            "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(ignored.status == 0, "\(ignored.stdout)")
        await other.close()
    }

    @Test func everyKindOfHandMadeChangeIsReported() async throws {
        let (database, connection) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        let role = "bb_drift_\(UInt32.random(in: 0...UInt32.max))"
        try await connection.execute("CREATE ROLE \(identifier: role)")
        try await connection.executeUnsafeRawSQL("""
            CREATE POLICY own_children ON children USING (true);
            ALTER TABLE children ENABLE ROW LEVEL SECURITY;
            COMMENT ON TABLE invites IS 'changed by hand';
            ALTER TABLE invites OWNER TO \(role);
            ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO \(role);
            ALTER TABLE events SET (fillfactor = 70);
            ALTER TABLE users REPLICA IDENTITY FULL;
            CREATE PUBLICATION bb_changes FOR TABLE events;
            CREATE STATISTICS events_child_type (dependencies) ON child_id, event_type FROM events;
            CREATE RULE no_delete AS ON DELETE TO invites DO INSTEAD NOTHING;
            CREATE TABLE measurements (at date NOT NULL, v int) PARTITION BY RANGE (at);
            CREATE TABLE measurements_2026 PARTITION OF measurements FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
            ALTER TABLE event_history SET UNLOGGED;
            CREATE SEQUENCE bb_drift_seq;
            CREATE AGGREGATE longest(text) (sfunc = textcat, stype = text);
            """)
        // An index whose concurrent build failed.
        try await connection.executeUnsafeRawSQL("CREATE TABLE dupes (x int); INSERT INTO dupes VALUES (1), (1)")
        await #expect(throws: PostgresError.self) { try await connection.executeUnsafeRawSQL("CREATE UNIQUE INDEX CONCURRENTLY dupes_x ON dupes (x)") }
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 1)
        let expected = [
            "unexpected policy own_children on children",
            "table children: row security differs (expected: off; found: enabled)",
            "table invites: comment differs",
            "table invites: owner differs (expected: (migration user); found: \(role))",
            "default privileges for (migration user) on tables to \(role) differ (expected: none; found: SELECT)",
            "table events: options differs (expected: none; found: fillfactor=70)",
            "table users: replica identity differs (expected: default; found: full)",
            "unexpected publication bb_changes",
            "unexpected statistics events_child_type",
            "unexpected rule no_delete on invites",
            "unexpected table measurements_2026",
            "table event_history: persistence differs (expected: permanent; found: unlogged)",
            "unexpected sequence bb_drift_seq",
            "unexpected aggregate longest(text)",
            "index dupes_x on dupes is NOT READY (a CREATE INDEX CONCURRENTLY failed or is running)",
        ]
        for line in expected {
            #expect(verify.stdout.contains(line), "missing from verify: \(line)\n\(verify.stdout)")
        }
        // The owner's own default privileges are not a grant to report.
        #expect(!verify.stdout.contains("on tables to postgres"))
    }

    /// The repository's schema has no sequence since 0022 (Citus: no sequence serves a child's
    /// rows), so a changed sequence is shown on a folder of its own.
    @Test func aChangedSequenceIsReported() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_numbers.sql", "CREATE SEQUENCE ticket_numbers;")
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
        try await connection.execute("ALTER SEQUENCE ticket_numbers CACHE 10")
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", folder.path)
        #expect(verify.status == 1)
        #expect(verify.stdout.contains("sequence ticket_numbers: definition differs"), "\(verify.stdout)")
    }

    @Test func aDatabaseSearchPathIsNotDrift() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_app.sql", """
            CREATE SCHEMA app;
            CREATE TYPE app.mood AS ENUM ('calm', 'fussy');
            CREATE TABLE app.notes (id int, mood app.mood DEFAULT 'calm');
            CREATE VIEW app.calm_notes AS SELECT id FROM app.notes WHERE mood = 'calm';
            """)
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
        try await connection.execute("ALTER DATABASE \(identifier: database.name) SET search_path = app, public")
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", folder.path)
        #expect(verify.status == 0, "\(verify.stdout)")
    }

    @Test func aScratchServerThatCannotBeReachedSkipsOnlyTheSchemaPart() async throws {
        let (database, _) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        let verify = try await bbmigrate("verify", "--scratch-url", "postgresql://postgres@127.0.0.1:1/x?connect_timeout=2", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 7, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("checksums: ok\npending:   ok\nschema:    NOT CHECKED: cannot reach the server for the scratch database"))
    }

    @Test func withoutCreateDBTheRestIsCheckedAndTheSchemaPartSaysWhy() async throws {
        let (database, connection) = try await emptyDatabase()
        // The group roles are cluster-wide and this role may not create them: as in
        // production, an administrator has (else the live database lacks the grants the
        // scratch one gets, which verify rightly reports as drift).
        for group in ["babybasics_app", "babybasics_readonly", "babybasics_analytics"] {
            _ = try? await connection.execute("CREATE ROLE \(identifier: group) NOLOGIN")
        }
        let (role, asRole) = try await loginRole("bb_nocreatedb", "NOSUPERUSER NOCREATEDB", on: connection, database: database)
        try await connection.execute("ALTER DATABASE \(identifier: database.name) OWNER TO \(identifier: role)")
        try await connection.execute("ALTER SCHEMA public OWNER TO \(identifier: role)")
        #expect(try await bbmigrate("up", "--url", asRole, "--dir", repositoryMigrations.path).status == 0)
        let verify = try await bbmigrate("verify", "--url", asRole, "--dir", repositoryMigrations.path)
        #expect(verify.status == 7, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("checksums: ok\npending:   ok\nschema:    NOT CHECKED: the migration user may not create databases (no CREATEDB)"))
        #expect(verify.stdout.contains("--scratch-url"))
        // A failing check still fails (exit 1), with the schema part skipped.
        let folder = try MigrationFolder(copyingRepository: true)
        try folder.write("0099_pending.sql", "SELECT 1;")
        #expect(try await bbmigrate("verify", "--url", asRole, "--dir", folder.path).status == 1)
        // With a server where a scratch database may be built, the comparison runs.
        let scratch = try database.cluster.connectionString(database: "postgres")
        let full = try await bbmigrate("verify", "--scratch-url", scratch, "--url", asRole, "--dir", repositoryMigrations.path)
        #expect(full.status == 0, "\(full.stdout)\(full.stderr)")
    }

    @Test func aSchemaFileFromDumpIsStableAndComparedWithoutAScratchDatabase() async throws {
        let (first, firstConnection) = try await emptyDatabase()
        let (second, _) = try await emptyDatabase()
        for database in [first, second] {
            #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        }
        let folder = try MigrationFolder()
        let file = folder.url.appendingPathComponent("schema.sql").path
        let written = try await bbmigrate("dump", "--output", file, "--url", first.connectionString, "--dir", repositoryMigrations.path)
        #expect(written.status == 0, "\(written.stderr)")
        let text = try String(contentsOfFile: file, encoding: .utf8)
        #expect(text.contains("-- [index] idx_events_child_time on events\nCREATE INDEX idx_events_child_time ON public.events USING btree (child_id, start_time DESC)"))
        // The same migrations give the same text, byte for byte.
        let again = try await bbmigrate("dump", "--url", second.connectionString, "--dir", repositoryMigrations.path)
        #expect(again.stdout == text)
        #expect(try await bbmigrate("verify", "--schema-file", file, "--url", second.connectionString, "--dir", repositoryMigrations.path).status == 0)

        try await firstConnection.executeUnsafeRawSQL("DROP INDEX idx_events_child_time; COMMENT ON COLUMN users.email IS 'edited'")
        let verify = try await bbmigrate("verify", "--schema-file", file, "--url", first.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 1)
        #expect(verify.stdout.contains("schema:    FAILED (differs from schema.sql)"))
        #expect(verify.stdout.contains("missing [index] idx_events_child_time on events (it is in schema.sql)"))
        #expect(verify.stdout.contains("[table] users differs from schema.sql"))
        #expect(verify.stdout.contains("+ COMMENT ON COLUMN users.email IS 'edited';"))
    }

    @Test func aScratchDatabaseLeftByAKilledVerifyIsDroppedByTheNext() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_slow.sql", "CREATE TABLE t (id int);\nSELECT pg_sleep(20);\n")
        try folder.write("0002_fast.sql", "CREATE TABLE u (id int);\n")
        // Apply by hand what the files do, and record them, so verify has something to build.
        try await connection.executeUnsafeRawSQL("CREATE TABLE t (id int); CREATE TABLE u (id int)")
        #expect(try await bbmigrate("baseline", "2", "--url", database.connectionString, "--dir", folder.path).status == 0)
        let run = try CLIProcess(["verify", "--url", database.connectionString, "--dir", folder.path])
        try await waitFor(connection, "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' AND datname LIKE 'bbmigrate\\_scratch\\_%'")
        let scratch = try #require(try await connection.fetchValue(String.self, "SELECT datname::text FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' AND datname LIKE 'bbmigrate\\_scratch\\_%'"))
        kill(run.pid, SIGKILL)
        _ = try await run.wait()
        // Its creator is gone; its builder stops within a second (client_connection_check_interval).
        try await waitFor(connection, "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = \(scratch)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = \(scratch))") == true)
        try folder.write("0001_slow.sql", "CREATE TABLE t (id int);\nSELECT pg_sleep(0);\n")
        try await connection.execute("SELECT 1") // keep this session's pid in use
        let next = try await bbmigrate("verify", "--url", database.connectionString, "--dir", folder.path)
        #expect(next.stderr.contains("dropped \(scratch), a scratch database left by an interrupted verify"), "\(next.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = \(scratch))") == false)
    }
}
