import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import Testing

/// bbmigrate cuts and runs a file exactly as psql does: every corpus file is applied once by
/// `psql -X -1 -v ON_ERROR_STOP=1 -f` and once by `bbmigrate up`, and the two databases must
/// end up with the same schema and the same rows; where psql fails, bbmigrate must fail too
/// and leave nothing behind.
@Suite struct DifferentialTests {
    @Test func bbmigrateAndPsqlAgreeOnEveryCorpusFile() async throws {
        let corpus = DifferentialCorpus.all()
        #expect(corpus.count >= 200)
        let psqlBinary = try #require(["/usr/bin/psql", "/usr/local/bin/psql", "/opt/homebrew/bin/psql"].first { FileManager.default.isExecutableFile(atPath: $0) })
        let (byPsql, psqlConnection) = try await emptyDatabase()
        let (byBBMigrate, bbmigrateConnection) = try await emptyDatabase()
        let (forFailures, failuresConnection) = try await emptyDatabase()
        let scratch = try MigrationFolder()
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PG") }

        // 1. psql, one file at a time, into one database (-1: a failing file leaves nothing).
        var applied: [(number: Int, sql: String)] = []
        var failed: [(number: Int, sql: String, name: String)] = []
        for (number, corpusCase) in corpus.enumerated() {
            let sql = corpusCase.sql(number: number)
            let file = scratch.url.appendingPathComponent("case_\(number).sql")
            try Data(sql.utf8).write(to: file)
            let result = try await ChildProcess.spawn(
                [psqlBinary, "-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-d", byPsql.connectionString, "-f", file.path], environment: environment).result()
            let psqlApplied = result.status == 0
            #expect(psqlApplied == (corpusCase.outcome == .applies), "psql and the corpus disagree on \(corpusCase.name): \(result.stderr)")
            if psqlApplied { applied.append((number, sql)) } else { failed.append((number, sql, corpusCase.name)) }
        }
        #expect(applied.count >= 150 && failed.count >= 15, "applied \(applied.count), failed \(failed.count)")

        // 2. bbmigrate, every file psql applied, as one folder of migrations.
        let folder = try MigrationFolder()
        for (version, entry) in applied.enumerated() {
            try folder.write("\(MigrationFile.format(version + 1))_case_\(entry.number).sql", entry.sql)
        }
        let up = try await bbmigrate("up", "--url", byBBMigrate.connectionString, "--dir", folder.path)
        #expect(up.status == 0, "\(up.stderr)")
        #expect(try await bbmigrateConnection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == applied.count)

        let expected = try await SchemaSnapshot.capture(psqlConnection)
        let actual = try await SchemaSnapshot.capture(bbmigrateConnection)
        #expect(expected.differences(from: actual) == [])
        #expect(expected.objects.count > 500, "the corpus built \(expected.objects.count) objects")
        #expect(try await rows(psqlConnection) == (try await rows(bbmigrateConnection)))

        // 3. Every file psql refused, bbmigrate refuses too, and applies nothing of it.
        for entry in failed {
            let single = try MigrationFolder()
            try single.write("0001_case_\(entry.number).sql", entry.sql)
            let result = try await bbmigrate("up", "--url", forFailures.connectionString, "--dir", single.path)
            #expect(result.status == 2 || result.status == 5, "bbmigrate exited \(result.status) on \(entry.name), which psql refuses: \(result.stderr)")
        }
        #expect(try await failuresConnection.fetchValue(Int.self, "SELECT count(*) FROM bbmigrate.schema_migrations") == 0)
        #expect(try await failuresConnection.fetchValue(Int.self, """
            SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
            """) == 0)
    }

    /// Every row of every table in `public`, as text, table by table.
    func rows(_ connection: PostgresConnection) async throws -> [String: [String]] {
        let tables = try await connection.query("""
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1
            """).decodeColumn(String.self)
        var result: [String: [String]] = [:]
        for table in tables {
            result[table] = try await connection.query("SELECT t::text FROM \(identifier: "public", table) t ORDER BY 1").decodeColumn(String.self)
        }
        return result
    }
}
