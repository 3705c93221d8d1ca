public import Foundation

/// A type that can be an element of a one-dimensional PostgreSQL array.
///
/// `Int16`, `Int32`, `Int64`, `Int`, `String`, `UUID`, `Bool`, `Double`, `Float`, `Data`,
/// `Date` (timestamptz), `PostgresDate`, `PostgresTime`, `PostgresInterval`, `Decimal`,
/// `PostgresNumeric` and `PostgresJSON` conform, and so does `Optional` of each, for arrays
/// holding NULL.
///
/// ```swift
/// let ids: [UUID] = [a, b]
/// let rows = try await connection.query("SELECT name FROM children WHERE id = ANY(\(ids))")
/// let tags = try row.decode([String?].self, column: "tags")
/// ```
public protocol PostgresArrayElement: Sendable {
    /// The element type.
    static var elementType: PostgresType { get }
    /// The array type (`int4[]` for `int4`).
    static var arrayType: PostgresType { get }
    /// Appends the element's binary form; returns `false` for NULL (nothing appended).
    func encodeElement(into buffer: inout [UInt8]) throws(PostgresError) -> Bool
    /// Decodes one element (a NULL element arrives as a NULL cell).
    static func decodeElement(from cell: PostgresCell) throws -> Self
}

extension PostgresArrayElement where Self: PostgresEncodable & PostgresDecodable {
    public static var elementType: PostgresType { postgresType }
    public func encodeElement(into buffer: inout [UInt8]) throws(PostgresError) -> Bool {
        try encode(into: &buffer)
        return true
    }
    public static func decodeElement(from cell: PostgresCell) throws -> Self { try Self(from: cell) }
}

extension Int16: PostgresArrayElement { public static var arrayType: PostgresType { .int2Array } }
extension Int32: PostgresArrayElement { public static var arrayType: PostgresType { .int4Array } }
extension Int64: PostgresArrayElement { public static var arrayType: PostgresType { .int8Array } }
extension Int: PostgresArrayElement { public static var arrayType: PostgresType { .int8Array } }
extension String: PostgresArrayElement { public static var arrayType: PostgresType { .textArray } }
extension UUID: PostgresArrayElement { public static var arrayType: PostgresType { .uuidArray } }
extension Bool: PostgresArrayElement { public static var arrayType: PostgresType { .boolArray } }
extension Double: PostgresArrayElement { public static var arrayType: PostgresType { .float8Array } }
extension Float: PostgresArrayElement { public static var arrayType: PostgresType { .float4Array } }
extension Data: PostgresArrayElement { public static var arrayType: PostgresType { .byteaArray } }
extension Date: PostgresArrayElement { public static var arrayType: PostgresType { .timestamptzArray } }
extension PostgresDate: PostgresArrayElement { public static var arrayType: PostgresType { .dateArray } }
extension PostgresTime: PostgresArrayElement { public static var arrayType: PostgresType { .timeArray } }
extension PostgresInterval: PostgresArrayElement { public static var arrayType: PostgresType { .intervalArray } }
extension Decimal: PostgresArrayElement { public static var arrayType: PostgresType { .numericArray } }
extension PostgresNumeric: PostgresArrayElement { public static var arrayType: PostgresType { .numericArray } }
extension PostgresJSON: PostgresArrayElement { public static var arrayType: PostgresType { .jsonbArray } }

extension Optional: PostgresArrayElement where Wrapped: PostgresArrayElement {
    public static var elementType: PostgresType { Wrapped.elementType }
    public static var arrayType: PostgresType { Wrapped.arrayType }
    public func encodeElement(into buffer: inout [UInt8]) throws(PostgresError) -> Bool {
        guard let self else { return false }
        return try self.encodeElement(into: &buffer)
    }
    public static func decodeElement(from cell: PostgresCell) throws -> Self {
        cell.isNull ? nil : try Wrapped.decodeElement(from: cell)
    }
}

extension Array: PostgresEncodable where Element: PostgresArrayElement {
    public static var postgresType: PostgresType { Element.arrayType }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        guard let count = Int32(exactly: self.count) else {
            throw PostgresError(kind: .invalidParameter, message: "array too large")
        }
        buffer.appendBigEndian(Int32(isEmpty ? 0 : 1)) // dimensions
        let flagsOffset = buffer.count
        buffer.appendBigEndian(Int32(0)) // has nulls, patched below
        buffer.appendBigEndian(Element.elementType.rawValue)
        if isEmpty { return }
        buffer.appendBigEndian(count)
        buffer.appendBigEndian(Int32(1)) // lower bound
        var hasNull = false
        for element in self {
            let lengthOffset = buffer.count
            buffer.appendBigEndian(Int32(0))
            if try element.encodeElement(into: &buffer) {
                guard let length = Int32(exactly: buffer.count - lengthOffset - 4) else {
                    throw PostgresError(kind: .invalidParameter, message: "an array element is larger than 2 GiB")
                }
                Swift.withUnsafeBytes(of: length.bigEndian) { bytes in
                    for index in 0..<4 { buffer[lengthOffset + index] = bytes[index] }
                }
            } else {
                hasNull = true
                for index in 0..<4 { buffer[lengthOffset + index] = 0xFF } // -1: NULL
            }
        }
        if hasNull { buffer[flagsOffset + 3] = 1 }
    }
}

extension Array: PostgresDecodable where Element: PostgresArrayElement {
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull([Element].self)
        switch cell.format {
        case .binary: self = try Self.decodeBinary(bytes, cell: cell)
        case .text: self = try Self.decodeText(String(decoding: bytes, as: UTF8.self), cell: cell)
        }
    }

    private static func decodeBinary(_ bytes: UnsafeRawBufferPointer, cell: PostgresCell) throws -> [Element] {
        guard let dimensions = bytes.readBigEndian(Int32.self, at: 0), let flags = bytes.readBigEndian(Int32.self, at: 4),
              let elementOID = bytes.readBigEndian(UInt32.self, at: 8), flags == 0 || flags == 1 else {
            throw cell.mismatch([Element].self, expected: "an array")
        }
        if dimensions == 0 { return [] }
        guard dimensions == 1 else {
            throw cell.failure([Element].self, "a \(dimensions)-dimensional array cannot decode as a Swift array; select one dimension (unnest, or arr[i][:])")
        }
        // The lower bound (at 16) may be anything: '[0:2]={1,2,3}' decodes as [1, 2, 3].
        guard let count = bytes.readBigEndian(Int32.self, at: 12), count >= 0, bytes.readBigEndian(Int32.self, at: 16) != nil,
              Int(count) <= (bytes.count - 20) / 4 else {
            throw cell.failure([Element].self, "malformed array header")
        }
        var result: [Element] = []
        result.reserveCapacity(Int(count))
        var offset = 20
        for _ in 0..<Int(count) {
            guard let length = bytes.readBigEndian(Int32.self, at: offset), length >= -1 else {
                throw cell.failure([Element].self, "truncated array")
            }
            offset += 4
            var element: UnsafeRawBufferPointer?
            if length >= 0 {
                guard Int(length) <= bytes.count - offset else { throw cell.failure([Element].self, "truncated array") }
                element = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + Int(length))])
                offset += Int(length)
            }
            let elementCell = PostgresCell(
                bytes: element, type: PostgresType(elementOID), format: .binary,
                columnName: cell.columnName + "[\(result.count + 1)]", columnIndex: cell.columnIndex)
            result.append(try Element.decodeElement(from: elementCell))
        }
        guard offset == bytes.count else { throw cell.failure([Element].self, "\(bytes.count - offset) stray bytes after the array") }
        return result
    }

    /// Parses `{1,2,NULL}`, `{"a b","c\"d"}` and `[0:2]={1,2,3}` (one dimension).
    private static func decodeText(_ text: String, cell: PostgresCell) throws -> [Element] {
        var characters = [UInt8](text.utf8)
        // Bounds decoration, present when the lower bound is not 1: [0:2]=
        if characters.first == UInt8(ascii: "["), let equals = characters.firstIndex(of: UInt8(ascii: "=")) {
            let decoration = characters[..<equals]
            guard decoration.filter({ $0 == UInt8(ascii: "[") }).count == 1 else {
                throw cell.failure([Element].self, "a multi-dimensional array cannot decode as a Swift array")
            }
            characters.removeSubrange(...equals)
        }
        guard characters.count >= 2, characters.first == UInt8(ascii: "{"), characters.last == UInt8(ascii: "}") else {
            throw cell.failure([Element].self, "\"\(text)\" is not an array literal")
        }
        var items: [[UInt8]?] = []
        var index = 1
        let end = characters.count - 1
        while index < end {
            var item: [UInt8] = []
            var quoted = false
            if characters[index] == UInt8(ascii: "\"") {
                quoted = true
                index += 1
                while index < end, characters[index] != UInt8(ascii: "\"") {
                    if characters[index] == UInt8(ascii: "\\") { index += 1 }
                    if index < end { item.append(characters[index]) }
                    index += 1
                }
                index += 1 // closing quote
            } else {
                while index < end, characters[index] != UInt8(ascii: ",") {
                    if characters[index] == UInt8(ascii: "{") {
                        throw cell.failure([Element].self, "multi-dimensional arrays are not supported")
                    }
                    item.append(characters[index])
                    index += 1
                }
            }
            items.append(!quoted && item == [UInt8]("NULL".utf8) ? nil : item)
            index += 1 // comma
        }
        let elementType = PostgresType(cell.type == .textArray ? PostgresType.text.rawValue : Element.elementType.rawValue)
        var result: [Element] = []
        result.reserveCapacity(items.count)
        for item in items {
            let decoded: Element = try item.withOptionalBytes { raw in
                try Element.decodeElement(from: PostgresCell(
                    bytes: raw, type: elementType, format: .text,
                    columnName: cell.columnName + "[\(result.count + 1)]", columnIndex: cell.columnIndex))
            }
            result.append(decoded)
        }
        return result
    }
}

extension Optional where Wrapped == [UInt8] {
    fileprivate func withOptionalBytes<R>(_ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        guard let self else { return try body(nil) }
        return try self.withUnsafeBytes { try body($0) }
    }
}
