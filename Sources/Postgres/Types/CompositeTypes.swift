import Foundation

/// A Swift enum for a PostgreSQL enum type (`CREATE TYPE mood AS ENUM (…)`).
///
/// Its values are sent with no declared type, so the server takes the enum type from where the
/// value goes (a column, a comparison, a `$1::mood` cast); they come back as their labels.
///
/// ```swift
/// enum Mood: String, PostgresEnum { case calm, fussy }
/// try await connection.execute("UPDATE children SET mood = \(Mood.calm) WHERE id = \(id)")
/// let mood = try row.decode(Mood.self, column: "mood")
/// ```
public protocol PostgresEnum: RawRepresentable, PostgresEncodable, PostgresDecodable where RawValue == String {}

extension PostgresEnum {
    public static var postgresType: PostgresType { .unspecified }
    /// The label (an enum's binary form is its label's text).
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { try rawValue.encode(into: &buffer) }

    public init(from cell: PostgresCell) throws {
        let label = String(decoding: try cell.nonNull(Self.self), as: UTF8.self)
        guard let value = Self(rawValue: label) else {
            throw cell.failure(Self.self, "\"\(label)\" is not one of its cases (a label added to the database type but not to the Swift enum?)")
        }
        self = value
    }
}

/// Reads the fields of a composite (row) value, in either wire format, in order. The way to
/// decode your own composite types.
///
/// ```swift
/// // CREATE TYPE feeding_amount AS (ml integer, unit text);
/// struct FeedingAmount: PostgresCodable {
///     var ml: Int32
///     var unit: String
///     static var postgresType: PostgresType { .unspecified }   // the server knows it from the context
///     func encode(into buffer: inout [UInt8]) throws(PostgresError) {
///         var writer = PostgresCompositeWriter()
///         try writer.append(ml)
///         try writer.append(unit)
///         writer.finish(into: &buffer)
///     }
///     init(from cell: PostgresCell) throws {
///         var reader = try PostgresCompositeReader(cell)
///         ml = try reader.next(Int32.self)
///         unit = try reader.next(String.self)
///     }
/// }
/// ```
public struct PostgresCompositeReader {
    private struct Field {
        var oid: UInt32
        var bytes: [UInt8]?
    }

    private let cell: PostgresCell
    private var fields: [Field] = []
    private var position = 0
    private let format: PostgresFormat

    /// Splits `cell`'s value into its fields; throws a decoding error naming the column if it
    /// is not a composite.
    public init(_ cell: PostgresCell) throws {
        self.cell = cell
        format = cell.format
        let bytes = try cell.nonNull(PostgresCompositeReader.self)
        switch cell.format {
        case .binary: fields = try Self.binaryFields(bytes, cell: cell)
        case .text: fields = try Self.textFields(Array(bytes), cell: cell)
        }
    }

    /// How many fields the value has.
    public var count: Int { fields.count }

    /// The next field as `T` (`T?` for a field that may be NULL).
    public mutating func next<T: PostgresDecodable>(_ type: T.Type) throws -> T {
        guard position < fields.count else {
            throw cell.failure(T.self, "the composite value has only \(fields.count) field(s)")
        }
        let field = fields[position]
        position += 1
        let name = cell.columnName + ".\(position)"
        guard let bytes = field.bytes else {
            return try T(from: PostgresCell(bytes: nil, type: PostgresType(field.oid), format: format, columnName: name, columnIndex: cell.columnIndex))
        }
        return try bytes.withUnsafeBytes {
            try T(from: PostgresCell(bytes: $0, type: format == .text ? .text : PostgresType(field.oid), format: format, columnName: name, columnIndex: cell.columnIndex))
        }
    }

    /// `record_send`: field count, then for each field its type OID, length (-1 for NULL), bytes.
    private static func binaryFields(_ bytes: UnsafeRawBufferPointer, cell: PostgresCell) throws -> [Field] {
        guard let count = bytes.readBigEndian(Int32.self, at: 0), count >= 0, Int(count) <= (bytes.count - 4) / 8 else {
            throw cell.failure(PostgresCompositeReader.self, "not a composite value")
        }
        var fields: [Field] = []
        var offset = 4
        for _ in 0..<Int(count) {
            guard let oid = bytes.readBigEndian(UInt32.self, at: offset), let length = bytes.readBigEndian(Int32.self, at: offset + 4), length >= -1 else {
                throw cell.failure(PostgresCompositeReader.self, "truncated composite value")
            }
            offset += 8
            if length < 0 {
                fields.append(Field(oid: oid, bytes: nil))
                continue
            }
            guard Int(length) <= bytes.count - offset else { throw cell.failure(PostgresCompositeReader.self, "truncated composite value") }
            fields.append(Field(oid: oid, bytes: Array(bytes[offset..<(offset + Int(length))])))
            offset += Int(length)
        }
        guard offset == bytes.count else { throw cell.failure(PostgresCompositeReader.self, "stray bytes after the composite value") }
        return fields
    }

    /// `record_out`: `(1,"two words",,"a ""quote""")`; an empty unquoted field is NULL.
    private static func textFields(_ text: [UInt8], cell: PostgresCell) throws -> [Field] {
        guard text.count >= 2, text.first == UInt8(ascii: "("), text.last == UInt8(ascii: ")") else {
            throw cell.failure(PostgresCompositeReader.self, "not a composite value")
        }
        var fields: [Field] = []
        var current: [UInt8] = []
        var quoted = false
        var inQuotes = false
        var index = 1
        let end = text.count - 1
        while index <= end {
            let byte = text[index]
            if index == end || (byte == UInt8(ascii: ",") && !inQuotes) {
                fields.append(Field(oid: 0, bytes: current.isEmpty && !quoted ? nil : current))
                current = []
                quoted = false
                index += 1
                continue
            }
            if byte == UInt8(ascii: "\"") {
                if inQuotes, index + 1 < end, text[index + 1] == UInt8(ascii: "\"") {
                    current.append(byte)
                    index += 2
                    continue
                }
                inQuotes.toggle()
                quoted = true
            } else if byte == UInt8(ascii: "\\"), index + 1 < end {
                current.append(text[index + 1])
                index += 2
                continue
            } else {
                current.append(byte)
            }
            index += 1
        }
        guard !inQuotes else { throw cell.failure(PostgresCompositeReader.self, "unterminated quote in a composite value") }
        return fields
    }
}

/// Writes a composite (row) value in binary (`record_recv`'s format), field by field. The field
/// types must be exactly the composite's (an `Int32` for an `integer` field).
///
/// ```swift
/// var writer = PostgresCompositeWriter()
/// try writer.append(Int32(120))
/// try writer.append("ml")
/// writer.finish(into: &buffer)
/// ```
public struct PostgresCompositeWriter: Sendable {
    private var body: [UInt8] = []
    private var count: Int32 = 0

    public init() {}

    /// Appends a field; `nil` is NULL.
    public mutating func append<T: PostgresEncodable>(_ value: T?) throws(PostgresError) {
        count += 1
        body.appendBigEndian(T.postgresType.rawValue)
        guard let value else {
            body.appendBigEndian(Int32(-1))
            return
        }
        let lengthOffset = body.count
        body.appendBigEndian(Int32(0))
        try value.encode(into: &body)
        guard let length = Int32(exactly: body.count - lengthOffset - 4) else {
            throw PostgresError(kind: .invalidParameter, message: "a composite field is larger than 2 GiB")
        }
        Swift.withUnsafeBytes(of: length.bigEndian) { bytes in
            for index in 0..<4 { body[lengthOffset + index] = bytes[index] }
        }
    }

    /// Appends the finished value to `buffer`.
    public func finish(into buffer: inout [UInt8]) {
        buffer.appendBigEndian(count)
        buffer.append(contentsOf: body)
    }
}
