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
    /// `2026-11-23T03:04:05.123456Z`; the fraction is left out when it is zero unless
    /// `alwaysFraction` is set.
    public static func format(_ date: Date, alwaysFraction: Bool = false) -> String {
        let totalMicros = (date.timeIntervalSinceReferenceDate * 1_000_000).rounded()
        guard totalMicros.isFinite, abs(totalMicros) < 9e18 else { return date.ISO8601Format() }
        let micros = Int64(totalMicros)
        let seconds = micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000
        let fraction = micros - seconds * 1_000_000
        let whole = Date(timeIntervalSinceReferenceDate: TimeInterval(seconds)).ISO8601Format()  // ...Z
        guard fraction != 0 || alwaysFraction else { return whole }
        return String(whole.dropLast()) + "." + pad(Int(fraction), 6) + "Z"
    }

    /// Accepts `…Z` or `…+02:00`, with or without a fraction of up to 9 digits (rounded to
    /// the microsecond); nil for anything else.
    public static func parse(_ text: String) -> Date? {
        var body = Substring(text)
        var fractionMicros: Int64 = 0
        if let dot = body.firstIndex(of: ".") {
            var end = body.index(after: dot)
            while end < body.endIndex, body[end].isASCII, body[end].isNumber { end = body.index(after: end) }
            let digits = body[body.index(after: dot)..<end]
            guard !digits.isEmpty, digits.count <= 9, let value = Int64(digits) else { return nil }
            fractionMicros = Int64((Double(value) * pow(10, Double(6 - digits.count))).rounded())
            body = body[..<dot] + body[end...]
        }
        guard let whole = try? Date(String(body), strategy: .iso8601) else { return nil }
        let seconds = whole.timeIntervalSinceReferenceDate.rounded()
        guard abs(seconds) < 9e12 else { return nil }
        return Date(timeIntervalSinceReferenceDate: Double(Int64(seconds) * 1_000_000 + fractionMicros) / 1_000_000)
    }
}
