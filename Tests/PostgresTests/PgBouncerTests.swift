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
        try await Self.runTheWork(database, statementCacheCapacity: 0)
    }

    /// The other way round: with named prepared statements (the cache on), the same work
    /// through the same pooler fails, with a typed error rather than a wrong answer. This is
    /// why PgBouncer before 1.21 needs the cache off.
    @Test func withTheCacheOnTheSameWorkFailsLoudly() async throws {
        let database = try await TestPostgresDatabase.make()
        let error = await #expect(throws: PostgresError.self) {
            try await Self.runTheWork(database, statementCacheCapacity: 100)
        }
        #expect(["42P05", "26000"].contains(error?.sqlState ?? ""), "\(String(describing: error))")
    }

    static func runTheWork(_ database: TestDatabase, statementCacheCapacity: Int) async throws {
        let admin = try await database.connect()
        try await admin.execute("CREATE TABLE bounced (task int, step int, at timestamptz, note text, PRIMARY KEY (task, step))")
        let bouncer = try PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 3)
        defer { bouncer.stop() }
        var configuration = PostgresConfiguration(bouncer.connectionString(database: database.name))
        configuration.statementCacheCapacity = statementCacheCapacity
        let pool = PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 8, acquireTimeout: .seconds(120)))
        let start = Date(timeIntervalSince1970: 1_790_000_000)

        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<32 {
                group.addTask {
                    for step in 0..<10 {
                        // Parameters of several types, each statement on whichever server
                        // connection PgBouncer picks.
                        let sum = try await pool.fetchValue(Int.self, "SELECT \(task)::int * 1000 + \(step)::int")
                        #expect(sum == task * 1000 + step)
                        let at = start.addingTimeInterval(Double(task * 100 + step))
                        // A transaction stays on one server connection from BEGIN to COMMIT.
                        try await pool.transaction { connection in
                            let pid = try await connection.value(Int32.self, "SELECT pg_backend_pid()")
                            try await connection.execute("""
                                INSERT INTO bounced VALUES (\(task), \(step), \(at), \("task \(task) ☕"))
                                """)
                            #expect(try await connection.value(Int32.self, "SELECT pg_backend_pid()") == pid)
                            let mine = try await connection.value(Int.self, "SELECT count(*) FROM bounced WHERE task = \(task)")
                            #expect(mine == step + 1)
                        }
                        let row = try await pool.fetchOne(Row.self, "SELECT task, step, at, note FROM bounced WHERE task = \(task) AND step = \(step)")
                        #expect(row == Row(task: task, step: step, at: at, note: "task \(task) ☕"))
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await admin.value(Int.self, "SELECT count(*) FROM bounced") == 320)
        // All of it went through PgBouncer's few server connections.
        let serverConnections = try await admin.value(Int.self, """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
            """)
        #expect((1...3).contains(serverConnections), "\(serverConnections) server connections")
        await pool.close()
        await admin.close()
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
