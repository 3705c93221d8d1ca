@testable import Postgres
import Testing

/// libpq calls must run on the connection's own thread, holding the actor: never on Swift's
/// cooperative pool, never beside another task's statement on the same connection.
@Suite struct ExecutorTests {
    @Test func connectionCodeRunsOnItsDedicatedThread() async throws {
        let (connection, _) = try await freshConnection()
        #expect(await connection.onDedicatedThread())
        _ = try await connection.query("SELECT 1")
        // The body of a cancellable statement (where libpq blocks) too.
        #expect(try await connection.bodyOnDedicatedThread())
    }

    @Test func concurrentTasksOnOneConnectionNeverInterleaveOnTheWire() async throws {
        let (connection, _) = try await freshConnection()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for step in 0..<50 {
                        let value = Int32(task * 1000 + step)
                        let back = try await connection.query("SELECT \(value)::int4, pg_sleep(0)").first?.decode(Int32.self, at: 0)
                        #expect(back == value)
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}
