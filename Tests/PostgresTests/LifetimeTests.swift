import Foundation
import Postgres
import Synchronization
import Testing

/// Nothing outlives what it depends on: a row stream its connection's lease, a notice
/// handler its connection.
@Suite struct LifetimeTests {
    /// A stream carried out of `withConnection` must not end as if it were empty (a silently
    /// truncated export): reading it throws, saying why.
    @Test func aRowStreamUsedAfterItsLeaseThrows() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1))
        let escaped = try await pool.withConnection { try await $0.stream("SELECT n FROM generate_series(1, 100000) AS n") }
        let error = await expectPostgresError(.misuse) {
            for try await _ in escaped {}
        }
        #expect(error?.message.contains("back to the pool") == true, "\(String(describing: error))")
        // The connection went back clean.
        #expect(try await pool.fetchValue(Int.self, "SELECT 5") == 5)
        // Read inside its lease, the same stream gives every row.
        let count = try await pool.withConnection { connection in
            var rows = 0
            for try await _ in try await connection.stream("SELECT n FROM generate_series(1, 100000) AS n") { rows += 1 }
            return rows
        }
        #expect(count == 100_000)
        await pool.close()
    }

    final class Sink: Sendable {
        let notices = Mutex<[String]>([])
    }

    /// The handler (and what it captured) is released when the connection closes, even while
    /// something still holds the connection.
    @Test func aNoticeHandlerIsReleasedWhenItsConnectionCloses() async throws {
        let database = try await TestPostgresDatabase.make()
        weak var weakSink: Sink?
        let connection: PostgresConnection
        do {
            let sink = Sink()
            weakSink = sink
            var configuration = database.configuration
            configuration.noticeHandler = { [sink] notice in sink.notices.withLock { $0.append(notice.message) } }
            connection = try await PostgresConnection.connect(configuration)
            _ = try await connection.executeUnsafeRawSQL("DO $$ BEGIN RAISE NOTICE 'hello from the server'; END $$")
            #expect(sink.notices.withLock { $0 } == ["hello from the server"])
        }
        #expect(weakSink != nil, "open: the handler is alive")
        await connection.close()
        #expect(weakSink == nil, "closed: the handler and its sink are gone, though the connection object is still held")
        _ = connection
    }
}
