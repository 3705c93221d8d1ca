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

    /// One caller on a shared, pipelined connection is cancelled mid-statement: it gets its
    /// cancellation, the others their results, and the connection stays in service.
    @Test func aCancelledCallerOnASharedConnectionAffectsNoOther() async throws {
        let database = try await TestPostgresDatabase.make()
        let connection = try await database.connect()
        let pid = await connection.backendPID
        let slow = Task { try await connection.query("SELECT pg_sleep(0.6), 'slow'") }
        let others = (0..<20).map { index in
            Task { try await connection.fetchValue(Int.self, "SELECT \(index) * 2 FROM pg_sleep(0.02)") }
        }
        try await Task.sleep(for: .milliseconds(100))
        slow.cancel()
        await expectPostgresError(.queryCanceled) { _ = try await slow.value }
        for (index, task) in others.enumerated() {
            #expect(try await task.value == index * 2)
        }
        #expect(await connection.backendPID == pid, "the same session goes on")
        #expect(try await connection.fetchValue(Int.self, "SELECT 99") == 99)
    }

    /// Two connections, each with statements in flight; one backend is terminated. Only the
    /// statements on it fail (as connection failures, never someone else's result); the other
    /// connection's all succeed, and a pool replaces the dead one.
    @Test func aTerminatedBackendFailsOnlyItsOwnStatements() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let doomed = try await database.connect()
        let healthy = try await database.connect()
        let doomedPID = await doomed.backendPID
        let onDoomed = (0..<10).map { index in Task { try await doomed.fetchValue(Int.self, "SELECT \(index) FROM pg_sleep(0.3)") } }
        let onHealthy = (0..<10).map { index in Task { try await healthy.fetchValue(Int.self, "SELECT \(index) FROM pg_sleep(0.3)") } }
        try await waitUntil {
            try await admin.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(doomedPID) AND query LIKE '%pg_sleep%'") == 1
        }
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
        for pid in pids { try await admin.execute("SELECT pg_terminate_backend(\(pid))") }
        #expect(try await pool.fetchValue(Int.self, "SELECT 5") == 5, "the pool replaced its dead connections")
        await pool.close()
        await admin.close()
    }
}
