import EmbeddedPostgres
import PostgresTestKit
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

    /// Not told anything, the connection finds the pooler when it opens (PgBouncer's cancel
    /// key carries a process id of its own) and keeps nothing in the session: the same work
    /// with the cache on gets every answer right.
    @Test func thePoolerIsFoundWhenNobodySaysSo() async throws {
        let database = try await TestPostgresDatabase.make()
        let (wrong, _) = try await Self.runTheWork(database, statementCacheCapacity: 100, pooler: .detect)
        #expect(wrong == [])
        let bouncer = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 2)
        defer { bouncer.stop() }
        let through = try await PostgresConnection.connect(bouncer.connectionString(database: database.name))
        #expect(await through.isBehindPooler)
        _ = try await through.value(Int.self, "SELECT \(1) + 1")
        let admin = try await database.connect()
        #expect(await admin.isBehindPooler == false)
        await through.close()
        await admin.close()
    }

    /// The admin console lists the server connection a transaction ran on, and drops it once the
    /// backend has ended and PgBouncer has read that: what a test that terminates backends
    /// waits for.
    @Test func theConsoleListsServerConnectionsUntilTheirBackendEnds() async throws {
        let database = try await TestPostgresDatabase.make()
        let bouncer = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 2)
        defer { bouncer.stop() }
        let through = try await PostgresConnection.connect(bouncer.connectionString(database: database.name))
        let pid = try await through.value(Int32.self, "SELECT pg_backend_pid()")
        #expect(try await bouncer.serverProcessIDs(database: database.name).contains(pid))
        #expect(try await bouncer.serverProcessIDs(database: "another_database").isEmpty)
        let admin = try await database.connect()
        _ = try await admin.value(Bool.self, "SELECT pg_terminate_backend(\(pid))")
        try await waitUntil { try await !bouncer.serverProcessIDs(database: database.name).contains(pid) }
        // PgBouncer opens another server connection for the next transaction.
        #expect(try await through.value(Int32.self, "SELECT pg_backend_pid()") != pid)
        await through.close()
        await admin.close()
    }

    /// The other way round: with named prepared statements (the cache on, and the connection
    /// told there is no pooler), the same work through the same pooler breaks: a statement
    /// name prepared on one server connection is missing or taken on the next (`26000`,
    /// `42P05`), or, worse, names another client's statement there and returns its rows. This
    /// is why PgBouncer before 1.21 needs the cache off.
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
    static func runTheWork(_ database: TestDatabase, statementCacheCapacity: Int, pooler: PostgresConfiguration.Pooler = .none) async throws -> (wrong: [String], serverConnections: Int) {
        let admin = try await database.connect()
        try await admin.execute("CREATE TABLE bounced (task int, step int, at timestamptz, note text, PRIMARY KEY (task, step))")
        let bouncer = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 3)
        defer { bouncer.stop() }
        var configuration = PostgresConfiguration(bouncer.connectionString(database: database.name))
        configuration.statementCacheCapacity = statementCacheCapacity
        configuration.pooler = pooler
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

    /// `LISTEN` through a transaction pooler would hear nothing: it is refused with a message
    /// that says to connect directly, and a listener reports it and ends instead of retrying
    /// forever. Directly, the same listener hears notifications (the good case).
    @Test func listeningThroughAPoolerFailsClearly() async throws {
        let database = try await TestPostgresDatabase.make()
        let bouncer = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 2)
        defer { bouncer.stop() }
        let through = try await PostgresConnection.connect(bouncer.connectionString(database: database.name))
        do {
            _ = try await through.listen("child_changed")
            Issue.record("LISTEN through PgBouncer was accepted")
        } catch let error as PostgresError {
            #expect(error.kind == .misuse)
            #expect(error.message.contains("connection to PostgreSQL itself"))
        }
        await through.close()

        let capture = LogCapture()
        var configuration = PostgresConfiguration(bouncer.connectionString(database: database.name))
        configuration.logger = capture.logger(level: .info)
        var events: [PostgresListener.Event] = []
        for await event in PostgresListener(configuration: configuration, channel: "child_changed").events() { events.append(event) }
        #expect(events.count == 1)
        guard case .failed(let reason)? = events.first else { Issue.record("\(events)"); return }
        #expect(reason.contains("pooler"))
        #expect(capture.records.contains { $0.level == .error && $0.message == "cannot listen" })

        // Directly, it listens and hears.
        let direct = PostgresListener(configuration: database.configuration, channel: "child_changed").events()
        var iterator = direct.makeAsyncIterator()
        #expect(await iterator.next() == .listening)
        let sender = try await database.connect()
        try await sender.notify("child_changed", payload: "hello")
        guard case .notification(let heard)? = await iterator.next() else { Issue.record("no notification"); return }
        #expect(heard.payload == "hello")
        await sender.close()
    }

    /// Told it sits behind a transaction pooler, a configuration that would need the session
    /// (startup options) is refused before connecting; a pooler that refuses startup options
    /// is explained; and behind a pooler a server whose output settings the client cannot pin
    /// is refused by name, where it would otherwise decode text wrongly.
    @Test func whatCannotWorkBehindAPoolerIsRefusedByName() async throws {
        let database = try await TestPostgresDatabase.make()
        let bouncer = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 2)
        defer { bouncer.stop() }
        var told = PostgresConfiguration(bouncer.connectionString(database: database.name))
        told.pooler = .transaction
        told.serverSettings = ["plan_cache_mode": "force_generic_plan"]
        await expectPostgresError(.invalidConfiguration) { _ = try await PostgresConnection.connect(told) }

        var untold = PostgresConfiguration(bouncer.connectionString(database: database.name))
        untold.serverSettings = ["plan_cache_mode": "force_generic_plan"]
        do {
            _ = try await PostgresConnection.connect(untold)
            Issue.record("PgBouncer accepted startup options")
        } catch let error as PostgresError {
            #expect(error.kind == .connectionFailure)
            #expect(error.hint?.contains("pooler = .transaction") == true, "\(error)")
        }

        // Good case: told, without startup options, it connects and answers.
        told.serverSettings = [:]
        let connection = try await PostgresConnection.connect(told)
        #expect(try await connection.value(String.self, "SELECT \("ok")") == "ok")
        await connection.close()

        // A server whose intervals come out in another style: refused behind the pooler (it
        // cannot be SET for one client there), accepted directly (where it is pinned).
        // (A database setting applies to new server sessions: a new PgBouncer opens them.)
        let admin = try await database.connect()
        try await admin.execute("ALTER DATABASE \(identifier: database.name) SET IntervalStyle = sql_standard")
        await admin.close()
        let fresh = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 2)
        defer { fresh.stop() }
        var behindFresh = PostgresConfiguration(fresh.connectionString(database: database.name))
        behindFresh.pooler = .transaction
        await expectPostgresError(.invalidConfiguration) { _ = try await PostgresConnection.connect(behindFresh) }
        let direct = try await database.connect()
        #expect(try await direct.value(String.self, "SELECT (interval '1 day 2 hours')::text") == "1 day 02:00:00")
        await direct.close()
    }

    /// The cache-off path really is one exchange: an error in the statement leaves no
    /// half-prepared state behind, and the next statement on the same pooler works.
    @Test func aFailedStatementThroughThePoolerLeavesNothingBehind() async throws {
        let database = try await TestPostgresDatabase.make()
        let bouncer = try await PgBouncer.start(in: database.cluster, mode: .transaction, poolSize: 1)
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
