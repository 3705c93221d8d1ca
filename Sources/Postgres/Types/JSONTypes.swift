public import Foundation

/// A `Codable` value stored in a `json` or `jsonb` column.
///
/// Parameters are sent as `jsonb`. Both `json` and `jsonb` columns decode.
///
/// ```swift
/// struct Settings: Codable, Sendable { var unit: String }
/// try await connection.execute("UPDATE children SET settings = \(PostgresJSON(Settings(unit: "ml")))")
/// let settings = try row.decode(PostgresJSON<Settings>.self, column: "settings").value
/// ```
public struct PostgresJSON<Value: Codable & Sendable>: Sendable, PostgresEncodable, PostgresDecodable {
    public var value: Value
    public init(_ value: Value) { self.value = value }

    public static var postgresType: PostgresType { .jsonb }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        try JSONCoding.appendJSONB(value, into: &buffer)
    }

    public init(from cell: PostgresCell) throws {
        let json = try JSONCoding.jsonBytes(of: cell, as: Value.self)
        do {
            value = try JSONCoding.decoder.decode(Value.self, from: json)
        } catch {
            throw cell.failure(Value.self, "the JSON does not match: \(error)")
        }
    }
}

enum JSONCoding {
    /// Dates as ISO 8601 with microseconds (`2026-11-23T03:04:05.123456Z`), PostgreSQL's own
    /// precision: `.iso8601` would drop the fraction.
    static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISOTimestamp.format(date))
        }
        return encoder
    }

    /// Reads dates with or without a fraction, with `Z` or an offset.
    static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ISOTimestamp.parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "\"\(text)\" is not an ISO 8601 timestamp")
            }
            return date
        }
        return decoder
    }

    /// Appends `value` in jsonb's binary form: the format version, then the JSON text.
    static func appendJSONB<T: Encodable>(_ value: T, into buffer: inout [UInt8]) throws(PostgresError) {
        do {
            let data = try encoder.encode(value)
            buffer.append(1) // jsonb binary format version
            buffer.append(contentsOf: data)
        } catch {
            throw PostgresError(kind: .invalidParameter, message: "cannot encode \(T.self) as JSON: \(error)")
        }
    }

    /// The JSON text of a json/jsonb/text cell.
    static func jsonBytes<T>(of cell: PostgresCell, as swiftType: T.Type) throws -> Data {
        let bytes = try cell.nonNull(swiftType)
        if cell.format == .binary && cell.type == .jsonb {
            guard bytes.first == 1 else { throw cell.failure(swiftType, "unknown jsonb format version") }
            return Data(UnsafeRawBufferPointer(rebasing: bytes[1...]))
        }
        guard cell.format == .text || cell.type == .json || cell.type.isTextual else {
            throw cell.mismatch(swiftType, expected: "json or jsonb")
        }
        return Data(bytes)
    }
}

/// ISO 8601 timestamps to the microsecond, PostgreSQL's precision, for JSON and exports.
///
/// A date read from a `timestamptz` column, written with `format` and read back with `parse`,
/// is the same `Date`, bit for bit: both sides count whole microseconds from 2001-01-01, as
/// the wire decoder does.
///
/// ```swift
/// let text = ISOTimestamp.format(date)              // "2026-11-23T03:04:05.123456Z"
/// let same = ISOTimestamp.parse(text)               // == date
/// ```
public enum ISOTimestamp {
    /// `2026-11-23T03:04:05.123456Z`, in the proleptic Gregorian calendar PostgreSQL uses
    /// (`0001-01-01T00:00:00Z` is year 1 as PostgreSQL stores it); the fraction is left out
    /// when it is zero unless `alwaysFraction` is set. Years outside 0001–9999 are written with
    /// a sign and at least four digits (`-0044-03-15T…`, `+10000-01-01T…`), as ISO 8601's
    /// expanded form.
    public static func format(_ date: Date, alwaysFraction: Bool = false) -> String {
        guard let micros = ProlepticGregorian.microseconds(of: date) else { return "invalid date" }
        return format(microseconds: micros, alwaysFraction: alwaysFraction)
    }

    /// `format` for an instant given in microseconds since 1970-01-01 00:00 UTC.
    public static func format(microseconds micros: Int64, alwaysFraction: Bool = false) -> String {
        let perDay: Int64 = 86_400_000_000
        // Floor division without an intermediate that could overflow at the ends of Int64.
        let remainder = micros % perDay
        let days = micros / perDay - (remainder < 0 ? 1 : 0)
        let within = remainder < 0 ? remainder + perDay : remainder
        let (year, month, day) = ProlepticGregorian.civil(days: days)
        let seconds = within / 1_000_000
        let fraction = within % 1_000_000
        var text = (1...9999).contains(year) ? pad(Int(year), 4) : (year < 0 ? "-" : "+") + pad(Int(abs(year)), 4)
        text += "-" + pad(Int(month), 2) + "-" + pad(Int(day), 2)
        text += "T" + pad(Int(seconds / 3600), 2) + ":" + pad(Int(seconds / 60 % 60), 2) + ":" + pad(Int(seconds % 60), 2)
        if fraction != 0 || alwaysFraction { text += "." + pad(Int(fraction), 6) }
        return text + "Z"
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction][Z|±HH:MM]` (a `t` or a space for the `T`, `z` for
    /// `Z`; a fraction of up to 9 digits, rounded to the microsecond) in the proleptic Gregorian
    /// calendar, exactly; nil for anything else, a day that does not exist (`2026-02-30`) or an
    /// hour past 23 included.
    public static func parse(_ text: String) -> Date? {
        parseMicroseconds(text).map(ProlepticGregorian.date(microseconds:))
    }

    /// `parse`, as microseconds since 1970-01-01 00:00 UTC.
    public static func parseMicroseconds(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        var index = 0
        func digits(_ count: Int) -> Int64? {
            guard index + count <= bytes.count else { return nil }
            var value: Int64 = 0
            for byte in bytes[index..<index + count] {
                guard (48...57).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            index += count
            return value
        }
        func expect(_ characters: String) -> Bool {
            guard index < bytes.count, characters.utf8.contains(bytes[index]) else { return false }
            index += 1
            return true
        }
        guard let year = digits(4), expect("-"), let month = digits(2), expect("-"), let day = digits(2),
              expect("Tt "), let hour = digits(2), expect(":"), let minute = digits(2), expect(":"), let second = digits(2),
              (1...12).contains(month), (1...ProlepticGregorian.daysIn(month: month, year: year)).contains(day),
              hour < 24, minute < 60, second < 60 else { return nil }
        var fraction: Int64 = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            var value: Int64 = 0
            while index < bytes.count, (48...57).contains(bytes[index]), index - start < 9 {
                value = value * 10 + Int64(bytes[index] - 48)
                index += 1
            }
            let count = index - start
            guard count > 0, index == bytes.count || !(48...57).contains(bytes[index]) else { return nil }
            // To microseconds, rounding half up on the digits past the sixth.
            var scale: Int64 = 1
            for _ in 0..<abs(count - 6) { scale *= 10 }
            fraction = count <= 6 ? value * scale : (value + scale / 2) / scale
        }
        var offsetSeconds: Int64 = 0
        if expect("Zz") {
        } else if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let hours = digits(2), expect(":"), let minutes = digits(2), hours < 24, minutes < 60 else { return nil }
            offsetSeconds = sign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard index == bytes.count else { return nil }
        let days = ProlepticGregorian.days(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return seconds * 1_000_000 + fraction
    }
}
