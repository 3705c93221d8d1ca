import Foundation
public import Postgres
import PropertyBased
import Testing

/// Random values of every supported type go to the real server and back, as `SELECT $1` and
/// through a table column, and must come back equal.
@Suite struct PropertyRoundTripTests {
    /// `value` as `$1`, and stored in a column of `columnType` and read back.
    func check<T: PostgresCodable & Sendable & Equatable>(
        _ value: T, columnType: StaticString, on connection: PostgresConnection, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let direct = try await connection.value(T.self, "SELECT \(value)")
        #expect(direct == value, "SELECT $1 changed \(value) into \(direct)", sourceLocation: sourceLocation)
        try await connection.execute("CREATE TEMP TABLE IF NOT EXISTS rt (v \(SQL(unsafeRawSQL: columnType.description)))")
        try await connection.execute("TRUNCATE rt")
        try await connection.execute("INSERT INTO rt VALUES (\(value))")
        let stored = try await connection.value(T.self, "SELECT v FROM rt")
        #expect(stored == value, "a \(columnType) column changed \(value) into \(stored)", sourceLocation: sourceLocation)
        try await connection.execute("DROP TABLE rt")
    }

    /// Any Unicode text PostgreSQL can store (no NUL): every plane, controls, combining marks.
    static let anyText = Gen.oneOf(Gen.int(in: 1...0x7F).eraseToAnySequence(), Gen.int(in: 0x80...0x10FFFF).eraseToAnySequence())
        .map { Unicode.Scalar(UInt32($0)) ?? "\u{FFFD}" } // a surrogate is not a scalar
        .array(of: 0...40).map { String(String.UnicodeScalarView($0)) }

    /// Dates to the microsecond, where `Date` can hold every microsecond (1900–2100).
    static let anyDate = Gen.dateTime(inYear: 1900...2100).map { Date(timeIntervalSinceReferenceDate: ($0.timeIntervalSinceReferenceDate * 1_000_000).rounded() / 1_000_000) }

    @Test func integersFloatsAndBooleans() async throws {
        let (connection, _) = try await freshConnection()
        await propertyCheck(count: 40, input: Gen.int16(), Gen.int32(), Gen.int64(), Gen.bool) { a, b, c, d in
            do {
                try await check(a, columnType: "smallint", on: connection)
                try await check(b, columnType: "integer", on: connection)
                try await check(c, columnType: "bigint", on: connection)
                try await check(d, columnType: "boolean", on: connection)
            } catch {
                Issue.record("\(error)")
            }
        }
        await propertyCheck(count: 40, input: Gen.double(in: -1e300...1e300), Gen.float(in: -1e30...1e30)) { a, b in
            do {
                try await check(a, columnType: "double precision", on: connection)
                try await check(b, columnType: "real", on: connection)
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    @Test func textAndBytes() async throws {
        let (connection, _) = try await freshConnection()
        await propertyCheck(count: 60, input: Self.anyText, Gen<UInt8>.value(in: 0...255).array(of: 0...64)) { text, bytes in
            do {
                try await check(text, columnType: "text", on: connection)
                try await check(Data(bytes), columnType: "bytea", on: connection)
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    @Test func timesAndDates() async throws {
        let (connection, _) = try await freshConnection()
        let day = Gen.int(in: -2_451_000...2_100_000_000).map { PostgresDate(daysSince2000: $0) }.filter(\.isValid)
        let time = Gen.int64(in: 0...86_400_000_000).map { PostgresTime(microsecondsSinceMidnight: $0) }
        let interval = Gen.int32(in: -100_000...100_000).map { PostgresInterval(months: $0 / 7, days: $0 % 400, microseconds: Int64($0) * 1_234_567) }
        await propertyCheck(count: 50, input: Self.anyDate, day, time, interval) { date, day, time, interval in
            do {
                try await check(date, columnType: "timestamptz", on: connection)
                try await check(day, columnType: "date", on: connection)
                try await check(time, columnType: "time", on: connection)
                try await check(interval, columnType: "interval", on: connection)
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    /// A timestamp read from the server, written as ISO 8601 text and read back, is the same
    /// `Date` (JSON documents and exports carry dates this way).
    @Test func isoTextKeepsEveryMicrosecond() async throws {
        let (connection, _) = try await freshConnection()
        await propertyCheck(count: 60, input: Self.anyDate) { date in
            do {
                let fromServer = try await connection.value(Date.self, "SELECT \(date)::timestamptz")
                let text = ISOTimestamp.format(fromServer)
                #expect(ISOTimestamp.parse(text) == fromServer, "\(text)")
                let serverText = try await connection.value(String.self, "SELECT to_char(\(date)::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
                #expect(ISOTimestamp.parse(serverText) == fromServer, "the server wrote \(serverText)")
            } catch {
                Issue.record("\(error)")
            }
        }
        #expect(ISOTimestamp.parse("2026-11-23T03:04:05.1234565+02:00") == ISOTimestamp.parse("2026-11-23T01:04:05.123457Z"))
        #expect(ISOTimestamp.parse("2026-11-23 03:04:05") == nil)
        #expect(ISOTimestamp.parse("2026-11-23T03:04:05.Z") == nil)
    }

    @Test func exactNumbersAndUUIDs() async throws {
        let (connection, _) = try await freshConnection()
        let numeric = Gen.number.array(of: 1...600).map { String($0) }.compactMap { PostgresNumeric(String($0.prefix(300)) + "." + String($0.dropFirst(300))) }
        let decimal = Gen.int64().map { Decimal($0) / 1000 }
        let uuid = Gen<UInt8>.value(in: 0...255).array(of: 16).map { b in
            UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
        }
        await propertyCheck(count: 40, input: numeric, decimal, uuid) { numeric, decimal, uuid in
            do {
                try await check(numeric, columnType: "numeric", on: connection)
                try await check(decimal, columnType: "numeric", on: connection)
                try await check(uuid, columnType: "uuid", on: connection)
            } catch {
                Issue.record("\(error)")
            }
        }
        for special in ["NaN", "Infinity", "-Infinity", String(repeating: "9", count: 1000), "0." + String(repeating: "0", count: 999) + "1"] {
            try await check(try #require(PostgresNumeric(special)), columnType: "numeric", on: connection)
        }
    }

    @Test func arraysRangesAndJSON() async throws {
        let (connection, _) = try await freshConnection()
        let ints = Gen.int32().optional.array(of: 0...20)
        let texts = Self.anyText.array(of: 0...8)
        let dates = Self.anyDate.array(of: 0...8)
        let bounds = Gen.int64(in: -1_000_000...1_000_000).array(of: 2).map { pair in PostgresRange(lower: min(pair[0], pair[1]), upper: max(pair[0], pair[1]) + 1) }
        let json = Self.anyText.array(of: 0...5).map { PostgresJSON(Dictionary($0.map { ($0, $0.count) }, uniquingKeysWith: { a, _ in a })) }
        await propertyCheck(count: 40, input: ints, texts, dates, bounds, json) { ints, texts, dates, range, json in
            do {
                try await check(ints, columnType: "integer[]", on: connection)
                try await check(texts, columnType: "text[]", on: connection)
                try await check(dates, columnType: "timestamptz[]", on: connection)
                try await check(range, columnType: "int8range", on: connection)
                let back = try await connection.value(PostgresJSON<[String: Int]>.self, "SELECT \(json)")
                #expect(back.value == json.value)
            } catch {
                Issue.record("\(error)")
            }
        }
    }
}

extension PostgresJSON: Equatable where Value: Equatable {
    public static func == (a: Self, b: Self) -> Bool { a.value == b.value }
}

