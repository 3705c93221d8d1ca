public import Foundation

// MARK: Bool

extension Bool: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .bool }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.append(self ? 1 : 0) }
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(Bool.self)
        switch cell.format {
        case .binary:
            guard cell.type == .bool, bytes.count == 1 else { throw cell.mismatch(Bool.self, expected: "boolean") }
            self = bytes[0] != 0
        case .text:
            switch String(decoding: bytes, as: UTF8.self) {
            case "t", "true": self = true
            case "f", "false": self = false
            case let other: throw cell.failure(Bool.self, "\"\(other)\" is not a boolean")
            }
        }
    }
}

// MARK: Integers

/// Reads any PostgreSQL integer column into `T`, refusing values that do not fit.
private func decodeInteger<T: FixedWidthInteger>(_: T.Type, from cell: PostgresCell) throws -> T {
    let bytes = try cell.nonNull(T.self)
    let wide: Int64
    switch cell.format {
    case .binary:
        switch (cell.type, bytes.count) {
        case (.int2, 2): wide = Int64(bytes.readBigEndian(Int16.self, at: 0) ?? 0)
        case (.int4, 4): wide = Int64(bytes.readBigEndian(Int32.self, at: 0) ?? 0)
        case (.int8, 8): wide = bytes.readBigEndian(Int64.self, at: 0) ?? 0
        case (.oid, 4): wide = Int64(bytes.readBigEndian(UInt32.self, at: 0) ?? 0)
        case (.xid8, 8):
            let raw = bytes.readBigEndian(UInt64.self, at: 0) ?? 0
            guard let value = Int64(exactly: raw) else { throw cell.failure(T.self, "\(raw) does not fit") }
            wide = value
        default: throw cell.mismatch(T.self, expected: "smallint, integer or bigint")
        }
    case .text:
        let text = String(decoding: bytes, as: UTF8.self)
        guard let value = Int64(text) else { throw cell.failure(T.self, "\"\(text)\" is not an integer") }
        wide = value
    }
    guard let value = T(exactly: wide) else {
        throw cell.failure(T.self, "\(wide) is outside \(T.min)...\(T.max)")
    }
    return value
}

extension Int16: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .int2 }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(self) }
    public init(from cell: PostgresCell) throws { self = try decodeInteger(Int16.self, from: cell) }
}

extension Int32: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .int4 }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(self) }
    public init(from cell: PostgresCell) throws { self = try decodeInteger(Int32.self, from: cell) }
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .int8 }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(self) }
    public init(from cell: PostgresCell) throws { self = try decodeInteger(Int64.self, from: cell) }
}

extension Int: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .int8 }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(Int64(self)) }
    public init(from cell: PostgresCell) throws { self = try decodeInteger(Int.self, from: cell) }
}

// MARK: Floating point

extension Float: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .float4 }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(bitPattern) }
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(Float.self)
        switch cell.format {
        case .binary:
            guard cell.type == .float4, let bits = bytes.readBigEndian(UInt32.self, at: 0), bytes.count == 4 else {
                throw cell.mismatch(Float.self, expected: "real (decode double precision as Double)")
            }
            self = Float(bitPattern: bits)
        case .text:
            guard let value = Float(postgresText: String(decoding: bytes, as: UTF8.self)) else {
                throw cell.failure(Float.self, "not a number")
            }
            self = value
        }
    }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .float8 }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(bitPattern) }
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(Double.self)
        switch cell.format {
        case .binary:
            switch (cell.type, bytes.count) {
            case (.float8, 8): self = Double(bitPattern: bytes.readBigEndian(UInt64.self, at: 0) ?? 0)
            case (.float4, 4): self = Double(Float(bitPattern: bytes.readBigEndian(UInt32.self, at: 0) ?? 0))
            default: throw cell.mismatch(Double.self, expected: "double precision or real (decode numeric as Decimal)")
            }
        case .text:
            guard let value = Double(postgresText: String(decoding: bytes, as: UTF8.self)) else {
                throw cell.failure(Double.self, "not a number")
            }
            self = value
        }
    }
}

extension BinaryFloatingPoint where Self: LosslessStringConvertible {
    /// Parses PostgreSQL's text output, including `NaN`, `Infinity` and `-Infinity`.
    init?(postgresText text: String) {
        switch text {
        case "NaN": self = .nan
        case "Infinity": self = .infinity
        case "-Infinity": self = -.infinity
        default:
            guard let value = Self(text) else { return nil }
            self = value
        }
    }
}

// MARK: String

extension String: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .text }

    /// UTF-8 bytes. PostgreSQL text cannot hold U+0000, so a NUL is refused here, before
    /// anything reaches the server.
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        let start = buffer.count
        buffer.append(contentsOf: utf8)
        if buffer[start...].contains(0) {
            buffer.removeSubrange(start...)
            throw PostgresError(
                kind: .invalidParameter,
                message: "a text value contains a NUL character (U+0000), which PostgreSQL text cannot store; remove it or send the value as Data (bytea)")
        }
    }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(String.self)
        if cell.format == .text || cell.type.isTextual {
            self = String(decoding: bytes, as: UTF8.self)
            return
        }
        switch cell.type {
        case .jsonb:
            guard bytes.first == 1 else { throw cell.failure(String.self, "unknown jsonb version") }
            self = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[1...]), as: UTF8.self)
        case .numeric:
            self = try PostgresNumeric(from: cell).description
        case .uuid:
            self = try UUID(from: cell).uuidString.lowercased()
        default:
            throw cell.mismatch(String.self, expected: "a text type, json, jsonb, numeric or uuid (cast the column ::text)")
        }
    }
}

// MARK: UUID

extension UUID: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .uuid }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        withUnsafeBytes(of: uuid) { buffer.append(contentsOf: $0) }
    }
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(UUID.self)
        if cell.format == .binary && cell.type == .uuid {
            guard bytes.count == 16 else { throw cell.failure(UUID.self, "expected 16 bytes, got \(bytes.count)") }
            var value: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &value) { $0.copyMemory(from: bytes) }
            self = UUID(uuid: value)
        } else if cell.format == .text || cell.type.isTextual {
            let text = String(decoding: bytes, as: UTF8.self)
            guard let value = UUID(uuidString: text) else { throw cell.failure(UUID.self, "\"\(text)\" is not a UUID") }
            self = value
        } else {
            throw cell.mismatch(UUID.self, expected: "uuid")
        }
    }
}

// MARK: bytea

extension Data: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresType { .bytea }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.append(contentsOf: self) }
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(Data.self)
        switch cell.format {
        case .binary:
            guard cell.type == .bytea else { throw cell.mismatch(Data.self, expected: "bytea") }
            self = Data(bytes)
        case .text:
            // bytea_output = hex: "\x0a0b..."
            let text = Array(bytes)
            guard text.count >= 2, text[0] == UInt8(ascii: "\\"), text[1] == UInt8(ascii: "x"), text.count % 2 == 0 else {
                throw cell.failure(Data.self, "expected bytea in hex format (\\x...)")
            }
            var out = Data(capacity: (text.count - 2) / 2)
            var index = 2
            while index < text.count {
                guard let high = hexValue(text[index]), let low = hexValue(text[index + 1]) else {
                    throw cell.failure(Data.self, "invalid hex digit")
                }
                out.append(high << 4 | low)
                index += 2
            }
            self = out
        }
    }
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}
