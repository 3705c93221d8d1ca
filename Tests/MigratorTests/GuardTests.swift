import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import Testing

/// What bbmigrate refuses before anything runs: transaction control however it is written,
/// statements that cannot run in the file's transaction, meta-commands, files that are not
/// UTF-8, unsplittable files. Each refusal exits 2, names file and line, and changes nothing.
@Suite struct GuardTests {
    /// Runs `up` on a fresh database with 0001 (a good file) and 0002 (`sql`); expects a refusal
    /// naming `location`, and that not even 0001 ran.
    func expectRefused(_ sql: String, at location: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_first.sql", "CREATE TABLE first (id int);\n")
        try folder.write("0002_second.sql", sql)
        let result = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 2, "\(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stderr.contains(location), "\(result.stderr)", sourceLocation: sourceLocation)
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('first') IS NULL") == true, sourceLocation: sourceLocation)
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('bbmigrate.schema_migrations') IS NULL") == true, sourceLocation: sourceLocation)
    }

    @Test func transactionControlIsRefusedHoweverItIsWritten() async throws {
        let forms = [
            "BEGIN;", "begin transaction;", "START TRANSACTION;", "COMMIT;", "commit and chain;", "END;", "ROLLBACK;",
            "abort;", "SAVEPOINT s;", "RELEASE SAVEPOINT s;", "ROLLBACK TO SAVEPOINT s;", "PREPARE TRANSACTION 'x';",
            "COMMIT PREPARED 'x';", "ROLLBACK PREPARED 'x';",
        ]
        for form in forms {
            try await expectRefused("CREATE TABLE t (id int);\n-- undo\n\(form)\n", at: "0002_second.sql:3")
        }
        // After comments of both kinds, on the same line as other text, in any case.
        try await expectRefused("CREATE TABLE t (id int); /* c */ -- x\n  /* why */ RoLlBaCk;", at: "0002_second.sql:2")
        try await expectRefused("/* header */ -- x\nCOMMIT", at: "0002_second.sql:2")
        // Hidden where psql's heuristic merges statements (after a function named begin), and
        // spelled with a dotless ı that PostgreSQL does not fold to BEGIN (not refused: an error).
        try await expectRefused("CREATE TABLE kept (id int);\nCREATE FUNCTION begin() RETURNS int LANGUAGE sql AS 'SELECT 1';\nROLLBACK;\n", at: "0002_second.sql:2")
    }

    @Test func aStatementThatCannotRunInATransactionNeedsTheMarker() async throws {
        try await expectRefused("CREATE TABLE t (x int);\nCREATE INDEX CONCURRENTLY t_x ON t (x);\n", at: "0002_second.sql:2")
        try await expectRefused("/* build it */ VACUUM first;\n", at: "0002_second.sql:1")
        // A marked file may hold only such statements (and SET).
        try await expectRefused("-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY i ON first (id);\nCREATE TABLE oops (id int);\n", at: "0002_second.sql:3")
    }

    /// The refusal names the statement as it is written (it once printed upper-cased words cut
    /// at four: "CREATE INDEX CONCURRENTLY IF", "VACUUM ANALYZE AUTH USERS").
    @Test func aRefusedStatementIsNamedAsWritten() async throws {
        let (database, _) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_first.sql", "CREATE TABLE first (id int);\nVACUUM ANALYZE public.first;\n")
        let vacuum = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(vacuum.status == 2)
        #expect(vacuum.stderr.contains("0001_first.sql:2: VACUUM ANALYZE public.first cannot run inside a transaction"), "\(vacuum.stderr)")
        try folder.write("0001_first.sql", "CREATE TABLE first (id int);\nCREATE INDEX CONCURRENTLY IF NOT EXISTS first_id\n  ON first (id);\n")
        let index = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(index.stderr.contains("0001_first.sql:2: CREATE INDEX CONCURRENTLY IF NOT EXISTS first_id ON first (id) cannot run"), "\(index.stderr)")
    }

    /// A pg_dump file as the first migration: its `\restrict` and `\unrestrict` lines are taken
    /// as psql takes them, and the rest is applied.
    @Test func aDumpWithRestrictLinesIsApplied() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_baseline.sql", """
            \\restrict Zk3pV0aQ
            SET statement_timeout = 0;
            SELECT pg_catalog.set_config('search_path', '', false);
            CREATE TABLE public.kept (id integer NOT NULL);
            \\unrestrict Zk3pV0aQ

            """)
        let result = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('public.kept') IS NOT NULL") == true)
    }

    /// The README's "Starting from an existing database", with the server's own pg_dump: the
    /// migrated schema, dumped, is the first migration of a new database, and verify finds the
    /// two alike.
    @Test func aPgDumpOfTheSchemaIsAFirstMigrationAsTheReadmeSays() async throws {
        let (source, _) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", source.connectionString, "--dir", repositoryMigrations.path).status == 0)
        let pgDump = try ServerBinaries.locate().directory + "/pg_dump"
        let dump = try await ChildProcess.spawn([pgDump, "--schema-only", "--no-owner", "--no-privileges", "--exclude-schema=bbmigrate", source.connectionString]).result()
        try #require(dump.status == 0, "\(dump.stderr)")
        let folder = try MigrationFolder()
        try folder.write("0001_baseline.sql", dump.stdout)
        let (target, _) = try await emptyDatabase()
        let up = try await bbmigrate("up", "--url", target.connectionString, "--dir", folder.path)
        #expect(up.status == 0, "\(up.stderr)")
        let verify = try await bbmigrate("verify", "--url", target.connectionString, "--dir", folder.path)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    @Test func metaCommandsUnclosedCommentsAndNonUTF8AreRefusedWithTheirLine() async throws {
        try await expectRefused("SELECT 1;\n\\set ON_ERROR_STOP 1\nCREATE TABLE t (id int);\n", at: "0002_second.sql:2")
        try await expectRefused("CREATE TABLE a (id int);\n/* inputs come from data/*.csv */\nCREATE TABLE b (id int);\n", at: "0002_second.sql:2")
        try await expectRefused("CREATE TABLE a (v text DEFAULT 'unclosed);\n", at: "0002_second.sql:1")

        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_first.sql", "CREATE TABLE first (id int);\n")
        try (Data("CREATE TABLE t (v text);\nCOMMENT ON TABLE t IS 'caf".utf8) + Data([0xE9]) + Data("';\n".utf8))
            .write(to: folder.url.appendingPathComponent("0002_latin1.sql"))
        let result = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 2)
        #expect(result.stderr.contains("0002_latin1.sql:2: byte 52 of the file is byte 0xE9"), "\(result.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('first') IS NULL") == true)
    }

    @Test func beginAtomicBodiesAreAccepted() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_atomic.sql", """
            CREATE FUNCTION add_one(x int) RETURNS int LANGUAGE sql
            BEGIN ATOMIC
              SELECT x + 1;
            END;
            CREATE TABLE t AS SELECT add_one(41) AS v;
            """)
        let result = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try await connection.fetchValue(Int32.self, "SELECT v FROM t") == 42)
    }

    @Test func dryRunPrintsTheExactSQLWithFileAndLineAndChangesNothing() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_first.sql", "-- a table\nCREATE TABLE first (id int);\n\nINSERT INTO first VALUES (1);\n")
        try folder.write("0002_index.sql", "-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY first_id ON first (id);\n")
        let dry = try await bbmigrate("up", "--dry-run", "--url", database.connectionString, "--dir", folder.path)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("""
            BEGIN;
            SELECT set_config('lock_timeout', '10000', true);
            -- 0001_first.sql:2
            CREATE TABLE first (id int);
            -- 0001_first.sql:4
            INSERT INTO first VALUES (1);
            """), "\(dry.stdout)")
        #expect(dry.stdout.contains("-- 0002_index.sql:2\nCREATE INDEX CONCURRENTLY first_id ON first (id);"))
        #expect(dry.stdout.contains("2 migration(s) would be applied; nothing was changed"))
        let json = try await bbmigrate("up", "--dry-run", "--json", "--url", database.connectionString, "--dir", folder.path)
        let decoded = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(decoded["dry_run"] as? Bool == true)
        let files = try #require(decoded["files"] as? [[String: Any]])
        #expect(files.map { $0["in_transaction"] as? Bool } == [true, false])
        #expect((files.first?["statements"] as? [[String: Any]])?.compactMap { $0["line"] as? Int } == [2, 4])
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('first') IS NULL AND to_regclass('bbmigrate.schema_migrations') IS NULL") == true)
        // A statement ending in a -- comment gets its semicolon on a line of its own.
        try folder.write("0003_comment.sql", "INSERT INTO first VALUES (2) -- the second\n;\n")
        let commented = try await bbmigrate("up", "--dry-run", "--url", database.connectionString, "--dir", folder.path)
        #expect(commented.stdout.contains("INSERT INTO first VALUES (2) -- the second\n;"))
    }
}
