import Foundation
import Postgres
import Testing

struct Boom: Error {}

@Suite struct TransactionTests {
    @Test func commitsOnReturnAndRollsBackOnThrow() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (v int)")
            let returned = try await connection.transaction { connection in
                try await connection.execute("INSERT INTO t VALUES (1)")
                return "done"
            }
            #expect(returned == "done")
            await #expect(throws: Boom.self) {
                try await connection.transaction { connection in
                    try await connection.execute("INSERT INTO t VALUES (2)")
                    throw Boom()
                }
            }
            #expect(try await connection.query("SELECT v FROM t").decodeColumn(Int.self) == [1])
            #expect(await connection.isInTransaction == false)
        }
    }

    @Test func savepointRollbackKeepsTheOuterWork() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (v int)")
            try await connection.transaction { connection in
                try await connection.execute("INSERT INTO t VALUES (1)")
                await #expect(throws: Boom.self) {
                    try await connection.transaction { inner in
                        try await inner.execute("INSERT INTO t VALUES (2)")
                        throw Boom()
                    }
                }
                // A failed statement inside a savepoint does not poison the outer transaction.
                await expectPostgresError(.undefinedTable) {
                    try await connection.transaction { inner in _ = try await inner.execute("SELECT * FROM missing") }
                }
                try await connection.transaction { inner in try await inner.execute("INSERT INTO t VALUES (3)") }
            }
            #expect(try await connection.query("SELECT v FROM t ORDER BY v").decodeColumn(Int.self) == [1, 3])
        }
    }

    @Test func isolationAndReadOnlyOptions() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (v int)")
            let level = try await connection.transaction(.init(isolation: .serializable, readOnly: true)) { connection in
                try await connection.value(String.self, "SHOW transaction_isolation")
            }
            #expect(level == "serializable")
            let error = await expectPostgresError(.otherServerError) {
                try await connection.transaction(.init(readOnly: true)) { connection in
                    _ = try await connection.execute("INSERT INTO t VALUES (1)")
                }
            }
            #expect(error?.sqlState == "25006")
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
        }
    }

    @Test func aSwallowedErrorMakesCommitFailLoudly() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (v int)")
            let error = await expectPostgresError(.inFailedTransaction) {
                try await connection.transaction { connection in
                    try await connection.execute("INSERT INTO t VALUES (1)")
                    _ = try? await connection.execute("SELECT * FROM missing")
                }
            }
            #expect(error?.message.contains("nothing was saved") == true)
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
        }
    }

    @Test func anotherTaskCannotSlipIntoAnOpenTransaction() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (v int)")
            let (stream, continuation) = AsyncStream<Void>.makeStream()
            let (done, doneContinuation) = AsyncStream<Void>.makeStream()
            let owner = Task {
                try await connection.transaction { connection in
                    try await connection.execute("INSERT INTO t VALUES (1)")
                    continuation.yield()
                    for await _ in done { break }
                }
            }
            for await _ in stream { break }
            await expectPostgresError(.misuse) { try await connection.execute("INSERT INTO t VALUES (2)") }
            doneContinuation.yield()
            try await owner.value
            #expect(try await connection.query("SELECT v FROM t").decodeColumn(Int.self) == [1])
        }
    }

    @Test func cancellationRollsBack() async throws {
        do { let (connection, database) = try await freshConnection()
            let watcher = try await database.connect()
            try await connection.execute("CREATE TABLE t (v int)")
            let task = Task {
                try await connection.transaction { connection in
                    try await connection.execute("INSERT INTO t VALUES (1)")
                    try await connection.execute("SELECT pg_sleep(10)")
                }
            }
            // Cancelled while the sleep runs inside the transaction (seen on the server).
            try await waitUntil {
                try await watcher.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'SELECT pg_sleep(10)' AND state = 'active'") == 1
            }
            task.cancel()
            let result = await task.result
            guard case .failure(let error as PostgresError) = result else {
                Issue.record("expected a cancellation error, got \(result)")
                return
            }
            #expect(error.kind == .queryCanceled)
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
        }
    }
}
