import Foundation
import Postgres
import Testing

/// Arrays of every scalar, ranges, PostgreSQL enums and a composite type: through `SELECT $1`
/// and through a table column.
@Suite struct MoreTypesTests {
    @Test func arraysOfEveryScalar() async throws {
        let (connection, _) = try await freshConnection()
        let dates = [Date(timeIntervalSince1970: 1_795_000_000.25), Date(timeIntervalSince1970: 0)]
        #expect(try await connection.value([Date].self, "SELECT \(dates)") == dates)
        let days = [PostgresDate(year: 2026, month: 3, day: 8), PostgresDate(year: -4712, month: 1, day: 1)]
        #expect(try await connection.value([PostgresDate].self, "SELECT \(days)") == days)
        let amounts: [Decimal?] = [Decimal(string: "120.5"), nil, Decimal(-3)]
        #expect(try await connection.value([Decimal?].self, "SELECT \(amounts)") == amounts)
        let times = [PostgresTime(hour: 6, minute: 0), PostgresTime(hour: 23, minute: 59, second: 59, microsecond: 999_999)]
        #expect(try await connection.value([PostgresTime].self, "SELECT \(times)") == times)
        let waits = [PostgresInterval(months: 1, days: -2, microseconds: 3), PostgresInterval()]
        #expect(try await connection.value([PostgresInterval].self, "SELECT \(waits)") == waits)
        let documents = [PostgresJSON(["ml": 120]), PostgresJSON(["ml": 90])]
        #expect(try await connection.value([PostgresJSON<[String: Int]>].self, "SELECT \(documents)").map(\.value) == [["ml": 120], ["ml": 90]])
        // Through a table, and from literals (in text format: the arrays of a result with an enum).
        try await connection.execute("CREATE TABLE samples (at timestamptz[], day date[], amount numeric[])")
        try await connection.execute("INSERT INTO samples VALUES (\(dates), \(days), \(amounts))")
        let row = try #require(try await connection.query("SELECT at, day, amount FROM samples").first)
        #expect(try row.decode([Date].self, at: 0) == dates)
        #expect(try row.decode([PostgresDate].self, at: 1) == days)
        #expect(try row.decode([Decimal?].self, at: 2) == amounts)
        try await connection.execute("CREATE TYPE mood AS ENUM ('calm', 'fussy')")
        let textual = try #require(try await connection.query("SELECT 'calm'::mood, ARRAY['2026-03-08 01:02:03.5+00'::timestamptz], ARRAY['2026-03-08'::date, NULL]").first)
        #expect(textual.columns[1].format == .text)
        #expect(try textual.decode([Date].self, at: 1) == [Date(timeIntervalSince1970: 1_772_931_723.5)])
        #expect(try textual.decode([PostgresDate?].self, at: 2) == [PostgresDate(year: 2026, month: 3, day: 8), nil])
    }

    @Test func rangesLikeASleep() async throws {
        let (connection, _) = try await freshConnection()
        let start = Date(timeIntervalSince1970: 1_795_000_000)
        let end = start.addingTimeInterval(5_400)
        let sleep = PostgresRange(lower: start, upper: end)
        #expect(try await connection.value(PostgresRange<Date>.self, "SELECT \(sleep)") == sleep)
        #expect(try await connection.value(Bool.self, "SELECT \(sleep) @> \(start.addingTimeInterval(60))") == true)
        let running = PostgresRange<Date>(lower: start, upper: nil)
        #expect(try await connection.value(PostgresRange<Date>.self, "SELECT \(running)") == running)
        #expect(try await connection.value(PostgresRange<Date>.self, "SELECT 'empty'::tstzrange") == .empty)
        // Discrete ranges come back normalized to [lower, upper).
        let closed = PostgresRange<Int32>(lower: 1, upper: 3, upperInclusive: true)
        #expect(try await connection.value(PostgresRange<Int32>.self, "SELECT \(closed)") == PostgresRange(lower: 1, upper: 4))
        #expect(try await connection.value(PostgresRange<PostgresDate>.self, "SELECT daterange('2026-01-01', '2026-01-08')")
            == PostgresRange(lower: PostgresDate(year: 2026, month: 1, day: 1), upper: PostgresDate(year: 2026, month: 1, day: 8)))
        #expect(try await connection.value(PostgresRange<Int64>.self, "SELECT '(,10]'::int8range") == PostgresRange(lower: nil, upper: 11))
        // In text format too (a result that also holds an enum comes back as text).
        try await connection.execute("CREATE TYPE mood AS ENUM ('calm')")
        let row = try #require(try await connection.query("SELECT 'calm'::mood, tstzrange('2026-01-01 00:00+00', NULL, '[)')").first)
        #expect(try row.decode(PostgresRange<Date>.self, at: 1) == PostgresRange(lower: Date(timeIntervalSince1970: 1_767_225_600), upper: nil))
        var buffer: [UInt8] = []
        #expect(throws: PostgresError.self) { try PostgresRange(lower: end, upper: start).encode(into: &buffer) }
    }

    enum Mood: String, PostgresEnum, CaseIterable { case calm, fussy, asleep }

    @Test func postgresEnumsMapToSwiftEnums() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TYPE mood AS ENUM ('calm', 'fussy', 'asleep', 'hungry')")
        try await connection.execute("CREATE TABLE moods (id int, mood mood)")
        for (index, mood) in Mood.allCases.enumerated() {
            try await connection.execute("INSERT INTO moods VALUES (\(Int32(index)), \(mood))")
        }
        #expect(try await connection.query("SELECT mood FROM moods ORDER BY id").decodeColumn(Mood.self) == Mood.allCases)
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM moods WHERE mood = \(Mood.fussy)") == 1)
        // A label the Swift enum does not know is a typed error naming it.
        do {
            _ = try await connection.value(Mood.self, "SELECT 'hungry'::mood AS mood")
            Issue.record("an unknown label decoded")
        } catch let error as PostgresDecodingError {
            #expect(error.column == "mood")
            #expect(error.reason.contains("\"hungry\""))
        }
        // A case the database type lacks is refused by the server.
        enum OldMood: String, PostgresEnum { case grumpy }
        let refused = await expectPostgresError(.invalidTextRepresentation) {
            try await connection.execute("INSERT INTO moods VALUES (9, \(OldMood.grumpy))")
        }
        #expect(refused?.message.contains("grumpy") == true)
    }

    /// The example from the documentation: a composite type, both ways.
    struct FeedingAmount: PostgresCodable, Equatable {
        var ml: Int32
        var unit: String?
        static var postgresType: PostgresType { .unspecified }
        func encode(into buffer: inout [UInt8]) throws(PostgresError) {
            var writer = PostgresCompositeWriter()
            try writer.append(ml)
            try writer.append(unit)
            writer.finish(into: &buffer)
        }
        init(ml: Int32, unit: String?) {
            self.ml = ml
            self.unit = unit
        }
        init(from cell: PostgresCell) throws {
            var reader = try PostgresCompositeReader(cell)
            ml = try reader.next(Int32.self)
            unit = try reader.next(String?.self)
        }
    }

    @Test func aCompositeTypeAddedTheDocumentedWay() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TYPE feeding_amount AS (ml integer, unit text)")
        try await connection.execute("CREATE TABLE feedings (id int, amount feeding_amount)")
        let amounts = [FeedingAmount(ml: 120, unit: "ml"), FeedingAmount(ml: 90, unit: nil), FeedingAmount(ml: 4, unit: "o\"z, (\"fl\")")]
        for (index, amount) in amounts.enumerated() {
            try await connection.execute("INSERT INTO feedings VALUES (\(Int32(index)), \(amount))")
        }
        #expect(try await connection.query("SELECT amount FROM feedings ORDER BY id").decodeColumn(FeedingAmount.self) == amounts)
        #expect(try await connection.value(Int32.self, "SELECT (amount).ml FROM feedings WHERE id = 0") == 120)
        #expect(try await connection.value(FeedingAmount.self, "SELECT ROW(7, 'ml')::feeding_amount") == FeedingAmount(ml: 7, unit: "ml"))
    }
}
