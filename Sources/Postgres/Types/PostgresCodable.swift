import Foundation

/// A Swift value that can be sent to PostgreSQL as a query parameter, in binary format.
///
/// Conform your own types by choosing the PostgreSQL type and writing its binary form, or, for
/// enums, just declare the conformance: a `RawRepresentable` whose raw value is encodable
/// gets it for free.
///
/// ```swift
/// enum Role: String, PostgresCodable { case primary, caregiver }
/// try await connection.execute("UPDATE caregivers SET role = \(Role.primary) WHERE user_id = \(id)")
/// ```
public protocol PostgresEncodable: Sendable {
    /// The PostgreSQL type the parameter is declared as.
    static var postgresType: PostgresType { get }
    /// Appends the binary representation (without the length prefix) to `buffer`.
    func encode(into buffer: inout [UInt8]) throws(PostgresError)
}

/// A Swift value that can be built from a column value, in binary or text format.
///
/// `Optional` decodes SQL NULL as `nil`; every other type throws on NULL.
///
/// ```swift
/// struct Celsius: PostgresDecodable {
///     var value: Double
///     init(from cell: PostgresCell) throws { value = try Double(from: cell) }
/// }
/// ```
public protocol PostgresDecodable {
    /// Decodes the value of `cell`. Throw `cell.failure(...)` with a reason on bad input.
    init(from cell: PostgresCell) throws
}

/// Both directions.
///
/// ```swift
/// enum Unit: String, PostgresCodable { case oz, ml }
/// ```
public typealias PostgresCodable = PostgresEncodable & PostgresDecodable

/// One value of one row, as it came from the server. Valid only during the decode call.
///
/// ```swift
/// let isJSON = try row.withCell(at: 0) { $0.type == .jsonb }
/// ```
public struct PostgresCell {
    /// The raw bytes, or `nil` for SQL NULL.
    public let bytes: UnsafeRawBufferPointer?
    /// The column's type.
    public let type: PostgresType
    /// The wire format of `bytes`.
    public let format: PostgresFormat
    /// The column name (`?column?` for unnamed expressions).
    public let columnName: String
    /// The zero-based column position.
    public let columnIndex: Int

    public init(bytes: UnsafeRawBufferPointer?, type: PostgresType, format: PostgresFormat, columnName: String, columnIndex: Int) {
        self.bytes = bytes
        self.type = type
        self.format = format
        self.columnName = columnName
        self.columnIndex = columnIndex
    }

    /// Whether the value is SQL NULL.
    public var isNull: Bool { bytes == nil }

    /// A decoding error naming this column, its type, and `swiftType`.
    public func failure<T>(_ swiftType: T.Type, _ reason: String) -> PostgresDecodingError {
        PostgresDecodingError(
            column: columnName, columnIndex: columnIndex, postgresType: type,
            swiftType: String(describing: swiftType), reason: reason)
    }

    /// The bytes, or a decoding error if the value is NULL.
    public func nonNull<T>(_ swiftType: T.Type) throws(PostgresDecodingError) -> UnsafeRawBufferPointer {
        guard let bytes else {
            throw failure(swiftType, "the value is NULL; decode as \(swiftType)? to accept NULL")
        }
        return bytes
    }

    /// The bytes as UTF-8 text (for text format, or textual binary types).
    func text<T>(_ swiftType: T.Type) throws(PostgresDecodingError) -> String {
        let bytes = try nonNull(swiftType)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A type-mismatch error.
    func mismatch<T>(_ swiftType: T.Type, expected: String) -> PostgresDecodingError {
        failure(swiftType, "expected \(expected)")
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public init(from cell: PostgresCell) throws {
        if cell.isNull { self = nil } else { self = try Wrapped(from: cell) }
    }
}

extension PostgresEncodable where Self: RawRepresentable, RawValue: PostgresEncodable {
    public static var postgresType: PostgresType { RawValue.postgresType }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { try rawValue.encode(into: &buffer) }
}

extension PostgresDecodable where Self: RawRepresentable, RawValue: PostgresDecodable {
    public init(from cell: PostgresCell) throws {
        let raw = try RawValue(from: cell)
        guard let value = Self(rawValue: raw) else {
            throw cell.failure(Self.self, "\"\(raw)\" is not one of its raw values")
        }
        self = value
    }
}

// MARK: - Big-endian helpers

extension Array where Element == UInt8 {
    @inline(__always)
    mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }
}

extension UnsafeRawBufferPointer {
    @inline(__always)
    func readBigEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T? {
        guard offset >= 0, offset + MemoryLayout<T>.size <= count else { return nil }
        return T(bigEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}
