import EmbeddedPostgres
import Foundation
import Postgres
import Testing

/// Through a real PgBouncer in transaction pooling mode, each transaction may run on any
/// server connection. With `statementCacheCapacity = 0` every statement is one
/// Parse/Bind/Describe/Execute/Sync exchange that PgBouncer cannot split, so 32 tasks over
/// 3 server connections all get their own answers.
@Suite struct PgBouncerTests {
    struct Row: Decodable, Equatable {
        var task: Int
        var step: Int
        var at: Date
        var note: String
    }

    @Test func thirtyTwoTasksThroughATransactionPoolerWithTheCacheOff() async throws {
        let database = try await TestPostgresDatabase.make()
        let (wrong, serverConnections) = try await Self.runTheWork(database, statementCacheCapacity: 0)
        #expect(wrong == [])
        // All of it went through PgBouncer's few server connections.
        #expect((1...3).contains(serverConnections), "\(serverConnections) server connections")
        let admin = try await database.connect()
        #expect(try await admin.value(Int.self, "SELECT count(*) FROM bounced") == 320)
        await admin.close()
    }

    /// The other way round: with named prepared statements (the cache on), the same work
    /// through the same pooler breaks: a statement name prepared on one server connection is
    /// missing or taken on the next (`26000`, `42P05`), or, worse, names another client's
    /// statement there and returns its rows. This is why PgBouncer before 1.21 needs the
    /// cache off.
    @Test func withTheCacheOnTheSameWorkBreaks() async throws {
        let database = try await TestPostgresDatabase.make()
        do {
            let (wrong, _) = try await Self.runTheWork(database, statementCacheCapacity: 100)
            #expect(!wrong.isEmpty, "the cache on behind a transaction pooler gave every answer right")
        } catch let error as PostgresError {
            // Loudly: a statement name missing or already taken on the server connection it reached.
            #expect(["42P05", "26000"].contains(error.sqlState ?? ""), "\(error)")
        } catch is PostgresDecodingError {
            // Another client's statement ran under the same name: its columns did not decode.
        }
    }

    /// Runs 32 tasks × 10 steps of statements and transactions through a transaction-mode
    /// PgBouncer; returns the steps whose answers were wrong (errors are thrown) and how many
    /// server connections PgBouncer had open at the end.
    static func runTheWork(_ database: TestDatabase, statementCacheCapacity: Int) async throws -> (wrong: [String], serverConnections: Int) {
        let admin = try await database.connect()
        try await admin.execute("CREATE TABLE bounced (task int, step int, at timestamptz, note text, PRIMARY KEY (task, step))")
        let bouncer = try PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 3)
        defer { bouncer.stop() }
        var configuration = PostgresConfiguration(bouncer.connectionString(database: database.name))
        configuration.statementCacheCapacity = statementCacheCapacity
        let pool = PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 8, acquireTimeout: .seconds(120)))
        defer { Task { await pool.close() } }
        let start = Date(timeIntervalSince1970: 1_790_000_000)

        let wrong = try await withThrowingTaskGroup(of: [String].self) { group in
            for task in 0..<32 {
                group.addTask {
                    var wrong: [String] = []
                    for step in 0..<10 {
                        // Parameters of several types, each statement on whichever server
                        // connection PgBouncer picks.
                        let sum = try await pool.fetchValue(Int.self, "SELECT \(task)::int * 1000 + \(step)::int")
                        if sum != task * 1000 + step { wrong.append("sum \(task)/\(step): \(String(describing: sum))") }
                        let at = start.addingTimeInterval(Double(task * 100 + step))
                        // A transaction stays on one server connection from BEGIN to COMMIT.
                        let (samePID, mine) = try await pool.transaction { connection in
                            let pid = try await connection.fetchValue(Int32.self, "SELECT pg_backend_pid()")
                            try await connection.execute("""
                                INSERT INTO bounced VALUES (\(task), \(step), \(at), \("task \(task) ☕"))
                                """)
                            let again = try await connection.fetchValue(Int32.self, "SELECT pg_backend_pid()")
                            let mine = try await connection.fetchValue(Int.self, "SELECT count(*) FROM bounced WHERE task = \(task)")
                            return (pid == again, mine)
                        }
                        if !samePID || mine != step + 1 { wrong.append("transaction \(task)/\(step)") }
                        let row = try await pool.fetchOne(Row.self, "SELECT task, step, at, note FROM bounced WHERE task = \(task) AND step = \(step)")
                        if row != Row(task: task, step: step, at: at, note: "task \(task) ☕") { wrong.append("row \(task)/\(step)") }
                    }
                    return wrong
                }
            }
            return try await group.reduce(into: [String]()) { $0 += $1 }
        }
        let serverConnections = try await admin.value(Int.self, """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
            """)
        await admin.close()
        return (wrong, serverConnections)
    }

    /// The cache-off path really is one exchange: an error in the statement leaves no
    /// half-prepared state behind, and the next statement on the same pooler works.
    @Test func aFailedStatementThroughThePoolerLeavesNothingBehind() async throws {
        let database = try await TestPostgresDatabase.make()
        let bouncer = try PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 1)
        defer { bouncer.stop() }
        var configuration = PostgresConfiguration(bouncer.connectionString(database: database.name))
        configuration.statementCacheCapacity = 0
        let connection = try await PostgresConnection.connect(configuration)
        for attempt in 0..<20 {
            await expectPostgresError(.divisionByZero) { _ = try await connection.value(Int.self, "SELECT 1 / \(0)") }
            #expect(try await connection.value(Int.self, "SELECT \(attempt) + 1") == attempt + 1)
        }
        await connection.close()
    }
}
