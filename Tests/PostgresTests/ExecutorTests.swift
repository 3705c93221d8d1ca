@testable import Postgres
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Testing

/// libpq runs on the connections' I/O threads, a few of them for any number of connections,
/// and statements from several tasks on one connection each get exactly their own results.
@Suite struct ExecutorTests {
    @Test func connectionCodeRunsOnItsIOThread() async throws {
        let (connection, _) = try await freshConnection()
        #expect(await connection.onLoopThread())
        _ = try await connection.query("SELECT 1")
        #expect(await connection.onLoopThread())
    }

    @Test func concurrentTasksOnOneConnectionEachGetTheirOwnResults() async throws {
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

    @Test func aHundredConnectionsAddNoThreads() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let first = try await database.connect()
        _ = try await first.query("SELECT 1")
        let before = Self.threadCount()
        var connections: [PostgresConnection] = []
        for _ in 0..<100 { connections.append(try await database.connect()) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for connection in connections { group.addTask { _ = try await connection.query("SELECT 1") } }
            try await group.waitForAll()
        }
        let after = Self.threadCount()
        // Connecting starts a short-lived helper thread per connection (host name lookup); none stays.
        var settled = after
        for _ in 0..<100 where settled > before + 4 {
            try await Task.sleep(for: .milliseconds(20))
            settled = Self.threadCount()
        }
        #expect(settled <= before + 4, "threads went from \(before) to \(settled) with 100 connections open")
        for connection in connections { await connection.close() }
        await first.close()
    }

    /// This process's threads, from /proc, except the fault proxies that other tests run
    /// at the same time start (two threads per proxied connection, by design), and the loops
    /// other tests make for themselves.
    static func threadCount() -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { task in
            let name = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
            // Nor the loops of RunInPlaceTests, made once when those tests first run, nor the
            // short-lived helpers (connecting, cancelling) of the tests that run meanwhile.
            return !name.hasPrefix(faultProxyThreadName) && !name.hasPrefix("postgres-io-t") && !name.hasPrefix(helperThreadName)
        }.count
    }
}
