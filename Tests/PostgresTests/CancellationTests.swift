import Foundation
import Postgres
import Testing

@Suite struct CancellationTests {
    @Test func cancellingTheTaskCancelsTheQueryOnTheServer() async throws {
        do { let (connection, database) = try await freshConnection()
            let observer = try await database.connect()
            let pid = await connection.backendPID
            let task = Task { try await connection.execute("SELECT pg_sleep(60)") }
            // Wait until the server runs it.
            var running = false
            for _ in 0..<100 where !running {
                running = try await observer.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND query = 'SELECT pg_sleep(60)' AND state = 'active'") == 1
                if !running { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(running)
            task.cancel()
            let result = await task.result
            guard case .failure(let error as PostgresError) = result else {
                Issue.record("expected a cancellation error, got \(result)")
                return
            }
            // The server's own cancellation: the statement was stopped, not left to run its 60 s.
            #expect(error.kind == .queryCanceled)
            #expect(error.sqlState == "57014")
            let stillRunning = try await observer.value(
                Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND query = 'SELECT pg_sleep(60)' AND state = 'active'")
            #expect(stillRunning == 0)
            // The connection survives a cancelled query.
            #expect(try await connection.value(Int.self, "SELECT 1") == 1)
            await observer.close()
        }
    }

    @Test func anAlreadyCancelledTaskSendsNothing() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (v int)")
            let task = Task {
                while !Task.isCancelled { await Task.yield() }
                try await connection.execute("INSERT INTO t VALUES (1)")
            }
            task.cancel()
            guard case .failure(let error as PostgresError) = await task.result else {
                Issue.record("the insert ran in a cancelled task")
                return
            }
            #expect(error.kind == .queryCanceled)
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
        }
    }
}
