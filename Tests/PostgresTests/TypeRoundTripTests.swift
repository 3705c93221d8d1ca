import Foundation
import Postgres
import Testing

/// Every mapped type, sent as a parameter and read back, and read from a SQL literal.
@Suite struct TypeRoundTripTests {
    /// Sends `value` as `$1`, casts it server-side to `cast`, and reads it back.
    func roundTrip<T: PostgresCodable & Sendable>(_ value: T, _ connection: PostgresConnection) async throws -> T {
        try await connection.value(T.self, "SELECT \(value)")
    }

    @Test func booleans() async throws {
        do { let (connection, _) = try await freshConnection()
            #expect(try await roundTrip(true, connection) == true)
            #expect(try await roundTrip(false, connection) == false)
            #expect(try await connection.value(Bool.self, "SELECT 't'::boolean") == true)
            #expect(try await connection.value(Bool?.self, "SELECT NULL::boolean") == nil)
        }
    }

    @Test func integersAtTheirLimits() async throws {
        do { let (connection, _) = try await freshConnection()
            for value in [Int16.min, -1, 0, 1, Int16.max] { #expect(try await roundTrip(value, connection) == value) }
            for value in [Int32.min, 0, Int32.max] { #expect(try await roundTrip(value, connection) == value) }
            for value in [Int64.min, -1, 0, Int64.max] { #expect(try await roundTrip(value, connection) == value) }
            for value in [Int.min, 42, Int.max] { #expect(try await roundTrip(value, connection) == value) }
            #expect(try await connection.value(Int64.self, "SELECT '-9223372036854775808'::int8") == Int64.min)
            #expect(try await connection.value(Int.self, "SELECT 7::int2") == 7)
            // A value that does not fit is refused, naming the column and both types.
            do {
                _ = try await connection.value(Int32.self, "SELECT 9223372036854775807::int8 AS big")
                Issue.record("an int8 beyond Int32 decoded")
            } catch let error as PostgresDecodingError {
                #expect(error.column == "big")
                #expect(error.postgresType == .int8)
                #expect(error.swiftType == "Int32")
            }
        }
    }

    @Test func floatingPointIncludingNaNAndInfinity() async throws {
        do { let (connection, _) = try await freshConnection()
            for value in [0.0, -0.0, 1.5, -123.456e300, Double.leastNonzeroMagnitude, Double.greatestFiniteMagnitude, .infinity, -.infinity] {
                #expect(try await roundTrip(value, connection) == value)
            }
            #expect(try await roundTrip(Double.nan, connection).isNaN)
            for value in [Float(3.25), -.infinity, .infinity, .greatestFiniteMagnitude] {
                #expect(try await roundTrip(value, connection) == value)
            }
            #expect(try await roundTrip(Float.nan, connection).isNaN)
            #expect(try await connection.value(Double.self, "SELECT 'NaN'::float8").isNaN)
            #expect(try await connection.value(Double.self, "SELECT '-Infinity'::float8") == -.infinity)
            #expect(try await connection.value(Double.self, "SELECT 1.5::float4") == 1.5)
        }
    }

    @Test func textIncludingEmptyMultiByteAndEmoji() async throws {
        do { let (connection, _) = try await freshConnection()
            for value in ["", "plain", "héllo wörld", "日本語テキスト", "👶🍼💤 baby", String(repeating: "x", count: 100_000)] {
                #expect(try await roundTrip(value, connection) == value)
            }
            #expect(try await connection.value(String.self, "SELECT 'Zoë 👶'::varchar") == "Zoë 👶")
            #expect(try await connection.value(String?.self, "SELECT NULL::text") == nil)
        }
    }

    @Test func textWithNULIsRefusedBeforeSending() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE notes (body text)")
            let error = await expectPostgresError(.invalidParameter) {
                try await connection.execute("INSERT INTO notes VALUES (\("bad\u{0}value"))")
            }
            #expect(error?.message.contains("NUL") == true)
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM notes") == 0)
        }
    }

    @Test func uuids() async throws {
        do { let (connection, _) = try await freshConnection()
            let id = UUID()
            #expect(try await roundTrip(id, connection) == id)
            let literal = try await connection.value(UUID.self, "SELECT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid")
            #expect(literal == UUID(uuidString: "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"))
            #expect(try await connection.value(String.self, "SELECT \(id)") == id.uuidString.lowercased())
        }
    }

    @Test func timestampsKeepMicrosecondsBefore1970AndAfter2100() async throws {
        do { let (connection, _) = try await freshConnection()
            let unixMicros: [Int64] = [0, 1, -1, -1_234_567_890_123_456, 4_102_444_800_000_001, 5_000_000_000_123_457, 1_710_054_000_999_999]
            for micros in unixMicros {
                let date = Date(timeIntervalSince1970: Double(micros) / 1_000_000)
                let back = try await roundTrip(date, connection)
                #expect(Int64((back.timeIntervalSince1970 * 1_000_000).rounded()) == micros)
                // What the server stored, to the microsecond.
                let serverMicros = try await connection.value(
                    String.self, "SELECT (extract(epoch FROM \(date)) * 1000000)::numeric(30,0)::text")
                #expect(serverMicros == String(micros))
            }
            let moonLanding = try await connection.value(Date.self, "SELECT '1969-07-20 20:17:40.123456+00'::timestamptz")
            #expect(Int64((moonLanding.timeIntervalSince1970 * 1_000_000).rounded()) == -14_182_939_876_544)
            let local = try await connection.value(Date.self, "SELECT '2024-03-10 02:30:00'::timestamp")
            #expect(local.timeIntervalSince1970 == 1_710_037_800)
            do {
                _ = try await connection.value(Date.self, "SELECT 'infinity'::timestamptz AS forever")
                Issue.record("infinity decoded as a Date")
            } catch let error as PostgresDecodingError {
                #expect(error.column == "forever")
            }
        }
    }

    @Test(arguments: [
        PostgresDate(year: 2024, month: 3, day: 10),   // US spring-forward day
        PostgresDate(year: 2024, month: 11, day: 3),   // US fall-back day
        PostgresDate(year: 2024, month: 3, day: 31),   // EU spring-forward day
        PostgresDate(year: 2024, month: 10, day: 6),   // Adelaide spring-forward day
        PostgresDate(year: 2024, month: 2, day: 29),
        PostgresDate(year: 1900, month: 1, day: 1),
        PostgresDate(year: 1, month: 1, day: 1),
        PostgresDate(year: 1969, month: 12, day: 31),
        PostgresDate(year: 2100, month: 12, day: 31),
        PostgresDate(year: 9999, month: 12, day: 31),
    ])
    func calendarDates(_ date: PostgresDate) async throws {
        do { let (connection, _) = try await freshConnection()
            #expect(try await roundTrip(date, connection) == date)
            #expect(try await connection.value(String.self, "SELECT \(date)::text") == date.description)
            #expect(try await connection.value(PostgresDate.self, "SELECT \(date.description)::date") == date)
        }
    }

    @Test func timesOfDayAndIntervals() async throws {
        do { let (connection, _) = try await freshConnection()
            for time in [PostgresTime(hour: 0, minute: 0), PostgresTime(hour: 6, minute: 0), PostgresTime(hour: 23, minute: 59, second: 59, microsecond: 999_999)] {
                #expect(try await roundTrip(time, connection) == time)
            }
            #expect(try await connection.value(PostgresTime.self, "SELECT '06:30:15.25'::time") == PostgresTime(hour: 6, minute: 30, second: 15, microsecond: 250_000))
            let interval = PostgresInterval(months: 14, days: -3, microseconds: 14_706_789_000)
            #expect(try await roundTrip(interval, connection) == interval)
            #expect(try await connection.value(PostgresInterval.self, "SELECT '1 year 2 mons -3 days 04:05:06.789'::interval") == interval)
            #expect(try await connection.value(String.self, "SELECT \(interval)::text") == "1 year 2 mons -3 days +04:05:06.789")
        }
    }

    @Test func bytes() async throws {
        do { let (connection, _) = try await freshConnection()
            for value in [Data(), Data([0]), Data((0...255).map { UInt8($0) })] {
                #expect(try await roundTrip(value, connection) == value)
            }
            #expect(try await connection.value(Data.self, "SELECT '\\xdeadbeef'::bytea") == Data([0xDE, 0xAD, 0xBE, 0xEF]))
        }
    }

    struct Settings: Codable, Sendable, Equatable {
        struct Expiry: Codable, Sendable, Equatable { var roomTemperatureMinutes: Int; var label: String }
        var unit: String
        var bottleMl: Int?
        var expiry: Expiry
        var tags: [String]
    }

    @Test func jsonAndJsonbCodable() async throws {
        do { let (connection, _) = try await freshConnection()
            let value = Settings(unit: "ml", bottleMl: nil, expiry: .init(roomTemperatureMinutes: 120, label: "Ünïcödé 🍼 \"quoted\""), tags: [])
            let back = try await connection.value(PostgresJSON<Settings>.self, "SELECT \(PostgresJSON(value))")
            #expect(back.value == value)
            let viaInterpolation = try await connection.value(PostgresJSON<Settings>.self, "SELECT \(json: value)")
            #expect(viaInterpolation.value == value)
            #expect(try await connection.value(String.self, "SELECT \(json: value) -> 'expiry' ->> 'label'") == value.expiry.label)
            let fromJSON = try await connection.value(
                PostgresJSON<[String: [Int]]>.self, #"SELECT '{"a": [1, 2], "ü": []}'::json"#)
            #expect(fromJSON.value == ["a": [1, 2], "ü": []])
            #expect(try await connection.value(String.self, #"SELECT '{"k": "v"}'::jsonb"#) == #"{"k": "v"}"#)
        }
    }

    @Test func numericWithoutLoss() async throws {
        do { let (connection, _) = try await freshConnection()
            let texts = ["0", "1", "-1", "0.000001", "-0.5", "12345678901234567890.123456789012345678", "10000", "0.0001", "99999999.99990000", "NaN"]
            for text in texts {
                let numeric = try #require(PostgresNumeric(text))
                #expect(try await roundTrip(numeric, connection) == numeric)
                #expect(try await connection.value(String.self, "SELECT \(numeric)::text") == text)
                #expect(try await connection.value(String.self, "SELECT \(numeric)") == text)
            }
            let huge = "123456789012345678901234567890123456789012345678901234567890.000000000000000000001"
            #expect(try await connection.value(PostgresNumeric.self, "SELECT \(huge)::numeric").description == huge)
            #expect(try await connection.value(String.self, "SELECT '-1e-30'::numeric") == "-0.000000000000000000000000000001")
            for decimal in [Decimal(string: "1234567890.0987654321")!, Decimal(0), Decimal(-42), Decimal(string: "0.1")!] {
                #expect(try await roundTrip(decimal, connection) == decimal)
            }
            // Too many digits for Decimal: refused, not rounded.
            do {
                _ = try await connection.value(Decimal.self, "SELECT \(huge)::numeric AS amount")
                Issue.record("a 81-digit numeric decoded as Decimal")
            } catch let error as PostgresDecodingError {
                #expect(error.column == "amount")
                #expect(error.swiftType == "Decimal")
            }
        }
    }

    @Test func arraysOfIntTextAndUUIDIncludingEmptyAndNull() async throws {
        do { let (connection, _) = try await freshConnection()
            #expect(try await roundTrip([Int32](), connection) == [])
            #expect(try await roundTrip([Int32(1), 2, 3], connection) == [1, 2, 3])
            #expect(try await roundTrip([Int64.min, Int64.max], connection) == [Int64.min, Int64.max])
            #expect(try await roundTrip([Int16(-1)], connection) == [-1])
            #expect(try await roundTrip([1, nil, 3] as [Int?], connection) == [1, nil, 3])
            let texts = ["", "a,b", "quote\"d", "back\\slash", "{braces}", "NULL", "👶"]
            #expect(try await roundTrip(texts, connection) == texts)
            #expect(try await roundTrip(["x", nil] as [String?], connection) == ["x", nil])
            let ids = [UUID(), UUID()]
            #expect(try await roundTrip(ids, connection) == ids)
            #expect(try await connection.value([Int].self, "SELECT '{}'::int8[]") == [])
            #expect(try await connection.value([String?].self, "SELECT ARRAY['a', NULL, 'c']") == ["a", nil, "c"])
            #expect(try await connection.value(Int.self, "SELECT cardinality(\([UUID]()))") == 0)
        }
    }

    enum Role: String, PostgresCodable, Codable { case primary, caregiver }

    @Test func enumsAsRawValuesAndUnknownTypesAsText() async throws {
        do { let (connection, _) = try await freshConnection()
            #expect(try await roundTrip(Role.caregiver, connection) == .caregiver)
            try await connection.execute("CREATE TYPE mood AS ENUM ('happy', 'sleepy')")
            // A result with an unknown type comes back in text; every column still decodes.
            let rows = try await connection.query("""
                SELECT 'sleepy'::mood AS mood, '192.168.0.1/32'::inet AS address, 42::int8 AS n,
                       '2024-03-10 07:00:00.5+00'::timestamptz AS at, ARRAY['a b', NULL]::text[] AS tags,
                       \(UUID(uuidString: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")) AS id, 2.50::numeric AS amount,
                       '\\x0102'::bytea AS raw, true AS flag, '1 day 02:00:00'::interval AS span, 1.5::float8 AS f,
                       '2024-02-29'::date AS day
                """)
            let row = try #require(rows.first)
            #expect(row.columns.first?.format == .text)
            #expect(try row.decode(String.self, column: "mood") == "sleepy")
            #expect(try row.decode(String.self, column: "address") == "192.168.0.1")
            #expect(try row.decode(Int.self, column: "n") == 42)
            #expect(try row.decode(Date.self, column: "at").timeIntervalSince1970 == 1_710_054_000.5)
            #expect(try row.decode([String?].self, column: "tags") == ["a b", nil])
            #expect(try row.decode(UUID.self, column: "id") == UUID(uuidString: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"))
            #expect(try row.decode(Decimal.self, column: "amount") == Decimal(string: "2.50"))
            #expect(try row.decode(Data.self, column: "raw") == Data([1, 2]))
            #expect(try row.decode(Bool.self, column: "flag"))
            #expect(try row.decode(PostgresInterval.self, column: "span") == PostgresInterval(days: 1, microseconds: 7_200_000_000))
            #expect(try row.decode(Double.self, column: "f") == 1.5)
            #expect(try row.decode(PostgresDate.self, column: "day") == PostgresDate(year: 2024, month: 2, day: 29))
            enum Mood: String, PostgresDecodable { case happy, sleepy }
            #expect(try row.decode(Mood.self, column: "mood") == .sleepy)
        }
    }

    @Test func optionalParametersBecomeTypedNulls() async throws {
        do { let (connection, _) = try await freshConnection()
            let missing: Int? = nil
            let missingDate: Date? = nil
            #expect(try await connection.value(Bool.self, "SELECT \(missing) IS NULL") == true)
            #expect(try await connection.value(String.self, "SELECT pg_typeof(\(missingDate))::text") == "timestamp with time zone")
            let present: String? = "x"
            #expect(try await connection.value(String.self, "SELECT \(present)") == "x")
        }
    }
}
