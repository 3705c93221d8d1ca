import Foundation
import Postgres

/// A fast reader for flat JSON objects (string, number, boolean and null values), the shape of
/// every `events.data` document. Foundation's `JSONDecoder` costs tens of microseconds per
/// document on Linux, which dominated the timeline's latency; this reads one in about one.
enum FlatJSON {
    enum Value: Equatable {
        case string(String)
        case number(Double)
        case bool(Bool)
        case null
    }

    /// The object's members, or `nil` if `bytes` is not a flat JSON object.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> [String: Value]? {
        var reader = Reader(bytes: bytes)
        return reader.object()
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func consume(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func object() -> [String: Value]? {
            guard consume(UInt8(ascii: "{")) else { return nil }
            var members: [String: Value] = [:]
            if consume(UInt8(ascii: "}")) { return finished(members) }
            repeat {
                skipSpace()
                guard let key = string(), consume(UInt8(ascii: ":")), let value = value() else { return nil }
                members[key] = value
            } while consume(UInt8(ascii: ","))
            guard consume(UInt8(ascii: "}")) else { return nil }
            return finished(members)
        }

        mutating func finished(_ members: [String: Value]) -> [String: Value]? {
            skipSpace()
            return index == bytes.count ? members : nil
        }

        mutating func value() -> Value? {
            skipSpace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "\""): return string().map(Value.string)
            case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
            case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
            case UInt8(ascii: "n"): return literal("null") ? .null : nil
            default:
                let start = index
                while index < bytes.count, "-+.eE0123456789".utf8.contains(bytes[index]) { index += 1 }
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                return Double(text).map(Value.number)
            }
        }

        mutating func literal(_ word: String) -> Bool {
            let utf8 = Array(word.utf8)
            guard index + utf8.count <= bytes.count, Array(bytes[index..<(index + utf8.count)]) == utf8 else { return false }
            index += utf8.count
            return true
        }

        mutating func string() -> String? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            var scalars: [UInt8] = []
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(decoding: scalars, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escaped = bytes[index]
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "n"): scalars.append(0x0A)
                    case UInt8(ascii: "t"): scalars.append(0x09)
                    case UInt8(ascii: "r"): scalars.append(0x0D)
                    case UInt8(ascii: "b"): scalars.append(0x08)
                    case UInt8(ascii: "f"): scalars.append(0x0C)
                    case UInt8(ascii: "u"):
                        guard var code = hex4() else { return nil }
                        if (0xD800...0xDBFF).contains(code), literal("\\u"), let low = hex4(), (0xDC00...0xDFFF).contains(low) {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(code) else { return nil }
                        scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                    default: scalars.append(escaped)
                    }
                default:
                    scalars.append(byte)
                }
            }
            return nil
        }

        mutating func hex4() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[index..<(index + 4)]), as: UTF8.self)
            index += 4
            return UInt32(text, radix: 16)
        }
    }
}

extension EventData: PostgresDecodable {
    /// Reads the jsonb document with `FlatJSON`; anything else goes through `JSONDecoder`.
    init(from cell: PostgresCell) throws {
        let raw = try cell.nonNull(EventData.self)
        var bytes = raw
        if cell.format == .binary && cell.type == .jsonb {
            guard raw.first == 1 else { throw cell.failure(EventData.self, "unknown jsonb version") }
            bytes = UnsafeRawBufferPointer(rebasing: raw[1...])
        }
        if let members = FlatJSON.parse(bytes), let data = EventData(members: members) {
            self = data
            return
        }
        do {
            self = try JSONDecoder().decode(EventData.self, from: Data(bytes))
        } catch {
            throw cell.failure(EventData.self, "the event data does not match: \(error)")
        }
    }

    /// From flat members; `nil` when a key has an unexpected type.
    init?(members: [String: FlatJSON.Value]) {
        func string(_ key: String) -> String?? {
            switch members[key] {
            case nil, .null?: return .some(nil)
            case .string(let value)?: return .some(value)
            default: return nil
            }
        }
        func number(_ key: String) -> Double?? {
            switch members[key] {
            case nil, .null?: return .some(nil)
            case .number(let value)?: return .some(value)
            default: return nil
            }
        }
        guard let kind = string("kind"), let side = string("started_side"), let amount = number("amount_ml"),
              let prepared = number("amount_prepared_ml"), let remaining = number("amount_remaining_ml"),
              let started = string("feeding_started_at"), let contents = string("contents"), let category = string("category") else { return nil }
        var both: Bool?
        switch members["both_sides"] {
        case nil, .null?: both = nil
        case .bool(let value)?: both = value
        default: return nil
        }
        var cold: Bool?
        switch members["refrigerated"] {
        case nil, .null?: cold = nil
        case .bool(let value)?: cold = value
        default: return nil
        }
        self.init(.sleep)
        self.kind = kind
        startedSide = side.flatMap(BreastSide.init(rawValue:))
        bothSides = both
        amountMl = amount
        amountPreparedMl = prepared
        amountRemainingMl = remaining
        feedingStartedAt = started
        refrigerated = cold
        self.contents = contents.flatMap(DiaperContents.init(rawValue:))
        self.category = category
        if side != nil && startedSide == nil || contents != nil && self.contents == nil { return nil }
    }
}
