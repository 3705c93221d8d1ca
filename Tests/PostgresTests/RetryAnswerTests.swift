import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

/// `PostgresError.retry` against a real server and a real (proxied) network: a wrong password
/// will not succeed; an answer lost after COMMIT is an unknown outcome (it did commit); an
/// answer lost inside a transaction, or for a statement that only prepares, is safe.
@Suite struct RetryAnswerTests {
    @Test func aWrongPasswordWillNotSucceedAndTheRightOneConnects() async throws {
        let (admin, database) = try await freshConnection()
        let role = "pw_\(database.name)"
        try await admin.execute("CREATE ROLE \(identifier: role) LOGIN PASSWORD 'right horse battery'")
        let port = try database.cluster.port()
        func url(_ password: String) -> String {
            "host='\(database.cluster.directory.path)' port=\(port) dbname=\(database.name) user=\(role) password='\(password)'"
        }
        let error = await expectPostgresError(.connectionFailure) { _ = try await PostgresConnection.connect(url("wrong")) }
        #expect(error?.retry == .willNotSucceed, "\(String(describing: error))")
        let connection = try await PostgresConnection.connect(url("right horse battery"))
        #expect(try await connection.value(String.self, "SELECT current_user") == role)
        await connection.close()
    }

    /// Connects through a proxy and makes a table to write to.
    static func proxied() async throws -> (PostgresConnection, FaultProxy, PostgresConnection) {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        try await admin.execute("CREATE TABLE written (id int PRIMARY KEY)")
        let proxy = try FaultProxy.start(in: database.cluster)
        let connection = try await PostgresConnection.connect(proxy.connectionString(database: database.name))
        return (connection, proxy, admin)
    }

    @Test func anAnswerLostAfterCommitIsAnUnknownOutcome() async throws {
        let (connection, proxy, admin) = try await Self.proxied()
        defer { proxy.stop() }
        try await connection.transaction { try await $0.execute("INSERT INTO written VALUES (\(0))") } // statements prepared
        let commit = Task {
            try await connection.transaction { connection in
                try await connection.execute("INSERT INTO written VALUES (\(1))")
                proxy.mode = .dropAnswers // what follows is the COMMIT
            }
        }
        try await waitUntil { try await admin.value(Int.self, "SELECT count(*) FROM written") == 2 }
        proxy.cutAll()
        let error = await expectPostgresError(.connectionFailure) { _ = try await commit.value }
        #expect(error?.retry == .outcomeUnknown, "\(String(describing: error))")
        #expect(error?.hint?.contains("may or may not") == true)
        await admin.close()
    }

    @Test func anAutocommitStatementLostInFlightIsAnUnknownOutcome() async throws {
        let (connection, proxy, admin) = try await Self.proxied()
        defer { proxy.stop() }
        try await connection.execute("INSERT INTO written VALUES (\(1))") // prepared: only the execution is lost below
        proxy.mode = .dropAnswers
        let insert = Task { try await connection.execute("INSERT INTO written VALUES (\(2))") }
        try await waitUntil { try await admin.value(Int.self, "SELECT count(*) FROM written") == 2 }
        proxy.cutAll()
        let error = await expectPostgresError(.connectionFailure) { _ = try await insert.value }
        #expect(error?.retry == .outcomeUnknown)
        await admin.close()
    }

    @Test func anAnswerLostInsideATransactionIsSafe() async throws {
        let (connection, proxy, admin) = try await Self.proxied()
        defer { proxy.stop() }
        try await connection.execute("INSERT INTO written VALUES (\(1))")
        try await connection.execute("BEGIN")
        proxy.mode = .dropAnswers
        let insert = Task { try await connection.execute("INSERT INTO written VALUES (\(2))") }
        // The server ran it (its row lock shows) but never committed it.
        try await waitUntil {
            try await admin.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'") == 1
        }
        proxy.cutAll()
        let error = await expectPostgresError(.connectionFailure) { _ = try await insert.value }
        #expect(error?.retry == .safe)
        try await waitUntil { try await admin.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()") == 0 }
        #expect(try await admin.value(Int.self, "SELECT count(*) FROM written") == 1)
        await admin.close()
    }

    @Test func aLostPrepareIsSafe() async throws {
        let (connection, proxy, admin) = try await Self.proxied()
        defer { proxy.stop() }
        proxy.mode = .dropAnswers
        // A statement never run on this connection: its Parse/Describe goes first and is lost.
        let insert = Task { try await connection.execute("INSERT INTO written VALUES (\(3))") }
        try await waitUntil {
            try await admin.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'INSERT INTO written%'") == 1
        }
        proxy.cutAll()
        let error = await expectPostgresError(.connectionFailure) { _ = try await insert.value }
        #expect(error?.retry == .safe)
        #expect(try await admin.value(Int.self, "SELECT count(*) FROM written") == 0)
        await admin.close()
    }
}
