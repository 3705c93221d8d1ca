@testable import Postgres
import Dispatch
import PostgresTestKit
import Synchronization
import Testing

/// A pool's shared statement that is already prepared goes from its caller's thread, and its
/// answer comes straight back there (`PostgresConnection.queryFromCaller`). Everything else it
/// might meet takes the isolated path, which keeps its checks: these tests show both.
@Suite struct CallerThreadQueryTests {
    /// Loops of these tests' own: one is held busy on purpose below.
    static let gatedLoops = EventLoopGroup(count: 1, named: "postgres-io-t10", longestSleep: .seconds(1))

    /// A pool of one connection (every call meets the same statement cache) and that connection.
    private func onePool(_ configure: (inout PostgresConfiguration) -> Void = { _ in }, loops: EventLoopGroup? = nil) async throws -> (PostgresPool, PostgresConnection) {
        let database = try await TestPostgres.shared.makeDatabase()
        var configuration = database.configuration
        configure(&configuration)
        let options = PoolOptions(maximumConnections: 1, acquireTimeout: .seconds(120))
        let pool = loops.map { PostgresPool(configuration: configuration, options: options, loops: $0) }
            ?? PostgresPool(configuration: configuration, options: options)
        let connection = try await pool.withConnection { $0 }
        return (pool, connection)
    }

    private func queuedFromCaller(_ connection: PostgresConnection) -> Int {
        connection.core.mirror.queuedFromCaller.load(ordering: .relaxed)
    }

    @Test func aPreparedStatementGoesFromTheCallersThreadAndItsFirstUseIsPrepared() async throws {
        let (pool, connection) = try await onePool()
        // First use on this connection: the isolated path prepares it.
        #expect(try await pool.query("SELECT \(Int32(1))::int4").first?.decode(Int32.self, at: 0) == 1)
        #expect(queuedFromCaller(connection) == 0)
        for value in Int32(2)...5 {
            #expect(try await pool.query("SELECT \(value)::int4").first?.decode(Int32.self, at: 0) == value)
        }
        #expect(queuedFromCaller(connection) == 4)
        #expect(await connection.cachedStatementNames().count == 1)
        await pool.close()
    }

    @Test func aQuotedIdentifierTakesTheIsolatedPath() async throws {
        let (pool, connection) = try await onePool()
        for _ in 0..<3 {
            let rows = try await pool.query("SELECT 7 AS \(identifier: "Seven Days")")
            #expect(rows.columns.map(\.name) == ["Seven Days"])
            #expect(try rows.first?.decode(Int32.self, at: 0) == 7)
        }
        // libpq quotes names on the loop: never from a caller's thread.
        #expect(queuedFromCaller(connection) == 0)
        await pool.close()
    }

    /// Behind PgBouncer nothing is prepared: every statement goes with its text, from the caller.
    @Test func withTheCacheOffEveryStatementGoesFromTheCallerUnprepared() async throws {
        let (pool, connection) = try await onePool { $0.statementCacheCapacity = 0 }
        for value in Int32(1)...3 {
            #expect(try await pool.query("SELECT \(value)::int4").first?.decode(Int32.self, at: 0) == value)
        }
        #expect(queuedFromCaller(connection) == 3)
        #expect(try await pool.fetchValue(Int.self, "SELECT count(*) FROM pg_prepared_statements") == 0)
        await pool.close()
    }

    /// A command tag that changes the session marks the connection for a reset, even when the
    /// text gave no sign of it; a PREPARE also tells the reset to deallocate.
    @Test func aSessionChangingCommandTagMarksTheConnection() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        var configuration = database.configuration
        configuration.statementCacheCapacity = 0
        let connection = try await PostgresConnection.connect(configuration)
        _ = try await connection.queryFromCaller("SELECT \(Int32(1))::int4", timeout: nil, looked: nil)
        let dirtyAfterSelect = connection.core.mirror.sessionDirty.load(ordering: .acquiring)
        #expect(!dirtyAfterSelect)
        #expect(await !connection.userPrepared)

        _ = try await connection.queryFromCaller("PREPARE mine AS SELECT 1", timeout: nil, looked: nil)
        #expect(queuedFromCaller(connection) == 2)
        let dirtyAfterPrepare = connection.core.mirror.sessionDirty.load(ordering: .acquiring)
        #expect(dirtyAfterPrepare)
        #expect(await connection.userPrepared)
        await connection.close()
    }

    @Test func aPlanTheServerInvalidatedIsPreparedAgain() async throws {
        let (pool, connection) = try await onePool()
        try await pool.execute("CREATE TABLE t (a int)")
        try await pool.execute("INSERT INTO t VALUES (\(Int32(1)))")
        for _ in 0..<2 { #expect(try await pool.query("SELECT * FROM t").columns.count == 1) }
        let before = queuedFromCaller(connection)
        try await pool.execute("ALTER TABLE t ADD COLUMN b text DEFAULT 'x'")
        let rows = try await pool.query("SELECT * FROM t")
        #expect(rows.columns.map(\.name) == ["a", "b"])
        let (a, b) = try #require(rows.first).decode((Int32, String).self)
        #expect(a == 1 && b == "x")
        #expect(queuedFromCaller(connection) == before + 1, "the stale plan was not tried from the caller first")
        await pool.close()
    }

    /// DEALLOCATE ALL outside a transaction: the statement is prepared again and runs. Inside
    /// one, the transaction is aborted by the failure: the error comes back, as from the
    /// isolated path, and after ROLLBACK the statement runs again.
    @Test func aDeallocatedStatementIsPreparedAgainOnlyOutsideATransaction() async throws {
        let (connection, _) = try await freshConnection()
        let sql: SQL = "SELECT \(Int32(1)) + 1"
        for _ in 0..<2 { _ = try await connection.queryFromCaller(sql, timeout: nil, looked: nil) }
        try await connection.executeUnsafeRawSQL("DEALLOCATE ALL")
        #expect(try await connection.queryFromCaller(sql, timeout: nil, looked: nil).first?.decode(Int32.self, at: 0) == 2)

        try await connection.executeUnsafeRawSQL("BEGIN; DEALLOCATE ALL")
        let error = await expectPostgresError(.otherServerError) {
            _ = try await connection.queryFromCaller(sql, timeout: nil, looked: nil)
        }
        #expect(error?.sqlState == "26000")
        try await connection.executeUnsafeRawSQL("ROLLBACK")
        #expect(try await connection.queryFromCaller(sql, timeout: nil, looked: nil).first?.decode(Int32.self, at: 0) == 2)
    }

    @Test func aDeadlineEndsAStatementSentFromTheCaller() async throws {
        let (pool, connection) = try await onePool()
        _ = try await pool.query("SELECT pg_sleep(\(0.0))")
        let before = queuedFromCaller(connection)
        await expectPostgresError(.timeout) {
            _ = try await pool.query("SELECT pg_sleep(\(100.0))", timeout: .milliseconds(200))
        }
        #expect(queuedFromCaller(connection) == before + 1)
        #expect(try await pool.fetchValue(Int32.self, "SELECT \(Int32(2))::int4") == 2)
        await pool.close()
    }

    @Test func cancellingTheCallerCancelsTheStatementOnTheServer() async throws {
        let (pool, connection) = try await onePool()
        let database = try await TestPostgres.shared.makeDatabase()
        _ = try await pool.query("SELECT pg_sleep(\(0.0))")
        let before = queuedFromCaller(connection)
        let pid = await connection.backendPID
        let task = Task { try await pool.query("SELECT pg_sleep(\(60.0))") }
        let observer = try await database.connect()
        var running = false
        for _ in 0..<500 where !running {
            running = try await observer.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND state = 'active'") == 1
            if !running { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(running)
        task.cancel()
        guard case .failure(let error as PostgresError) = await task.result else {
            Issue.record("expected a cancellation error")
            return
        }
        // The server's own cancellation: it ran, and was stopped.
        #expect(error.kind == .queryCanceled && error.sqlState == "57014")
        #expect(!error.message.contains("before the statement was sent"))
        #expect(queuedFromCaller(connection) == before + 1)
        #expect(try await pool.fetchValue(Int32.self, "SELECT \(Int32(3))::int4") == 3)
        await observer.close()
        await pool.close()
    }

    /// The task is cancelled while the closure that would queue its statement still waits in
    /// the loop's queue: the loop sees the cancel as it takes the closure, and sends nothing.
    /// (The same flag covers the order no test can force: a cancel between the task's check
    /// and the closure's post, whose interrupt then runs first and finds no request.)
    @Test(.timeLimit(.minutes(2))) func aCancelThatComesBeforeTheLoopQueuesTheStatementSendsNothing() async throws {
        let (pool, connection) = try await onePool(loops: Self.gatedLoops)
        let loop = Self.gatedLoops.loops[0]
        _ = try await pool.query("SELECT pg_sleep(\(0.0))")
        let before = queuedFromCaller(connection)

        let gate = await holdBusy(loop)
        let task = Task { try await pool.query("SELECT pg_sleep(\(60.0))", timeout: .seconds(30)) }
        while loop.queuedWork == 0 { await Task.yield() }
        task.cancel()
        while loop.queuedWork < 2 { await Task.yield() } // the interrupt, behind the closure
        gate.signal()

        guard case .failure(let error as PostgresError) = await task.result else {
            Issue.record("expected a cancellation error")
            return
        }
        #expect(error.kind == .queryCanceled)
        #expect(error.message.contains("before the statement was sent"))
        #expect(error.lostConnectionOutcome == .safe)
        #expect(queuedFromCaller(connection) == before)
        #expect(try await pool.fetchValue(Int32.self, "SELECT \(Int32(4))::int4") == 4)
        await pool.close()
    }

    /// A connection inside a transaction of another task's: the isolated path's check refuses
    /// the statement; once the transaction ends, it goes from the caller again.
    @Test func aTransactionOfAnotherTasksIsNotJoined() async throws {
        let (connection, _) = try await freshConnection()
        let sql: SQL = "SELECT \(Int32(5))::int4"
        _ = try await connection.queryFromCaller(sql, timeout: nil, looked: nil)
        let entered = AsyncStream<Void>.makeStream()
        let leave = AsyncStream<Void>.makeStream()
        let owner = Task {
            try await connection.transaction { connection in
                entered.continuation.yield()
                for await _ in leave.stream { break }
                return try await connection.query(sql).first?.decode(Int32.self, at: 0)
            }
        }
        for await _ in entered.stream { break }
        let before = queuedFromCaller(connection)
        await expectPostgresError(.misuse) { _ = try await connection.queryFromCaller(sql, timeout: nil, looked: nil) }
        #expect(queuedFromCaller(connection) == before)
        leave.continuation.yield()
        #expect(try await owner.value == 5)
        #expect(try await connection.queryFromCaller(sql, timeout: nil, looked: nil).first?.decode(Int32.self, at: 0) == 5)
        #expect(queuedFromCaller(connection) == before + 1)
    }

    /// A row stream still being read owns the connection: the isolated path's check refuses
    /// the statement, as it does any other.
    @Test func aStreamStillBeingReadIsNotInterrupted() async throws {
        let (connection, _) = try await freshConnection()
        let sql: SQL = "SELECT \(Int32(6))::int4"
        _ = try await connection.queryFromCaller(sql, timeout: nil, looked: nil)
        let rows = try await connection.stream("SELECT n FROM generate_series(1, 3) AS n")
        var iterator = rows.makeAsyncIterator()
        #expect(try await iterator.next()?.decode(Int32.self, at: 0) == 1)
        let before = queuedFromCaller(connection)
        await expectPostgresError(.misuse) { _ = try await connection.queryFromCaller(sql, timeout: nil, looked: nil) }
        while try await iterator.next() != nil {}
        #expect(try await connection.queryFromCaller(sql, timeout: nil, looked: nil).first?.decode(Int32.self, at: 0) == 6)
        #expect(queuedFromCaller(connection) == before + 1)
    }
}
