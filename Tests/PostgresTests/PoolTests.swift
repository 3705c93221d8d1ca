import Foundation
import Postgres
import Synchronization
import Testing

@Suite struct PoolTests {
    @Test func twoHundredTasksShareFourConnections() async throws {
        let database = try await TestPostgresDatabase.make()
        // Generous: the whole suite shares two cores, and this test is about sharing, not speed.
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 4, acquireTimeout: .seconds(120)))
        let pids = try await withThrowingTaskGroup(of: Int32.self) { group in
            for index in 0..<200 {
                group.addTask {
                    try await pool.withConnection { connection in
                        #expect(try await connection.value(Int.self, "SELECT \(index) + 1") == index + 1)
                        // Held a moment, so that all four connections are needed.
                        try await connection.execute("SELECT pg_sleep(0.002)")
                        return try await connection.value(Int32.self, "SELECT pg_backend_pid()")
                    }
                }
            }
            var pids = Set<Int32>()
            for try await pid in group { pids.insert(pid) }
            return pids
        }
        #expect(pids.count == 4)
        let statistics = pool.statistics
        #expect(statistics.open == 4 && statistics.idle == 4 && statistics.inUse == 0 && statistics.waiting == 0, "\(statistics)")
        await pool.close()
        #expect(pool.statistics.open == 0)
    }

    @Test func aKilledConnectionFailsClearlyAndIsReplaced() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1))
        let firstPID = try await pool.withConnection { try await $0.value(Int32.self, "SELECT pg_backend_pid()") }
        try await admin.execute("SELECT pg_terminate_backend(\(firstPID))")
        // The pool's I/O thread usually notices the dead session while it is idle, and the call
        // gets a new connection; if the call came first, it fails as safe to retry.
        do {
            try await pool.withConnection { _ = try await $0.execute("SELECT 1") }
        } catch let error as PostgresError {
            #expect([.adminShutdown, .connectionFailure].contains(error.kind))
            #expect(error.retry == .safe, "\(error)")
        }
        let secondPID = try await pool.withConnection { try await $0.value(Int32.self, "SELECT pg_backend_pid()") }
        #expect(secondPID != firstPID)
        await admin.close()
        await pool.close()
    }

    @Test func idleConnectionsAreHealthCheckedBeforeReuse() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1, healthCheckAfterIdle: .zero))
        let firstPID = try await pool.withConnection { try await $0.value(Int32.self, "SELECT pg_backend_pid()") }
        try await admin.execute("SELECT pg_terminate_backend(\(firstPID))")
        for _ in 0..<200 where try await admin.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(firstPID)") > 0 {
            try await Task.sleep(for: .milliseconds(25))
        }
        // The ping finds the dead session; the caller never sees it.
        let secondPID = try await pool.withConnection { try await $0.value(Int32.self, "SELECT pg_backend_pid()") }
        #expect(secondPID != firstPID)
        await admin.close()
        await pool.close()
    }

    @Test func acquireTimesOutWhenEveryConnectionIsBusy() async throws {
        let database = try await TestPostgresDatabase.make()
        // Opened ahead: the 200 ms acquire timeout covers connecting too, which can take longer
        // on a loaded machine.
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(minimumConnections: 1, maximumConnections: 1, acquireTimeout: .milliseconds(200)))
        try await waitUntil { pool.statistics.open == 1 && pool.statistics.idle == 1 }
        let holder = Task { try await pool.withConnection { try await $0.execute("SELECT pg_sleep(1)") } }
        try await waitUntil { pool.statistics.inUse == 1 }
        let error = await expectPostgresError(.poolTimeout) { try await pool.execute("SELECT 1") }
        #expect(error?.message.contains("maximumConnections") == true)
        _ = try await holder.value
        #expect(try await pool.execute("SELECT 1") == 1)
        await pool.close()
    }

    @Test func closeDrainsBorrowedConnectionsThenRefuses() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(minimumConnections: 1, maximumConnections: 2))
        let borrowed = Task { try await pool.withConnection { try await $0.value(Int.self, "SELECT 7 FROM pg_sleep(0.3)") } }
        try await waitUntil { pool.statistics.inUse == 1 }
        await pool.close()
        // close() returned only after the borrowed connection came back.
        #expect(try await borrowed.value == 7)
        #expect(pool.statistics.open == 0)
        await expectPostgresError(.poolClosed) { try await pool.execute("SELECT 1") }
    }

    /// FIFO: a caller waiting for a connection of its own is not overtaken by a stream of
    /// one-statement callers joining the shared connection. It is served while the stream
    /// still flows, not once it has run dry (PoolStateMachineTests proves the order itself, for
    /// every interleaving; this shows it against a real server, whatever the machine's load).
    @Test func aStreamOfSharedCallersDoesNotStarveAnExclusiveWaiter() async throws {
        let database = try await TestPostgresDatabase.make()
        // The acquire timeout is not what this is about: long enough never to end it.
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1, acquireTimeout: .seconds(600)))
        final class Flood: Sendable {
            let done = Mutex(false)
            /// Callers that ran out of statements before the exclusive waiter was served.
            let ranDry = Atomic<Int>(0)
        }
        let flood = Flood()
        let callers = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        for _ in 0..<2_000 where !flood.done.withLock({ $0 }) {
                            _ = try await pool.fetchValue(Int.self, "SELECT 1 FROM pg_sleep(0.001)")
                        }
                        if !flood.done.withLock({ $0 }) { flood.ranDry.add(1, ordering: .relaxed) }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await waitUntil { pool.statistics.inUse == 1 }
        let dryWhenServed = try await pool.withConnection { _ in flood.ranDry.load(ordering: .relaxed) }
        flood.done.withLock { $0 = true }
        #expect(dryWhenServed == 0, "the exclusive waiter was served only after \(dryWhenServed) of the 8 callers ran dry")
        try await callers.value
        await pool.close()
    }

    @Test func transactionThroughThePool() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration)
        try await pool.execute("CREATE TABLE t (v int)")
        await #expect(throws: Boom.self) {
            try await pool.transaction { connection in
                try await connection.execute("INSERT INTO t VALUES (1)")
                throw Boom()
            }
        }
        try await pool.transaction { try await $0.execute("INSERT INTO t VALUES (2)") }
        #expect(try await pool.query("SELECT v FROM t").decodeColumn(Int.self) == [2])
        await pool.close()
    }
}

import EmbeddedPostgres
import PostgresTestKit

/// Polls `condition` every 10 ms for up to 20 s.
func waitUntil(_ condition: () async throws -> Bool) async throws {
    for _ in 0..<2000 {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("condition never became true")
}

enum TestPostgresDatabase {
    static func make() async throws -> TestDatabase { try await TestPostgres.shared.makeDatabase() }
}
