public import Foundation

/// An exact PostgreSQL `numeric`, kept as its decimal text so no digit is ever lost.
///
/// Use it when a value may not fit `Decimal` (38 significant digits), or to pass a numeric
/// written as text.
///
/// ```swift
/// let price = PostgresNumeric("12345678901234567890.123456789012345678901")!
/// let row = try await connection.query("SELECT \(price) * 2").first
/// print(try row?.decode(PostgresNumeric.self, at: 0) ?? "-")
/// ```
public struct PostgresNumeric: Hashable, Sendable, CustomStringConvertible, PostgresEncodable, PostgresDecodable {
    /// Canonical text: optional `-`, digits, optional `.` and digits; or `NaN`, `Infinity`, `-Infinity`.
    public let description: String

    /// `nil` if `text` is not a plain decimal number (no exponent).
    public init?(_ text: String) {
        guard let parsed = NumericDigits(text: text) else { return nil }
        description = parsed.text
    }

    /// The exact decimal value of `decimal`.
    public init(_ decimal: Decimal) {
        description = NumericDigits(text: decimal.description)?.text ?? "NaN"
    }

    /// The value as `Decimal`, or `nil` if it has more than 38 significant digits or is infinite.
    public var decimal: Decimal? {
        if description == "NaN" { return .nan }
        guard description != "Infinity", description != "-Infinity" else { return nil }
        let significant = description.filter(\.isNumber).drop(while: { $0 == "0" })
        let trimmed = significant.reversed().drop(while: { $0 == "0" })
        guard trimmed.count <= 38 else { return nil }
        return Decimal(string: description, locale: Locale(identifier: "en_US_POSIX"))
    }

    public static var postgresType: PostgresType { .numeric }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        guard let digits = NumericDigits(text: description) else {
            throw PostgresError(kind: .invalidParameter, message: "\"\(description)\" is not a numeric value")
        }
        try digits.encode(into: &buffer)
    }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(PostgresNumeric.self)
        switch cell.format {
        case .binary:
            guard cell.type == .numeric else {
                throw cell.mismatch(PostgresNumeric.self, expected: "numeric")
            }
            guard let text = NumericDigits.decodeBinary(bytes) else {
                throw cell.failure(PostgresNumeric.self, "malformed binary numeric")
            }
            description = text
        case .text:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let parsed = NumericDigits(text: text) else { throw cell.failure(PostgresNumeric.self, "\"\(text)\" is not numeric") }
            description = parsed.text
        }
    }
}

extension Decimal: PostgresEncodable, PostgresDecodable {
    /// Sent as `numeric`, exactly.
    public static var postgresType: PostgresType { .numeric }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        try PostgresNumeric(self).encode(into: &buffer)
    }

    /// Decodes `numeric` exactly; a value with more than 38 significant digits is refused
    /// rather than rounded (decode it as `PostgresNumeric` or `String`).
    public init(from cell: PostgresCell) throws {
        let numeric = try PostgresNumeric(from: cell)
        guard let decimal = numeric.decimal else {
            throw cell.failure(Decimal.self, "\(numeric) does not fit Decimal without loss; decode as PostgresNumeric or String")
        }
        self = decimal
    }
}

/// Text <-> PostgreSQL's binary numeric (base-10000 digits).
struct NumericDigits {
    enum Special { case nan, infinity, negativeInfinity }
    var special: Special?
    var negative = false
    var integerDigits = ""   // no leading zeros, may be empty
    var fractionDigits = ""  // exactly dscale digits

    init?(text raw: String) {
        let text = raw.trimmingCharacters(in: .whitespaces)
        switch text.lowercased() {
        case "nan": special = .nan; return
        case "infinity", "+infinity", "inf": special = .infinity; return
        case "-infinity", "-inf": special = .negativeInfinity; return
        default: break
        }
        var body = Substring(text)
        if body.first == "-" { negative = true; body = body.dropFirst() } else if body.first == "+" { body = body.dropFirst() }
        let parts = body.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard !body.isEmpty, parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }) else { return nil }
        guard !(parts[0].isEmpty && (parts.count == 1 || parts[1].isEmpty)) else { return nil }
        integerDigits = String(parts[0].drop(while: { $0 == "0" }))
        fractionDigits = parts.count == 2 ? String(parts[1]) : ""
        if integerDigits.isEmpty && fractionDigits.allSatisfy({ $0 == "0" }) { negative = false }
    }

    var text: String {
        switch special {
        case .nan: return "NaN"
        case .infinity: return "Infinity"
        case .negativeInfinity: return "-Infinity"
        case nil:
            let integer = integerDigits.isEmpty ? "0" : integerDigits
            return (negative ? "-" : "") + integer + (fractionDigits.isEmpty ? "" : "." + fractionDigits)
        }
    }

    func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        if let special {
            buffer.appendBigEndian(Int16(0))
            buffer.appendBigEndian(Int16(0))
            switch special {
            case .nan: buffer.appendBigEndian(UInt16(0xC000))
            case .infinity: buffer.appendBigEndian(UInt16(0xD000))
            case .negativeInfinity: buffer.appendBigEndian(UInt16(0xF000))
            }
            buffer.appendBigEndian(Int16(0))
            return
        }
        guard fractionDigits.count <= 16383 else {
            throw PostgresError(kind: .invalidParameter, message: "numeric scale \(fractionDigits.count) exceeds PostgreSQL's 16383")
        }
        let intPadded = String(repeating: "0", count: (4 - integerDigits.count % 4) % 4) + integerDigits
        let fracPadded = fractionDigits + String(repeating: "0", count: (4 - fractionDigits.count % 4) % 4)
        var groups: [Int16] = []
        let all = Array((intPadded + fracPadded).utf8)
        var index = 0
        while index < all.count {
            var value: Int16 = 0
            for offset in 0..<4 { value = value * 10 + Int16(all[index + offset] - UInt8(ascii: "0")) }
            groups.append(value)
            index += 4
        }
        var weight = intPadded.count / 4 - 1
        while let first = groups.first, first == 0 { groups.removeFirst(); weight -= 1 }
        while let last = groups.last, last == 0 { groups.removeLast() }
        if groups.isEmpty { weight = 0 }
        guard let weight16 = Int16(exactly: weight), let count16 = Int16(exactly: groups.count) else {
            throw PostgresError(kind: .invalidParameter, message: "numeric value is too large for PostgreSQL")
        }
        buffer.appendBigEndian(count16)
        buffer.appendBigEndian(weight16)
        buffer.appendBigEndian(UInt16(negative ? 0x4000 : 0))
        buffer.appendBigEndian(Int16(fractionDigits.count))
        for group in groups { buffer.appendBigEndian(group) }
    }

    static func decodeBinary(_ bytes: UnsafeRawBufferPointer) -> String? {
        guard let ndigits = bytes.readBigEndian(Int16.self, at: 0), let weight = bytes.readBigEndian(Int16.self, at: 2),
              let sign = bytes.readBigEndian(UInt16.self, at: 4), let dscale = bytes.readBigEndian(Int16.self, at: 6),
              ndigits >= 0, dscale >= 0, bytes.count == 8 + Int(ndigits) * 2 else { return nil }
        switch sign {
        case 0xC000: return "NaN"
        case 0xD000: return "Infinity"
        case 0xF000: return "-Infinity"
        case 0x0000, 0x4000: break
        default: return nil
        }
        var digits: [Int] = []
        digits.reserveCapacity(Int(ndigits))
        for index in 0..<Int(ndigits) {
            guard let digit = bytes.readBigEndian(Int16.self, at: 8 + index * 2), (0..<10000).contains(digit) else { return nil }
            digits.append(Int(digit))
        }
        func group(_ exponent: Int) -> Int {
            let index = Int(weight) - exponent
            return index >= 0 && index < digits.count ? digits[index] : 0
        }
        var text = sign == 0x4000 ? "-" : ""
        // The integer part without leading zeros (the server never sends them, but a weight
        // above the digits it holds must not turn into a run of zeros).
        var integer = ""
        var exponent = Int(weight)
        while exponent >= 0 {
            let value = group(exponent)
            integer += integer.isEmpty ? (value == 0 ? "" : String(value)) : pad(value, 4)
            exponent -= 1
        }
        text += integer.isEmpty ? "0" : integer
        var fraction = ""
        if dscale > 0 {
            var exponent = -1
            var length = 0
            while length < Int(dscale) {
                fraction += pad(group(exponent), 4)
                length += 4
                exponent -= 1
            }
            fraction = String(fraction.prefix(Int(dscale)))
            text += "." + fraction
        }
        // Zero has no sign.
        if sign == 0x4000, integer.isEmpty, fraction.allSatisfy({ $0 == "0" }) { text.removeFirst() }
        return text
    }
}
