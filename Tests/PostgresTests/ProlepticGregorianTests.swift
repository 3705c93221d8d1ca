import Foundation
@testable import Postgres
import PropertyBased
import Testing

/// Instants and dates in the calendar PostgreSQL uses (proleptic Gregorian), not Foundation's
/// (Julian before 1582-10-15): what we write is what PostgreSQL stores, to the microsecond.
@Suite struct ProlepticGregorianTests {
    @Test(arguments: [
        ("0001-01-01T00:00:00Z", Int64(-62_135_596_800_000_000)),
        ("1582-10-10T00:00:00Z", Int64(-12_219_724_800_000_000)),   // ten days Foundation's calendar skips
        ("1900-01-01T00:00:00Z", Int64(-2_208_988_800_000_000)),
        ("1970-01-01T00:00:00Z", Int64(0)),
        ("2026-11-20T08:15:03.123456Z", Int64(1_795_162_503_123_456)),
        ("9999-12-31T23:59:59.999999Z", Int64(253_402_300_799_999_999)),
    ])
    func knownInstantsReadAndWriteExactly(text: String, micros: Int64) {
        #expect(ISOTimestamp.parseMicroseconds(text) == micros)
        #expect(ISOTimestamp.format(microseconds: micros) == text.replacingOccurrences(of: ".000000", with: ""))
        // Through `Date` (a Double of seconds): exact from 1865 to 2137, as TimestampRange says.
        if (1900...2100).contains(Int(text.prefix(4)) ?? 0) {
            #expect(ISOTimestamp.parse(text).map { ISOTimestamp.format($0) } == text.replacingOccurrences(of: ".000000", with: ""))
        }
    }

    @Test func offsetsFractionsAndNonsense() {
        #expect(ISOTimestamp.parseMicroseconds("2026-11-20T03:15:00-05:00") == ISOTimestamp.parseMicroseconds("2026-11-20T08:15:00Z"))
        #expect(ISOTimestamp.parseMicroseconds("2026-11-20T08:15:00.1Z") == ISOTimestamp.parseMicroseconds("2026-11-20T08:15:00Z").map { $0 + 100_000 })
        #expect(ISOTimestamp.parseMicroseconds("2026-11-20T08:15:00.0000005Z") == ISOTimestamp.parseMicroseconds("2026-11-20T08:15:00.000001Z"))
        for bad in ["2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-20T24:00:00Z", "2026-11-20T08:15:00", "2026-11-20", "294277-01-01T00:00:00Z",
                    "2026-11-20T08:15:00.Z", "2026-11-20T08:15:00.1234567890Z", "2026-11-20T08:15:00+25:00", " 2026-11-20T08:15:00Z"] {
            #expect(ISOTimestamp.parseMicroseconds(bad) == nil, "\(bad)")
        }
        #expect(ISOTimestamp.parseMicroseconds("2024-02-29T00:00:00Z") != nil)
        #expect(ISOTimestamp.format(microseconds: ISOTimestamp.parseMicroseconds("2026-11-20T08:15:00Z")!, alwaysFraction: true) == "2026-11-20T08:15:00.000000Z")
    }

    /// Any instant from year 1 to 9999: our text, PostgreSQL's text and the stored value agree,
    /// to the microsecond, and the date in a zone is PostgreSQL's date there.
    @Test func anyInstantIsWhatPostgreSQLStores() async throws {
        let (connection, _) = try await freshConnection()
        let lower: Int64 = -62_135_596_800_000_000, upper: Int64 = 253_402_300_799_999_999
        await propertyCheck(count: 30, input: Gen.int64(in: lower...upper).array(of: 40)) { values in
            do {
                let rows = try await connection.query("""
                    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), (t AT TIME ZONE 'Asia/Kathmandu')::date::text,
                           ((extract(epoch FROM t) * 1000000)::bigint) = m
                    FROM unnest(\(values)::bigint[]) AS m,
                         -- Whole days and the microseconds left, each product exact (an interval
                         -- times a bigint is computed in float8: 2^53 + 1 microseconds is not).
                         LATERAL (SELECT (timestamp 'epoch' + div(m, 86400000000) * interval '1 day'
                                          + mod(m, 86400000000) * interval '1 microsecond') AT TIME ZONE 'UTC' AS t) AS x
                    """)
                for (row, micros) in zip(rows, values) {
                    let theirs = try row.decode(String.self, at: 0)
                    #expect(ISOTimestamp.format(microseconds: micros, alwaysFraction: true) == theirs)
                    #expect(ISOTimestamp.parseMicroseconds(theirs) == micros)
                    #expect(try row.decode(Bool.self, at: 2))
                    // From the exact microseconds: a `Date` in year 140 holds about 8 µs, and
                    // 18:18:43.999999 became a `Date` on the next second (and day) there.
                    let date = PostgresDate(microseconds: micros, in: TimeZone(identifier: "Asia/Kathmandu") ?? .gmt)
                    // Kathmandu's offset before 1920 was +05:41:16, which Foundation and tzdata agree on.
                    #expect(date.description == (try row.decode(String.self, at: 1)), "\(theirs)")
                }
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    /// The last microsecond of a day stays on that day, before 1970 too, where dividing toward
    /// zero used to round the instant up to the next second: the instant the property test above
    /// found (year 140, Kathmandu's local mean time of +05:41:16) and half a second before 1970.
    @Test func theLastMicrosecondOfADayIsThatDay() async throws {
        let (connection, _) = try await freshConnection()
        let kathmandu = TimeZone(identifier: "Asia/Kathmandu") ?? .gmt
        let cases: [(instant: String, zone: String, day: String)] = [
            ("0140-11-22T18:18:43.999999Z", "Asia/Kathmandu", "0140-11-22"),
            ("1969-12-31T23:59:59.500000Z", "UTC", "1969-12-31"),
            ("1969-12-31T23:59:59.999999Z", "UTC", "1969-12-31"),
            ("1970-01-01T00:00:00.000000Z", "UTC", "1970-01-01"),
            ("1969-12-31T18:14:59.999999Z", "Asia/Kathmandu", "1969-12-31"),
        ]
        for (instant, zone, day) in cases {
            let micros = try #require(ISOTimestamp.parseMicroseconds(instant))
            let theirs = try await connection.query("SELECT ((\(instant)::timestamptz) AT TIME ZONE \(zone))::date::text")
            #expect(try theirs.first?.decode(String.self, at: 0) == day, "\(instant) in \(zone)")
            #expect(PostgresDate(microseconds: micros, in: zone == "UTC" ? .gmt : kathmandu).description == day, "\(instant) in \(zone)")
        }
        // Near 1970 a `Date` holds the microsecond, and the `Date` form agrees.
        #expect(PostgresDate(Date(timeIntervalSince1970: -0.5), in: .gmt).description == "1969-12-31")
        #expect(PostgresDate(Date(timeIntervalSince1970: -0.000001), in: .gmt).description == "1969-12-31")
    }

    /// Within about 136 years of 2001, where a `Date` holds every microsecond: microseconds to
    /// `Date` and back is the same number (going through `timeIntervalSince1970` moved some by
    /// one: found by PropertyRoundTripTests on a 2041 instant).
    @Test func everyMicrosecondSurvivesADate() async {
        let lower: Int64 = -2_208_988_800_000_000, upper: Int64 = 5_049_158_400_000_000 // 1900 to 2130
        await propertyCheck(count: 200, input: Gen.int64(in: lower...upper).array(of: 500)) { values in
            for micros in values {
                #expect(ProlepticGregorian.microseconds(of: ProlepticGregorian.date(microseconds: micros)) == micros)
                #expect(ProlepticGregorian.microseconds(of: TimestampRange.date(fromPostgresMicroseconds: micros - 946_684_800_000_000)) == micros)
            }
        }
    }

    /// Absurd input is a wrong answer at worst, never a trap.
    @Test func theEndsOfInt64DoNotTrap() {
        for micros in [Int64.min, Int64.min + 1, -1, Int64.max - 1, Int64.max] {
            #expect(!ISOTimestamp.format(microseconds: micros).isEmpty)
            _ = ProlepticGregorian.date(microseconds: micros)
        }
        for days in [Int64.min, Int64.max] { _ = ProlepticGregorian.civil(days: days) }
        _ = ProlepticGregorian.days(year: .max, month: .min, day: .max)
        _ = ProlepticGregorian.days(year: .min, month: .max, day: .min)
        #expect(ProlepticGregorian.microseconds(of: Date(timeIntervalSinceReferenceDate: .infinity)) == nil)
        #expect(ProlepticGregorian.microseconds(of: Date(timeIntervalSinceReferenceDate: .nan)) == nil)
        #expect(ProlepticGregorian.microseconds(of: .distantFuture) != nil)
    }
}
