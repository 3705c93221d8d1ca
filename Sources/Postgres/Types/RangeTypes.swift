public import Foundation

/// A type that can bound a PostgreSQL range: `Date` (`tstzrange`), `PostgresDate`
/// (`daterange`), `Int32` (`int4range`), `Int64` (`int8range`).
///
/// ```swift
/// let sleep: PostgresRange<Date> = .init(lower: start, upper: end)   // [start, end)
/// ```
public protocol PostgresRangeBound: PostgresEncodable, PostgresDecodable, Comparable, Sendable {
    /// The range type whose bounds are this type.
    static var rangeType: PostgresType { get }
}

extension Date: PostgresRangeBound { public static var rangeType: PostgresType { .tstzrange } }
extension PostgresDate: PostgresRangeBound { public static var rangeType: PostgresType { .daterange } }
extension Int32: PostgresRangeBound { public static var rangeType: PostgresType { .int4range } }
extension Int64: PostgresRangeBound { public static var rangeType: PostgresType { .int8range } }

/// A PostgreSQL range: `tstzrange`, `daterange`, `int4range`, `int8range`. A missing bound is
/// unbounded (infinite); `isEmpty` is the empty range. A sleep is one: `[start, end)`, with
/// `upper == nil` while it runs.
///
/// PostgreSQL normalizes discrete ranges (dates, integers) to `[lower, upper)`, so
/// `[1, 3]` comes back as `[1, 4)`.
///
/// ```swift
/// let night = PostgresRange(lower: start, upper: end)
/// let overlapping = try await connection.query("""
///     SELECT id FROM events WHERE tstzrange(start_time, end_time) && \(night)
///     """)
/// let range = try row.decode(PostgresRange<Date>.self, at: 0)
/// ```
public struct PostgresRange<Bound: PostgresRangeBound>: Hashable, Sendable, CustomStringConvertible, PostgresEncodable, PostgresDecodable where Bound: Hashable {
    public var lower: Bound?
    public var upper: Bound?
    public var lowerInclusive: Bool
    public var upperInclusive: Bool
    public var isEmpty: Bool

    /// `[lower, upper)` by default; `nil` is unbounded.
    public init(lower: Bound?, upper: Bound?, lowerInclusive: Bool = true, upperInclusive: Bool = false) {
        self.lower = lower
        self.upper = upper
        self.lowerInclusive = lower != nil && lowerInclusive
        self.upperInclusive = upper != nil && upperInclusive
        isEmpty = false
    }

    /// The empty range.
    public static var empty: PostgresRange {
        var range = PostgresRange(lower: nil, upper: nil)
        range.isEmpty = true
        return range
    }

    /// Whether `value` lies in the range.
    public func contains(_ value: Bound) -> Bool {
        guard !isEmpty else { return false }
        if let lower, lowerInclusive ? value < lower : value <= lower { return false }
        if let upper, upperInclusive ? value > upper : value >= upper { return false }
        return true
    }

    /// `[a,b)`, `(,b]`, `empty`.
    public var description: String {
        if isEmpty { return "empty" }
        return (lowerInclusive ? "[" : "(") + (lower.map { "\($0)" } ?? "") + "," + (upper.map { "\($0)" } ?? "") + (upperInclusive ? "]" : ")")
    }

    // Binary format (rangetypes.c): a flags byte, then each present bound as length + value.
    private static var emptyFlag: UInt8 { 0x01 }
    private static var lowerInclusiveFlag: UInt8 { 0x02 }
    private static var upperInclusiveFlag: UInt8 { 0x04 }
    private static var lowerInfiniteFlag: UInt8 { 0x08 }
    private static var upperInfiniteFlag: UInt8 { 0x10 }

    public static var postgresType: PostgresType { Bound.rangeType }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        if isEmpty {
            buffer.append(Self.emptyFlag)
            return
        }
        if let lower, let upper, upper < lower {
            throw PostgresError(kind: .invalidParameter, message: "range lower bound \(lower) is after its upper bound \(upper)")
        }
        var flags: UInt8 = 0
        if lowerInclusive { flags |= Self.lowerInclusiveFlag }
        if upperInclusive { flags |= Self.upperInclusiveFlag }
        if lower == nil { flags |= Self.lowerInfiniteFlag }
        if upper == nil { flags |= Self.upperInfiniteFlag }
        buffer.append(flags)
        for bound in [lower, upper] {
            guard let bound else { continue }
            let lengthOffset = buffer.count
            buffer.appendBigEndian(Int32(0))
            try bound.encode(into: &buffer)
            let length = Int32(truncatingIfNeeded: buffer.count - lengthOffset - 4)
            Swift.withUnsafeBytes(of: length.bigEndian) { bytes in
                for index in 0..<4 { buffer[lengthOffset + index] = bytes[index] }
            }
        }
    }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(Self.self)
        switch cell.format {
        case .binary:
            guard cell.type == Bound.rangeType, let flags = bytes.first else {
                throw cell.mismatch(Self.self, expected: Bound.rangeType.description)
            }
            if flags & Self.emptyFlag != 0 {
                guard bytes.count == 1 else { throw cell.failure(Self.self, "malformed empty range") }
                self = .empty
                return
            }
            var offset = 1
            func bound(present: Bool) throws -> Bound? {
                guard present else { return nil }
                guard let length = bytes.readBigEndian(Int32.self, at: offset), length >= 0, Int(length) <= bytes.count - offset - 4 else {
                    throw cell.failure(Self.self, "truncated range")
                }
                let value = UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 4 + Int(length))])
                offset += 4 + Int(length)
                let subtype: PostgresType = switch Bound.rangeType {
                case .tstzrange: .timestamptz
                case .daterange: .date
                case .int4range: .int4
                default: .int8
                }
                return try Bound(from: PostgresCell(bytes: value, type: subtype, format: .binary, columnName: cell.columnName, columnIndex: cell.columnIndex))
            }
            let lower = try bound(present: flags & Self.lowerInfiniteFlag == 0)
            let upper = try bound(present: flags & Self.upperInfiniteFlag == 0)
            guard offset == bytes.count else { throw cell.failure(Self.self, "stray bytes after the range") }
            self.init(lower: lower, upper: upper, lowerInclusive: flags & Self.lowerInclusiveFlag != 0, upperInclusive: flags & Self.upperInclusiveFlag != 0)
        case .text:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let range = Self(text: text, cell: cell) else { throw cell.failure(Self.self, "\"\(text)\" is not a range") }
            self = range
        }
    }

    /// Parses `empty`, `[a,b)`, `("2024-01-01 00:00:00+00",)`.
    private init?(text: String, cell: PostgresCell) {
        if text == "empty" {
            self = .empty
            return
        }
        let scalars = Array(text.unicodeScalars)
        guard scalars.count >= 3, let open = scalars.first, let close = scalars.last,
              open == "[" || open == "(", close == "]" || close == ")" else { return nil }
        // Split at the one comma outside quotes.
        var parts: [String] = [""]
        var quoted: [Bool] = [false]
        var inQuotes = false
        var index = 1
        while index < scalars.count - 1 {
            let scalar = scalars[index]
            if scalar == "\"" {
                if inQuotes, index + 1 < scalars.count - 1, scalars[index + 1] == "\"" {
                    parts[parts.count - 1].unicodeScalars.append("\"")
                    index += 2
                    continue
                }
                inQuotes.toggle()
                quoted[quoted.count - 1] = true
            } else if scalar == "\\", inQuotes, index + 1 < scalars.count - 1 {
                parts[parts.count - 1].unicodeScalars.append(scalars[index + 1])
                index += 2
                continue
            } else if scalar == ",", !inQuotes {
                parts.append("")
                quoted.append(false)
            } else {
                parts[parts.count - 1].unicodeScalars.append(scalar)
            }
            index += 1
        }
        guard parts.count == 2, !inQuotes else { return nil }
        func bound(_ text: String, quoted: Bool) -> Bound?? {
            if text.isEmpty && !quoted { return .some(nil) }
            let decoded: Bound? = Array(text.utf8).withUnsafeBytes { bytes in
                try? Bound(from: PostgresCell(bytes: bytes, type: .text, format: .text, columnName: cell.columnName, columnIndex: cell.columnIndex))
            }
            return decoded.map { .some($0) }
        }
        guard let lower = bound(parts[0], quoted: quoted[0]), let upper = bound(parts[1], quoted: quoted[1]) else { return nil }
        self.init(lower: lower, upper: upper, lowerInclusive: open == "[", upperInclusive: close == "]")
    }
}
