import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import Testing

/// `-- bbmigrate:no-transaction` files: resumable, never half-skipped, and a failed concurrent
/// index build leaves no INVALID index behind.
@Suite struct NoTransactionTests {
    @Test func aFailedConcurrentBuildLeavesNoInvalidIndexAndTheRerunWorks() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_table.sql", "CREATE TABLE t (x int);\nINSERT INTO t VALUES (1), (1);\n")
        try folder.write("0002_index.sql", "-- bbmigrate:no-transaction\nCREATE UNIQUE INDEX CONCURRENTLY t_x ON t (x);\n")
        let failed = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(failed.status == 5, "\(failed.stderr)")
        #expect(failed.stderr.contains("0002_index.sql:2:"))
        #expect(failed.stderr.contains("left the INVALID index public.t_x behind; bbmigrate dropped it"), "\(failed.stderr)")
        #expect(failed.stderr.contains("Nothing of 0002_index.sql was applied"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('t_x') IS NULL") == true)
        try await connection.execute("DELETE FROM t WHERE ctid = (SELECT max(ctid) FROM t)")
        let rerun = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT indisvalid FROM pg_index WHERE indexrelid = 't_x'::regclass") == true)
    }

    @Test func aConcurrentBuildThatHitsTheLockTimeoutIsCleanedUp() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_table.sql", "CREATE TABLE t (x int);\n")
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
        try folder.write("0002_index.sql", "-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY t_x ON t (x);\n")
        // An open writing transaction: the build registers its index, then waits for this
        // transaction, and gives up after --ddl-lock-timeout.
        let writer = try await database.connect()
        try await writer.executeUnsafeRawSQL("BEGIN; INSERT INTO t VALUES (1)")
        let result = try await bbmigrate("up", "--ddl-lock-timeout", "1", "--url", database.connectionString, "--dir", folder.path)
        try await writer.executeUnsafeRawSQL("ROLLBACK")
        #expect(result.status == 4, "\(result.stderr)")
        #expect(result.stderr.contains("--ddl-lock-timeout"))
        // The blocker still held its lock, so the INVALID index could not be dropped at once:
        // the message says what to run, and the rerun drops it itself.
        #expect(result.stderr.contains("left the INVALID index public.t_x behind and bbmigrate could not drop it"), "\(result.stderr)")
        #expect(result.stderr.contains("Run: DROP INDEX CONCURRENTLY IF EXISTS \"public\".\"t_x\";"))
        let rerun = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(rerun.stderr.contains("dropped the INVALID index public.t_x left by an earlier failed build of 0002_index.sql:2"))
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM pg_index WHERE NOT indisvalid") == 0)
        #expect(try await connection.fetchValue(Bool.self, "SELECT indisvalid FROM pg_index WHERE indexrelid = 't_x'::regclass") == true)
    }

    @Test func aFilesRoleDoesNotApplyToBbmigratesOwnBookkeeping() async throws {
        let (database, connection) = try await emptyDatabase()
        let role = "bb_index_builder_\(UInt32.random(in: 0...UInt32.max))"
        try await connection.execute("CREATE ROLE \(identifier: role)")
        try await connection.execute("GRANT CREATE ON SCHEMA public TO \(identifier: role)")
        let folder = try MigrationFolder()
        try folder.write("0001_table.sql", "CREATE TABLE t (x int);\nALTER TABLE t OWNER TO \(role);\n")
        try folder.write("0002_index.sql", "-- bbmigrate:no-transaction\nSET ROLE \(role);\nCREATE INDEX CONCURRENTLY t_x ON t (x);\n")
        let result = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try await connection.fetchValue(String.self, "SELECT applied_by FROM bbmigrate.schema_migrations WHERE version = 2") == "postgres")
        #expect(try await connection.fetchValue(Bool.self, "SELECT indisvalid FROM pg_index WHERE indexrelid = 't_x'::regclass") == true)
    }

    @Test func aFailureAfterSomeStatementsIsPartiallyAppliedAndResumes() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_table.sql", "CREATE TABLE t (x int, y int);\nINSERT INTO t VALUES (1, 1), (2, 2), (2, 3);\n")
        let index = "-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY t_x ON t (x);\nCREATE UNIQUE INDEX CONCURRENTLY t_x_unique ON t (x);\n"
        try folder.write("0002_indexes.sql", index)
        let failed = try await bbmigrate("up", "--json", "--url", database.connectionString, "--dir", folder.path)
        #expect(failed.status == 6, "\(failed.stderr)")
        #expect(failed.stderr.contains("PARTIALLY APPLIED"))
        let decoded = try #require(try JSONSerialization.jsonObject(with: Data(failed.stdout.utf8)) as? [String: Any])
        #expect(decoded["ok"] as? Bool == false)
        #expect(decoded["exit_code"] as? Int == 6)
        #expect((decoded["applied"] as? [[String: Any]])?.compactMap { $0["version"] as? Int } == [1])
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.statement_progress WHERE version = 2") == 1)

        // Editing a statement that already ran: refused, nothing skipped.
        try folder.write("0002_indexes.sql", index.replacingOccurrences(of: "t_x ON t (x)", with: "t_x ON t (y)"))
        let edited = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(edited.status == 1, "\(edited.stderr)")
        #expect(edited.stderr.contains("0002_indexes.sql was edited after a partial run: statement 1 at line 2 already ran"))

        // Editing only what has not run yet is fine: the rerun resumes after statement 1.
        try folder.write("0002_indexes.sql", index.replacingOccurrences(of: "t_x_unique ON t (x)", with: "t_x_unique ON t (x, y)"))
        let resumed = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.stderr.contains("resuming 0002_indexes.sql: 1 of 2 statements already ran"))
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM pg_index WHERE indrelid = 't'::regclass AND indisvalid") == 2)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.statement_progress") == 0)
    }
}
