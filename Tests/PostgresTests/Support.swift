import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

/// A fresh database (cloned from `template1`) and a connection to it. The connection closes
/// when the test drops it.
func freshConnection() async throws -> (PostgresConnection, TestDatabase) {
    let database = try await TestPostgres.shared.makeDatabase()
    return (try await database.connect(), database)
}

/// Runs `body`, expecting a `PostgresError` of `kind`; returns it for more checks.
@discardableResult
func expectPostgresError(
    _ kind: PostgresError.Kind, sourceLocation: SourceLocation = #_sourceLocation,
    isolation: isolated (any Actor)? = #isolation,
    _ body: () async throws -> Void
) async -> PostgresError? {
    do {
        try await body()
        Issue.record("expected a PostgresError of kind \(kind), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as PostgresError {
        #expect(error.kind == kind, "got \(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected a PostgresError of kind \(kind), got \(type(of: error)): \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

extension PostgresConnection {
    /// The single value of a one-row, one-column result (test helper).
    func value<T: PostgresDecodable & Sendable>(_ type: T.Type, _ sql: SQL) async throws -> T {
        let rows = try await query(sql)
        let row = try #require(rows.first)
        return try row.decode(T.self, at: 0)
    }
}
