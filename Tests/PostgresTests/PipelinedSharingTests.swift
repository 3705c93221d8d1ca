import Foundation
import Postgres
import Testing

/// Many callers' statements pipelined on few connections: each gets exactly its own result,
/// and one caller's trouble (a cancel, a dead backend) reaches no other.
@Suite struct PipelinedSharingTests {
    /// 256 tasks × 1000 statements through a pool of 8, each task with its own statement text
    /// and its own parameters.
    @Test(.timeLimit(.minutes(5))) func twoHundredFiftySixTasksEachGetTheirOwnResults() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 8, acquireTimeout: .seconds(120)))
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for task in 0..<256 {
                group.addTask {
                    var wrong = 0
                    // Its own text: the task number is part of the SQL, not only a parameter.
                    let head = SQL(unsafeRawSQL: "SELECT \(task) AS task,")
                    for step in 0..<1000 {
                        var sql = head
                        sql.append("\(Int64(step))::int8 AS step, \("t\(task)s\(step)")::text AS tag")
                        let row = try await pool.query(sql).first
                        let (gotTask, gotStep, tag) = try row?.decode((Int, Int64, String).self) ?? (-1, Int64(-1), "")
                        if gotTask != task || gotStep != Int64(step) || tag != "t\(task)s\(step)" {
                            wrong += 1
                        }
                    }
                    return wrong
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
        #expect(pool.statistics.open <= 8)
        await pool.close()
    }

    /// Callers that run on the pool's I/O thread (task-executor preference) get connections of
    /// that thread and exactly their own results, transactions included.
    @Test func callersOnThePoolsIOThreadGetTheirOwnResults() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 4, acquireTimeout: .seconds(60)))
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for task in 0..<64 {
                group.addTask(executorPreference: pool.taskExecutor) {
                    var wrong = 0
                    for step in 0..<100 {
                        if try await pool.fetchValue(Int.self, "SELECT \(task) * 1000 + \(step)") != task * 1000 + step { wrong += 1 }
                    }
                    let sum = try await pool.transaction { connection in
                        try await connection.fetchValue(Int.self, "SELECT sum(n)::int8 FROM generate_series(1, \(task)) AS n")
                    }
                    if (sum ?? 0) != task * (task + 1) / 2 { wrong += 1 }
                    return wrong
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
        #expect(pool.statistics.open <= 4)
        await pool.close()
    }

    /// One caller on a shared, pipelined connection is cancelled mid-statement: it gets its
    /// cancellation, the others their results, and the connection stays in service.
    ///
    /// The statement waits for a lock the test holds (not for a time), so the cancel always
    /// comes while it runs, however loaded the machine; the lock is let go once the cancel
    /// has been answered.
    @Test(.timeLimit(.minutes(2))) func aCancelledCallerOnASharedConnectionAffectsNoOther() async throws {
        let database = try await TestPostgresDatabase.make()
        let connection = try await database.connect()
        let watcher = try await database.connect()
        try await watcher.execute("SELECT pg_advisory_lock(4242)")
        let pid = await connection.backendPID
        let slow = Task { try await connection.query("SELECT pg_advisory_xact_lock(4242), 'slow'") }
        let others = (0..<20).map { index in
            Task { try await connection.fetchValue(Int.self, "SELECT \(index) * 2 FROM pg_sleep(0.02)") }
        }
        // Cancelled while it runs on the server (waiting for the lock), with the others queued behind it.
        try await waitUntil {
            try await watcher.value(Int.self, """
                SELECT count(*) FROM pg_stat_activity
                 WHERE pid = \(pid) AND query LIKE 'SELECT pg_advisory_xact_lock%' AND state = 'active' AND wait_event_type = 'Lock'
                """) == 1
        }
        slow.cancel()
        await expectPostgresError(.queryCanceled) { _ = try await slow.value }
        try await watcher.execute("SELECT pg_advisory_unlock(4242)")
        for (index, task) in others.enumerated() {
            #expect(try await task.value == index * 2)
        }
        #expect(await connection.backendPID == pid, "the same session goes on")
        #expect(try await connection.fetchValue(Int.self, "SELECT 99") == 99)
    }

    /// Two connections, each with statements in flight behind a long one; one backend is
    /// terminated. Every statement on it fails (as a connection failure, never with someone
    /// else's result); the other connection's all succeed, and a pool replaces the dead one.
    @Test func aTerminatedBackendFailsOnlyItsOwnStatements() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let doomed = try await database.connect()
        let healthy = try await database.connect()
        let doomedPID = await doomed.backendPID
        // First the long statement on each, running on the server; then nine more behind it.
        let doomedFirst = Task { try await doomed.fetchValue(Int.self, "SELECT 0 FROM pg_sleep(29.5)") }
        let healthyFirst = Task { try await healthy.fetchValue(Int.self, "SELECT 0 FROM pg_sleep(0.5)") }
        try await waitUntil {
            try await admin.value(Int.self, """
                SELECT count(*) FROM pg_stat_activity WHERE pid = \(doomedPID) AND query LIKE '%pg_sleep%' AND state = 'active'
                """) == 1
        }
        let onDoomed = [doomedFirst] + (1..<10).map { index in Task { try await doomed.fetchValue(Int.self, "SELECT \(index)") } }
        let onHealthy = [healthyFirst] + (1..<10).map { index in Task { try await healthy.fetchValue(Int.self, "SELECT \(index)") } }
        try await admin.execute("SELECT pg_terminate_backend(\(doomedPID))")
        for task in onDoomed {
            do {
                _ = try await task.value
                Issue.record("a statement on the terminated backend succeeded")
            } catch let error as PostgresError {
                #expect([.connectionFailure, .adminShutdown].contains(error.kind), "\(error)")
            }
        }
        for (index, task) in onHealthy.enumerated() { #expect(try await task.value == index) }
        #expect(doomed.isBroken)
        await healthy.close()

        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 2))
        let pids = try await withThrowingTaskGroup(of: Int32.self) { group in
            for _ in 0..<8 { group.addTask { try await pool.fetchValue(Int32.self, "SELECT pg_backend_pid() FROM pg_sleep(0.05)") ?? 0 } }
            return try await group.reduce(into: Set<Int32>()) { $0.insert($1) }
        }
        // Both terminated, and the next call comes at once: the pool may not have noticed yet.
        for pid in pids { try await admin.execute("SELECT pg_terminate_backend(\(pid))") }
        do {
            #expect(try await pool.fetchValue(Int.self, "SELECT 5") == 5, "the pool replaced its dead connections")
        } catch let error as PostgresError {
            Issue.record("the pool did not replace its dead connections: \(error.kind), retry \(error.retry): \(error)")
        }
        await pool.close()
        await admin.close()
    }
}
