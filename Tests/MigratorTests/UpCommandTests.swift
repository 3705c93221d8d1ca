import EmbeddedPostgres
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Polls `condition` (a boolean query) for up to 20 s.
func waitFor(_ connection: PostgresConnection, _ condition: SQL, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    for _ in 0..<400 {
        if try await connection.fetchValue(Bool.self, condition) == true { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    Issue.record("timed out waiting for: \(condition)", sourceLocation: sourceLocation)
}

@Suite struct UpCommandTests {
    @Test func upAppliesEverythingAndASecondRunIsANoOp() async throws {
        let (database, connection) = try await emptyDatabase()
        let first = try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(first.status == 0, "\(first.stderr)")
        let appliedLines = first.stdout.split(separator: "\n").filter { $0.hasPrefix("applied ") }
        #expect(appliedLines.count == repositoryMigrationCount)
        #expect(appliedLines.first?.hasPrefix("applied 0001_extensions_and_helpers (") == true)
        #expect(first.stdout.contains("bbmigrate: applied \(repositoryMigrationCount) migration(s)"))
        let second = try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(second.status == 0)
        #expect(second.stdout.contains("nothing to apply"))
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == repositoryMigrationCount)
    }

    @Test func toStopsAtTheVersionGivenAndDryRunChangesNothing() async throws {
        let (database, connection) = try await emptyDatabase()
        let dry = try await bbmigrate("up", "--dry-run", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(dry.status == 0)
        #expect(dry.stdout.contains("-- 0009_roles_and_grants.sql: in one transaction with its history row"))
        #expect(dry.stdout.contains("-- bbmigrate: dry run: \(repositoryMigrationCount) migration(s) would be applied; nothing was changed"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('bbmigrate.schema_migrations') IS NULL AND to_regclass('users') IS NULL") == true)

        let partial = try await bbmigrate("up", "--to", "3", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(partial.status == 0)
        #expect(try await connection.query("SELECT version FROM bbmigrate.schema_migrations ORDER BY 1").decodeColumn(Int.self) == [1, 2, 3])
        let status = try await bbmigrate("status", "--json", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        let decoded = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let states = (decoded?["migrations"] as? [[String: Any]])?.compactMap { $0["state"] as? String }
        #expect(states == ["applied", "applied", "applied"] + Array(repeating: "pending", count: repositoryMigrationCount - 3))
        let gate = try await bbmigrate("status", "--exit-code", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(gate.status == 1)
        let unknown = try await bbmigrate("up", "--to", "42", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(unknown.status == 2)
    }

    @Test func eightConcurrentRunsAllSucceedAndRecordEachVersionOnce() async throws {
        let (database, connection) = try await emptyDatabase()
        let processes = try (0..<8).map { _ in try CLIProcess(["up", "--url", database.connectionString, "--dir", repositoryMigrations.path]) }
        var results: [CLIResult] = []
        for process in processes { results.append(try await process.wait()) }
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
        let counts = try await connection.query("SELECT count(*), count(DISTINCT version) FROM bbmigrate.schema_migrations")
        let (rows, distinct) = try #require(counts.first).decode((Int, Int).self)
        #expect(rows == repositoryMigrationCount && distinct == repositoryMigrationCount)
        #expect(results.filter { $0.stdout.contains("bbmigrate: applied \(repositoryMigrationCount)") }.count == 1)
    }

    @Test func aFailingFileExits5NamesFileAndLineAndLeavesNothing() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_first.sql", "CREATE TABLE first (id int);\n")
        try folder.write("0002_broken.sql", "-- a broken file\nCREATE TABLE t ();\nSELECT 1/0;\n")
        let failed = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(failed.status == 5)
        #expect(failed.stderr.contains("0002_broken.sql:3:"), "\(failed.stderr)")
        #expect(failed.stderr.contains("22012"))
        #expect(failed.stderr.contains("division by zero"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('t') IS NULL") == true)
        #expect(try await connection.query("SELECT version FROM bbmigrate.schema_migrations").decodeColumn(Int.self) == [1])
        try folder.write("0002_broken.sql", "-- fixed\nCREATE TABLE t ();\nSELECT 1/1;\n")
        let fixed = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(fixed.status == 0, "\(fixed.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('t') IS NOT NULL") == true)
    }

    @Test func aRunKilledMidMigrationLeavesNoPartialStateAndTheNextRunCompletes() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_slow.sql", "CREATE TABLE before_sleep (id int);\nSELECT pg_sleep(30);\nCREATE TABLE after_sleep (id int);\n")
        let run = try CLIProcess(["up", "--url", database.connectionString, "--dir", folder.path])
        var sleeping = false
        for _ in 0..<200 where !sleeping {
            sleeping = try await connection.fetchValue(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(30)%' AND state = 'active' AND pid <> pg_backend_pid()") == 1
            if !sleeping { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(sleeping)
        kill(run.pid, SIGKILL)
        _ = try await run.wait()
        // The server notices the dead client within client_connection_check_interval (1 s) and
        // rolls the file back, long before its 30 s sleep would end.
        try await waitFor(connection, "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == 0)
        try folder.write("0001_slow.sql", "CREATE TABLE before_sleep (id int);\nSELECT pg_sleep(0.1);\nCREATE TABLE after_sleep (id int);\n")
        let rerun = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('before_sleep') IS NOT NULL AND to_regclass('after_sleep') IS NOT NULL") == true)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == 1)
    }

    @Test func outOfOrderIsRefusedThenAppliedWithTheFlag() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_a.sql", "CREATE TABLE a (id int);")
        try folder.write("0003_c.sql", "CREATE TABLE c (id int);")
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
        try folder.write("0002_b.sql", "CREATE TABLE b (id int);")
        let refused = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("0002_b.sql") && refused.stderr.contains("--allow-out-of-order"))
        let status = try await bbmigrate("status", "--url", database.connectionString, "--dir", folder.path)
        #expect(status.stdout.contains("OUT OF ORDER  0002_b"))
        let allowed = try await bbmigrate("up", "--allow-out-of-order", "--url", database.connectionString, "--dir", folder.path)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('b') IS NOT NULL") == true)
    }

    @Test func createIndexConcurrentlyRunsOutsideATransactionEvenWhileAnotherRunnerWaits() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        // The first runner's migration blocks on advisory lock 4242, held here, so the second
        // runner is sure to find the migration lock taken.
        #expect(try await connection.fetchValue(Bool.self, "SELECT pg_try_advisory_lock(4242)") == true)
        try folder.write("0001_table.sql", "CREATE TABLE t (x int);\nINSERT INTO t SELECT generate_series(1, 1000);\nSELECT pg_advisory_lock(4242);\nSELECT pg_advisory_unlock(4242);\n")
        try folder.write("0002_index.sql", "-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY t_x_idx ON t (x);\n")
        let first = try CLIProcess(["up", "--ddl-lock-timeout", "300", "--url", database.connectionString, "--dir", folder.path])
        try await waitFor(connection, "SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_lock(4242)%'")
        let second = try CLIProcess(["up", "--url", database.connectionString, "--dir", folder.path])
        // The second runner is polling once it has looked up who holds the migration lock.
        try await waitFor(connection, "SELECT count(*) >= 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%FROM pg_locks l LEFT JOIN pg_stat_activity%' AND pid <> pg_backend_pid()")
        #expect(try await connection.fetchValue(Bool.self, "SELECT pg_advisory_unlock(4242)") == true)
        let results = [try await first.wait(), try await second.wait()]
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
        #expect(results.contains { $0.stderr.contains("waiting for the migration lock") })
        #expect(try await connection.fetchValue(Bool.self, "SELECT indisvalid FROM pg_index WHERE indexrelid = 't_x_idx'::regclass") == true)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.statement_progress") == 0)

        try folder.write("0003_mixed.sql", "-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY t_x2_idx ON t (x);\nCREATE TABLE oops (id int);\n")
        let mixed = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        #expect(mixed.status == 2)
        #expect(mixed.stderr.contains("0003_mixed.sql:3"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('t_x2_idx') IS NULL") == true)
    }

    @Test func lockTimeoutExits4AndNamesTheHolder() async throws {
        let (database, connection) = try await emptyDatabase()
        let key = try #require(try await connection.fetchValue(Int64.self, "SELECT hashtextextended(current_database() || '/bbmigrate.schema_migrations', 0)"))
        #expect(try await connection.fetchValue(Bool.self, "SELECT pg_try_advisory_lock(\(key))") == true)
        let pid = await connection.backendPID
        let result = try await bbmigrate("up", "--lock-timeout", "1", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(result.status == 4)
        #expect(result.stderr.contains("\(pid)"), "\(result.stderr)")
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('users') IS NULL") == true)
    }

    @Test func aStatementStuckBehindATableLockFailsFastWithAdvice() async throws {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_t.sql", "CREATE TABLE t (id int);")
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
        try folder.write("0002_alter.sql", "ALTER TABLE t ADD COLUMN note text;")
        try await connection.transaction { connection in
            try await connection.execute("LOCK TABLE t IN ACCESS SHARE MODE")
            let result = try await bbmigrate("up", "--ddl-lock-timeout", "1", "--url", database.connectionString, "--dir", folder.path)
            #expect(result.status == 4)
            #expect(result.stderr.contains("--ddl-lock-timeout") && result.stderr.contains("0002_alter.sql"), "\(result.stderr)")
        }
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path).status == 0)
    }

    @Test func aNonEmptyDatabaseWithoutHistoryIsRefusedAndPointsToBaseline() async throws {
        let (database, connection) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 0)
        try await connection.execute("DROP SCHEMA bbmigrate CASCADE")
        let refused = try await bbmigrate("up", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("bbmigrate baseline"))
        let baseline = try await bbmigrate("baseline", String(repositoryMigrationCount), "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(baseline.status == 0, "\(baseline.stderr)")
        let verify = try await bbmigrate("verify", "--url", database.connectionString, "--dir", repositoryMigrations.path)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(try await bbmigrate("baseline", String(repositoryMigrationCount), "--url", database.connectionString, "--dir", repositoryMigrations.path).status == 2)
    }

    @Test func withNoConfigurationUpUsesTheEmbeddedClusterAndPsqlAcceptsItsURL() async throws {
        let workspace = URL(fileURLWithPath: "/tmp/bbm-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: workspace, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: workspace) }
        let folder = workspace.appendingPathComponent("Migrations")
        try FileManager.default.copyItem(at: repositoryMigrations, to: folder)
        let up = try await bbmigrate("up", directory: workspace)
        #expect(up.status == 0, "\(up.stderr)")
        #expect(up.stderr.contains("using the embedded PostgreSQL in \(workspace.path)/.bbdata"))
        #expect(FileManager.default.fileExists(atPath: workspace.appendingPathComponent(".bbdata/data/PG_VERSION").path))
        let url = try await bbmigrate("embedded", "url", directory: workspace).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(url.hasPrefix("postgresql://"))
        let psql = try await ChildProcess.spawn(["/usr/bin/psql", "-X", "-Atc", "SELECT count(*) FROM bbmigrate.schema_migrations", url]).result()
        #expect(psql.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == String(repositoryMigrationCount), "\(psql.stderr)")
        #expect(try await bbmigrate("embedded", "stop", directory: workspace).status == 0)
        #expect(try await bbmigrate("embedded", "status", directory: workspace).status == 3)
    }

    @Test func usageErrorsExit2AndUnreachableServersExit3() async throws {
        #expect(try await bbmigrate("up", "--no-such-flag").status == 2)
        #expect(try await bbmigrate("new", "Not Snake").status == 2)
        let unreachable = try await bbmigrate("status", "--url", "postgresql://postgres:secret-pw@127.0.0.1:1/x?connect_timeout=2", "--dir", repositoryMigrations.path)
        #expect(unreachable.status == 3)
        #expect(!unreachable.stderr.contains("secret-pw"))
        let json = try await bbmigrate("status", "--json", "--url", "postgresql://127.0.0.1:1/x", "--dir", repositoryMigrations.path)
        #expect(json.status == 3)
        let decoded = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(decoded?["exit_code"] as? Int == 3)
    }

    @Test func newWritesTheNextNumberedFile() async throws {
        let folder = try MigrationFolder()
        try folder.write("0007_existing.sql", "SELECT 1;")
        let result = try await bbmigrate("new", "add_growth_table", "--dir", folder.path)
        #expect(result.status == 0)
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines).hasSuffix("0008_add_growth_table.sql"))
        #expect(try folder.read("0008_add_growth_table.sql").hasPrefix("-- 0008_add_growth_table.sql"))
    }
}
