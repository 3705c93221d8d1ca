import EmbeddedPostgres
import Foundation
import Postgres
import PostgresTestKit
import Testing

/// A real server whose answers reach the client one protocol message per read (a proxy holds
/// each back 10 ms): the orderings a loaded machine produces only by chance, every time. Run
/// with libpq 15 and, in make test's second pass, libpq 18 (which queues Syncs).
@Suite struct ReadSplittingTests {
    static func splitConnection() async throws -> (PostgresConnection, FaultProxy) {
        let database = try await TestPostgresDatabase.make()
        let proxy = try FaultProxy.start(in: database.cluster)
        let connection = try await PostgresConnection.connect(PostgresConfiguration(proxy.connectionString(database: database.name)))
        _ = try await connection.query("SELECT 1") // connected and quiet: the split starts at a message boundary
        proxy.mode = .oneMessagePerRead
        return (connection, proxy)
    }

    /// The deferred constraint's error and its Sync's answer arrive in separate reads: the
    /// caller gets the constraint error, and the connection goes on.
    @Test func anErrorAtTheImplicitCommitAndItsSyncInSeparateReads() async throws {
        let (connection, proxy) = try await Self.splitConnection()
        defer { proxy.stop() }
        try await connection.executeUnsafeRawSQL("""
            CREATE TABLE parent (id int PRIMARY KEY);
            CREATE TABLE child (id int PRIMARY KEY,
                parent_id int CONSTRAINT child_parent_fkey REFERENCES parent DEFERRABLE INITIALLY DEFERRED);
            INSERT INTO parent VALUES (1);
            """)
        for attempt in 0..<5 {
            let error = await expectPostgresError(.foreignKeyViolation) {
                try await connection.execute("INSERT INTO child VALUES (\(attempt), 2)")
            }
            #expect(error?.constraint == "child_parent_fkey")
            try await connection.execute("INSERT INTO child VALUES (\(attempt), 1)")
        }
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM child") == 5)
    }

    @Test func aFailingStepOfABatchAndTheAbortedRestInSeparateReads() async throws {
        let (connection, proxy) = try await Self.splitConnection()
        defer { proxy.stop() }
        try await connection.execute("CREATE TABLE t (v int PRIMARY KEY)")
        let error = await expectPostgresError(.uniqueViolation) {
            _ = try await connection.pipeline(["INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"])
        }
        #expect(error?.message.contains("statement 2 of 3") == true, "\(String(describing: error))")
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
    }

    @Test func pipelinedCallersEachGetTheirOwnAnswerOneMessageAtATime() async throws {
        let (connection, proxy) = try await Self.splitConnection()
        defer { proxy.stop() }
        let values = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for value in 0..<6 {
                group.addTask {
                    if value == 3 {
                        let error = await expectPostgresError(.divisionByZero) { _ = try await connection.query("SELECT 1 / \(value - 3)") }
                        return (value, error == nil ? -2 : -1)
                    }
                    return (value, try await connection.value(Int.self, "SELECT \(value) * 10"))
                }
            }
            return try await group.reduce(into: [Int: Int]()) { $0[$1.0] = $1.1 }
        }
        #expect(values == [0: 0, 1: 10, 2: 20, 3: -1, 4: 40, 5: 50])
    }

    @Test func aStreamsRowsEachInARead() async throws {
        let (connection, proxy) = try await Self.splitConnection()
        defer { proxy.stop() }
        var seen: [Int] = []
        for try await row in try await connection.stream("SELECT generate_series(1, 20)") {
            seen.append(try row.decode(Int.self, at: 0))
        }
        #expect(seen == Array(1...20))
        #expect(try await connection.value(Int.self, "SELECT 7") == 7)
    }
}
