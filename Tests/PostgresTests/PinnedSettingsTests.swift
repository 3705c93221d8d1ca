import Foundation
import Postgres
import Testing

/// Text results are read the same whatever the server's configuration says: the connection
/// pins DateStyle, IntervalStyle, bytea_output and extra_float_digits when it opens (and again
/// after a pool's reset).
@Suite struct PinnedSettingsTests {
    struct Values: Decodable, Equatable {
        var at: Date
        // A Date is a Double: equal to within a microsecond is exact for these.
        static func == (a: Values, b: Values) -> Bool {
            abs(a.at.timeIntervalSince(b.at)) < 0.000_001 && a.day == b.day && a.span == b.span
                && a.blob == b.blob && a.ratio == b.ratio && a.note == b.note
        }
        var day: PostgresDate
        var span: PostgresInterval
        var blob: Data
        var ratio: Double
        var note: String
    }

    static let sql: SQL = """
        SELECT '2026-03-29 01:30:00.123456+00'::timestamptz AS at, '2026-12-31'::date AS day,
               '1 year 2 mons 3 days 04:05:06.5'::interval AS span, '\\x00ff10'::bytea AS blob,
               0.1::float8 AS ratio, 'café ☕' AS note
        """

    static let expected = Values(
        at: Date(timeIntervalSince1970: 1_774_747_800.123456), day: PostgresDate(year: 2026, month: 12, day: 31),
        span: PostgresInterval(months: 14, days: 3, microseconds: 14_706_500_000), blob: Data([0, 255, 16]), ratio: 0.1, note: "café ☕")

    /// The database's own defaults say otherwise for each setting; the text (cache off) and
    /// binary (cache on) paths, and a pooled connection after its reset, all read right.
    @Test func aServerConfiguredOtherwiseIsReadRight() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        try await admin.execute("""
            ALTER DATABASE \(identifier: database.name) SET DateStyle = 'SQL, DMY'
            """)
        try await admin.execute("ALTER DATABASE \(identifier: database.name) SET IntervalStyle = 'sql_standard'")
        try await admin.execute("ALTER DATABASE \(identifier: database.name) SET bytea_output = 'escape'")
        try await admin.execute("ALTER DATABASE \(identifier: database.name) SET extra_float_digits = 0")
        try await admin.execute("ALTER DATABASE \(identifier: database.name) SET client_encoding = 'LATIN1'")
        await admin.close()

        // The setting is really there: psql's view of a new session (no pinning) shows it.
        let unpinned = try await database.connect()
        try await unpinned.executeUnsafeRawSQL("RESET ALL") // back to the database's defaults
        #expect(try await unpinned.value(String.self, "SELECT current_setting('DateStyle')") == "SQL, DMY")
        #expect(try await unpinned.value(String.self, "SELECT '2026-12-31'::date::text") == "31/12/2026")
        await unpinned.close()

        for capacity in [0, 100] {
            var configuration = database.configuration
            configuration.statementCacheCapacity = capacity
            let connection = try await PostgresConnection.connect(configuration)
            #expect(try await connection.fetchOne(Values.self, Self.sql) == Self.expected, "cache capacity \(capacity)")
            await connection.close()

            let pool = PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 1, reset: .always))
            _ = try await pool.withConnection { try await $0.executeUnsafeRawSQL("SET DateStyle = 'German'") }
            #expect(try await pool.fetchOne(Values.self, Self.sql) == Self.expected, "pooled, cache capacity \(capacity)")
            await pool.close()
        }
    }
}
