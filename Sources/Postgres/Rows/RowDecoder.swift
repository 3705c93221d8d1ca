import Foundation
import Synchronization

/// Decodes a `Decodable` struct from a row: one property per column.
struct RowDecoder: Decoder {
    let row: PostgresRow
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(RowKeyedContainer<Key>(row: row, map: row.storage.propertyColumns(for: ObjectIdentifier(Key.self))))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: [], debugDescription: "a row decodes into a struct with named properties, or a tuple with row.decode((A, B).self)"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        guard row.columns.count == 1 else {
            throw DecodingError.typeMismatch(Any.self, .init(codingPath: [], debugDescription: "a single value needs a one-column result; this one has \(row.columns.count)"))
        }
        return CellDecoder(row: row, column: 0, codingPath: [])
    }

    /// `birthDate` → `birth_date`, `userID` → `user_id`, `urlValue` → `url_value`.
    ///
    /// Remembered per key (coding keys are few and fixed; at most 4096 are kept): the
    /// conversion tests Unicode properties per character, and a struct's keys were converted
    /// again for every row of every result.
    static func snakeCase(_ key: String) -> String {
        if let known = snakeCases.withLock({ $0[key] }) { return known }
        let converted = convertedToSnakeCase(key)
        snakeCases.withLock { if $0.count < 4096 { $0[key] = converted } }
        return converted
    }

    private static let snakeCases = Mutex<[String: String]>([:])

    private static func convertedToSnakeCase(_ key: String) -> String {
        var result = ""
        let characters = Array(key)
        for (index, character) in characters.enumerated() {
            if character.isUppercase, index > 0 {
                let previous = characters[index - 1]
                let nextIsLower = index + 1 < characters.count && characters[index + 1].isLowercase
                if previous.isLowercase || previous.isNumber || (previous.isUppercase && nextIsLower) {
                    result.append("_")
                }
            }
            result += character.lowercased()
        }
        return result
    }
}

private struct RowKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let row: PostgresRow
    /// Where `Key`'s properties are in this result (see `PropertyColumns`).
    let map: PropertyColumns
    var codingPath: [any CodingKey] { [] }

    var allKeys: [Key] { row.columns.compactMap { Key(stringValue: $0.name) } }

    func column(for key: Key) -> Int? {
        let name = key.stringValue
        if let column = map.columns[name] { return column >= 0 ? column : nil }
        return row.storage.resolve(codingKey: name, for: ObjectIdentifier(Key.self))
    }

    func contains(_ key: Key) -> Bool { column(for: key) != nil }

    func requireColumn(_ key: Key) throws -> Int {
        guard let column = column(for: key) else {
            throw PostgresDecodingError(
                column: RowDecoder.snakeCase(key.stringValue), columnIndex: -1, postgresType: .unspecified,
                swiftType: "property \(key.stringValue)",
                reason: "the result has no such column; it has: \(row.columns.map(\.name).joined(separator: ", "))")
        }
        return column
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        guard let column = column(for: key) else { return true }
        return row.isNull(at: column)
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try CellDecoder(row: row, column: try requireColumn(key), codingPath: [key]).decodeValue(T.self)
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let column = column(for: key), !row.isNull(at: column) else { return nil }
        return try CellDecoder(row: row, column: column, codingPath: [key]).decodeValue(T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try CellDecoder(row: row, column: try requireColumn(key), codingPath: [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try CellDecoder(row: row, column: try requireColumn(key), codingPath: [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { RowDecoder(row: row) }
    func superDecoder(forKey key: Key) throws -> any Decoder { RowDecoder(row: row) }
}

/// Decodes one column: natively when the type is `PostgresDecodable`, from JSON for
/// json/jsonb columns, and through `init(from: Decoder)` otherwise (enums with raw values).
private struct CellDecoder: Decoder, SingleValueDecodingContainer {
    let row: PostgresRow
    let column: Int
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    var cell: PostgresCell { row.storage.cell(row: row.index, column: column) }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if let native = T.self as? any PostgresDecodable.Type {
            let value = try native.init(from: cell)
            guard let typed = value as? T else {
                throw cell.failure(T.self, "internal type mismatch")
            }
            return typed
        }
        let cell = self.cell
        if cell.type == .json || cell.type == .jsonb {
            let json = try JSONCoding.jsonBytes(of: cell, as: T.self)
            do {
                return try JSONCoding.decoder.decode(T.self, from: json)
            } catch {
                throw cell.failure(T.self, "the JSON does not match: \(error)")
            }
        }
        return try T(from: self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        throw cell.failure(Key.self, "a keyed value needs a json or jsonb column")
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw cell.failure([Any].self, "decode arrays as [T] with T an array element type, or from json")
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decodeNil() -> Bool { row.isNull(at: column) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self) }
    func decode(_ type: Bool.Type) throws -> Bool { try Bool(from: cell) }
    func decode(_ type: String.Type) throws -> String { try String(from: cell) }
    func decode(_ type: Double.Type) throws -> Double { try Double(from: cell) }
    func decode(_ type: Float.Type) throws -> Float { try Float(from: cell) }
    func decode(_ type: Int.Type) throws -> Int { try Int(from: cell) }
    func decode(_ type: Int16.Type) throws -> Int16 { try Int16(from: cell) }
    func decode(_ type: Int32.Type) throws -> Int32 { try Int32(from: cell) }
    func decode(_ type: Int64.Type) throws -> Int64 { try Int64(from: cell) }
    func decode(_ type: Int8.Type) throws -> Int8 { try narrow(Int8.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try narrow(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try narrow(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try narrow(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try narrow(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try narrow(UInt64.self) }

    private func narrow<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let wide = try Int64(from: cell)
        guard let value = T(exactly: wide) else { throw cell.failure(T.self, "\(wide) does not fit") }
        return value
    }
}
