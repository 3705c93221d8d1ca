import Foundation

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
    static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
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
        guard cell.format == .text || cell.type == .json || PostgresType.textual.contains(cell.type) else {
            throw cell.mismatch(swiftType, expected: "json or jsonb")
        }
        return Data(bytes)
    }
}
