import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

@Suite struct StatementCacheTests {
    @Test func rePreparesAfterAlterTable() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (a int)")
            try await connection.execute("INSERT INTO t VALUES (1)")
            #expect(try await connection.query("SELECT * FROM t").columns.count == 1)
            try await connection.execute("ALTER TABLE t ADD COLUMN b text DEFAULT 'x'")
            let rows = try await connection.query("SELECT * FROM t")
            #expect(rows.columns.map(\.name) == ["a", "b"])
            let (a, b) = try #require(rows.first).decode((Int, String).self)
            #expect(a == 1 && b == "x")
        }
    }

    @Test func rePreparesAfterDeallocateAll() async throws {
        do { let (connection, _) = try await freshConnection()
            #expect(try await connection.value(Int.self, "SELECT \(1) + 1") == 2)
            try await connection.executeUnsafeRawSQL("DEALLOCATE ALL")
            #expect(try await connection.value(Int.self, "SELECT \(1) + 1") == 2)
        }
    }

    @Test func aSmallCacheEvictsAndADisabledCacheStillWorks() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        for capacity in [0, 2] {
            var configuration = database.configuration
            configuration.statementCacheCapacity = capacity
            let connection = try await PostgresConnection.connect(configuration)
            for round in 0..<3 {
                for n in 0..<5 {
                    _ = round
                    let query = SQL.joined([SQL(unsafeRawSQL: "SELECT \(n) +"), "\(Int32(1))"], separator: " ")
                    #expect(try await connection.value(Int.self, query) == n + 1)
                }
            }
            let prepared = try await connection.value(Int.self, "SELECT count(*) FROM pg_prepared_statements")
            #expect(prepared <= capacity)
            await connection.close()
        }
    }
}
