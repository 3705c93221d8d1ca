import Foundation
@testable import Postgres
import Testing

/// Values at the edges PostgreSQL allows, and inputs the fuzzers found: each becomes a typed
/// error or a value, never a trap. (The fuzzers live in Fuzz/; their crash inputs are kept in
/// Fuzz/Corpus/ and replayed on every run.)
@Suite struct DecoderTrapTests {
    func decode<T: PostgresDecodable>(_ type: T.Type, _ bytes: [UInt8], _ pgType: PostgresType, _ format: PostgresFormat = .binary) throws -> T {
        try bytes.withUnsafeBytes { try T(from: PostgresCell(bytes: $0, type: pgType, format: format, columnName: "c", columnIndex: 0)) }
    }

    func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }

    @Test func theLastTimestampPostgreSQLAllowsDecodesInsteadOfTrapping() async throws {
        let (connection, _) = try await freshConnection()
        // It used to overflow adding the 1970 epoch offset.
        let last = try await connection.value(Date.self, "SELECT '294276-12-31 23:59:59.999999+00'::timestamptz")
        #expect(last.timeIntervalSince1970 > 9.2e12)
        let first = try await connection.value(Date.self, "SELECT '4713-11-24 00:00:00+00 BC'::timestamptz")
        #expect(first.timeIntervalSince1970 < -2.1e11)
        // Both go back to the server (far from 2001 a Date cannot hold every microsecond).
        let drift = try await connection.value(Double.self, "SELECT abs(extract(epoch FROM \(last) - '294276-12-31 23:59:59.999999+00'::timestamptz))::float8")
        #expect(drift < 0.01)
        #expect(try await connection.value(String.self, "SELECT \(first)::text") == "4713-11-24 00:00:00+00 BC")
        await #expect(throws: PostgresDecodingError.self) { try await connection.value(Date.self, "SELECT 'infinity'::timestamptz") }
        await #expect(throws: PostgresDecodingError.self) { try await connection.value(Date.self, "SELECT '-infinity'::timestamptz AS t") }
    }

    @Test func datesTimesAndIntervalsFromACallerNeverTrap() throws {
        var buffer: [UInt8] = []
        // A NaN date: Foundation's description of it traps, so the message must not use it.
        #expect(throws: PostgresError.self) { try Date(timeIntervalSince1970: .nan).encode(into: &buffer) }
        #expect(throws: PostgresError.self) { try Date(timeIntervalSince1970: 1e300).encode(into: &buffer) }
        let absurd = PostgresDate(year: .max, month: .min, day: .max)
        #expect(!absurd.isValid)
        #expect(throws: PostgresError.self) { try absurd.encode(into: &buffer) }
        _ = absurd.description
        _ = PostgresDate(year: .min, month: 1, day: 1).description
        _ = PostgresDate(year: 2026, month: 1, day: 1).adding(days: .max)
        #expect(PostgresDate(year: 2026, month: 2, day: 30).isValid == false)
        #expect(throws: PostgresError.self) { try PostgresDate(year: 2026, month: 2, day: 30).encode(into: &buffer) }
        #expect(throws: PostgresError.self) { try PostgresTime(hour: .max, minute: 0).encode(into: &buffer) }
        #expect(throws: PostgresError.self) { try PostgresTime(hour: 25, minute: 0).encode(into: &buffer) }
        #expect(PostgresInterval(seconds: .nan) == nil)
        #expect(PostgresInterval(seconds: .infinity) == nil)
        #expect(PostgresInterval(seconds: 1e300) == nil)
        #expect(PostgresInterval(seconds: 1.5) == PostgresInterval(microseconds: 1_500_000))
        #expect(PostgresInterval(months: .min, days: .min, microseconds: .min).description.hasPrefix("-2147483648 mons"))
    }

    @Test func hostileTextFromAServerIsATypedError() throws {
        #expect(throws: PostgresDecodingError.self) { try decode(Date.self, Array("99999999999-01-01 00:00:00+00".utf8), .timestamptz, .text) }
        #expect(throws: PostgresDecodingError.self) { try decode(Date.self, Array("2026-01-01 00:00:00+99999999999999999".utf8), .timestamptz, .text) }
        #expect(throws: PostgresDecodingError.self) { try decode(PostgresInterval.self, Array("9223372036854775807 years".utf8), .interval, .text) }
        #expect(throws: PostgresDecodingError.self) { try decode(PostgresInterval.self, Array("99999999999999:00:00".utf8), .interval, .text) }
        #expect(throws: PostgresDecodingError.self) { try decode(PostgresTime.self, bigEndian(Int64.max), .time) }
        #expect(throws: PostgresDecodingError.self) { try decode(PostgresDate.self, Array("5874898-01-01".utf8), .date, .text) }
    }

    @Test func arrayHeadersThatLieAreRefusedBeforeAnyAllocation() throws {
        // One dimension of 2^31 - 1 elements in a 20-byte value: it used to reserve them all.
        let huge = bigEndian(Int32(1)) + bigEndian(Int32(0)) + bigEndian(UInt32(23)) + bigEndian(Int32.max) + bigEndian(Int32(1))
        #expect(throws: PostgresDecodingError.self) { try decode([Int32].self, huge, .int4Array) }
        let negativeLength = bigEndian(Int32(1)) + bigEndian(Int32(0)) + bigEndian(UInt32(23)) + bigEndian(Int32(1)) + bigEndian(Int32(1)) + bigEndian(Int32(-7))
        #expect(throws: PostgresDecodingError.self) { try decode([Int32].self, negativeLength, .int4Array) }
        // Found by FuzzNumeric: a binary numeric with no digits but a weight of 256 decoded to
        // 1,025 leading zeros, which then encoded as another value.
        let text = try decode(PostgresNumeric.self, [0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x37, 0xB6], .numeric).description
        #expect(text.hasPrefix("0."))
        #expect(text.count == 2 + 0x37B6)
    }

    @Test func multiDimensionalAndOffsetArraysFromTheServer() async throws {
        let (connection, _) = try await freshConnection()
        // A lower bound other than 1 keeps the elements in order, in both formats.
        #expect(try await connection.value([Int32].self, "SELECT '[0:2]={1,2,3}'::int4[]") == [1, 2, 3])
        #expect(try await connection.value([Int32].self, "SELECT ('[0:2]={1,2,3}'::int4[])::text::int4[]") == [1, 2, 3])
        do {
            _ = try await connection.value([Int32].self, "SELECT '{{1,2},{3,4}}'::int4[] AS grid")
            Issue.record("a 2-dimensional array decoded as [Int32]")
        } catch let error as PostgresDecodingError {
            #expect(error.column == "grid")
            #expect(error.reason.contains("2-dimensional"))
        }
        #expect(try await connection.value([Int32?].self, "SELECT ARRAY[1, NULL, 3]::int4[]") == [1, nil, 3])
        #expect(try await connection.value([String].self, "SELECT '{}'::text[]") == [])
    }

    @Test func rowsAndCellsOutsideTheResultThrow() async throws {
        let (connection, _) = try await freshConnection()
        let rows = try await connection.query("SELECT 1::int4 AS one")
        #expect(throws: PostgresDecodingError.self) { try rows[5].decode(Int32.self, at: 0) }
        #expect(throws: PostgresDecodingError.self) { try rows[-1].decode(Int32.self, column: "one") }
        #expect(throws: PostgresDecodingError.self) { try rows[0].decode(Int32.self, at: 3) }
        #expect(throws: PostgresDecodingError.self) { try rows[0].withCell(at: 9) { $0.type } }
        #expect(try rows[0].withCell(at: 0) { $0.type } == .int4)
        #expect(rows[7].isNull(at: 0))
    }

    @Test func aCopyRowThatFillsAChunkIsSentWhole() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE copied (a text, b text)")
        let big = String(repeating: "x", count: 5_000)
        // A tiny chunk limit makes the writer flush in the middle of rows, as a 2 GiB row would.
        let copied = try await connection.copyIn(table: "copied", columns: ["a", "b"], chunkLimit: 1_000) { writer in
            for index in 0..<50 { try writer.append([big + String(index), String(index)]) }
        }
        #expect(copied == 50)
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM copied WHERE a = repeat('x', 5000) || b") == 50)
    }

    @Test func jsonDatesKeepTheirMicroseconds() async throws {
        struct Stamp: Codable, Sendable, Equatable { var at: Date }
        let (connection, _) = try await freshConnection()
        let at = Date(timeIntervalSince1970: 1_795_000_000.123456)
        let back = try await connection.value(PostgresJSON<Stamp>.self, "SELECT \(PostgresJSON(Stamp(at: at)))").value
        #expect(abs(back.at.timeIntervalSince1970 - at.timeIntervalSince1970) < 1e-6)
        #expect(try await connection.value(String.self, "SELECT (\(PostgresJSON(Stamp(at: at))))::jsonb ->> 'at'") == "2026-11-18T11:06:40.123456Z")
        // Written elsewhere: an offset, or no fraction.
        let offset = try await connection.value(PostgresJSON<Stamp>.self, #"SELECT '{"at": "2026-11-18T13:06:40.5+02:00"}'::jsonb"#).value
        #expect(offset.at.timeIntervalSince1970 == 1_795_000_000.5)
    }
}
