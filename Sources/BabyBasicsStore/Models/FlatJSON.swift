import Foundation
import Postgres

/// A fast reader and writer for flat JSON objects (string, number, boolean and null values),
/// the shape of every `events.data` document. Foundation's `JSONDecoder` costs tens of
/// microseconds per document on Linux, which dominated the timeline's latency; this reads one
/// in about one. Its `JSONEncoder` was a twentieth of the store's client time in a backend's
/// mix (two documents per insert); `Writer` writes the same bytes.
enum FlatJSON {
    enum Value: Equatable {
        case string(String)
        case number(Double)
        case bool(Bool)
        case null

        var string: String? { if case .string(let text) = self { text } else { nil } }
        var number: Double? { if case .number(let number) = self { number } else { nil } }
        var bool: Bool? { if case .bool(let flag) = self { flag } else { nil } }
    }

    /// The object's members, or `nil` if `bytes` is not a flat JSON object.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> [String: Value]? {
        var members: [String: Value] = [:]
        let parsed = forEachMember(of: bytes) { key, value in
            members[key] = value
            return true
        }
        return parsed ? members : nil
    }

    /// Calls `body` with each member of a flat JSON object, in order, without collecting them
    /// in a dictionary. False when `bytes` is not a flat JSON object, or `body` returned false.
    static func forEachMember(of bytes: UnsafeRawBufferPointer, _ body: (String, Value) -> Bool) -> Bool {
        var reader = Reader(bytes: bytes)
        return reader.object(body)
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count {
                let byte = bytes[index]
                guard byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 else { return }
                index += 1
            }
        }

        mutating func consume(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func object(_ body: (String, Value) -> Bool) -> Bool {
            guard consume(UInt8(ascii: "{")) else { return false }
            if !consume(UInt8(ascii: "}")) {
                repeat {
                    skipSpace()
                    guard let key = string(), consume(UInt8(ascii: ":")), let value = value(), body(key, value) else { return false }
                } while consume(UInt8(ascii: ","))
                guard consume(UInt8(ascii: "}")) else { return false }
            }
            skipSpace()
            return index == bytes.count
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
                while index < bytes.count, Self.isNumberByte(bytes[index]) { index += 1 }
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                return Double(text).map(Value.number)
            }
        }

        static func isNumberByte(_ byte: UInt8) -> Bool {
            (0x30...0x39).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") || byte == UInt8(ascii: "+")
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return false }
            index += count
            return true
        }

        mutating func string() -> String? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            // Most strings have no escape: taken as they are, in one piece.
            var end = index
            while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") { end += 1 }
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                defer { index = end + 1 }
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[index..<end]), as: UTF8.self)
            }
            var scalars: [UInt8] = Array(bytes[index..<end])
            index = end
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

    /// Writes a flat object as `JSONEncoder` with `.sortedKeys` does, byte for byte: the caller
    /// gives the members in key order, and nil members are left out.
    struct Writer {
        private(set) var bytes: [UInt8]
        private var first = true

        init(into bytes: [UInt8]) { self.bytes = bytes }

        mutating func begin() { bytes.append(UInt8(ascii: "{")) }
        mutating func end() { bytes.append(UInt8(ascii: "}")) }

        private mutating func key(_ name: StaticString) {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        }

        mutating func member(_ name: StaticString, _ value: String?) {
            guard let value else { return }
            key(name)
            bytes.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                switch byte {
                case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
                case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                case UInt8(ascii: "/"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "/")])
                case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
                case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
                case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
                case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
                case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
                case 0..<0x20:
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    bytes.append(contentsOf: Array("\\u00".utf8))
                    bytes.append(contentsOf: [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
                default: bytes.append(byte)
                }
            }
            bytes.append(UInt8(ascii: "\""))
        }

        mutating func member(_ name: StaticString, _ value: Bool?) {
            guard let value else { return }
            key(name)
            bytes.append(contentsOf: Array((value ? "true" : "false").utf8))
        }

        /// Finite numbers only (JSON has no others): `Double.description` without a trailing
        /// `.0`, as `JSONEncoder` writes them (`120`, `120.5`, `1e+21`).
        mutating func member(_ name: StaticString, _ value: Double?) throws(PostgresError) {
            guard let value else { return }
            guard value.isFinite else {
                throw PostgresError(kind: .invalidParameter, message: "cannot encode \(name) as JSON: \(value) is not a finite number")
            }
            key(name)
            var text = value.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            bytes.append(contentsOf: Array(text.utf8))
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
        if let data = EventData(flatJSON: bytes) {
            self = data
            return
        }
        do {
            self = try JSONDecoder().decode(EventData.self, from: Data(bytes))
        } catch {
            throw cell.failure(EventData.self, "the event data does not match: \(error)")
        }
    }

    /// From a flat JSON object, member by member; `nil` when a key has an unexpected type or
    /// value (`JSONDecoder` then says what is wrong). Keys it does not know are skipped.
    init?(flatJSON bytes: UnsafeRawBufferPointer) {
        var data = EventData(.sleep)
        let read = FlatJSON.forEachMember(of: bytes) { key, value in
            switch key {
            case "kind": return Self.take(value, \.string, into: &data.kind)
            case "started_side": return Self.take(value, { $0.string.flatMap(BreastSide.init(rawValue:)) }, into: &data.startedSide)
            case "both_sides": return Self.take(value, \.bool, into: &data.bothSides)
            case "amount_ml": return Self.take(value, \.number, into: &data.amountMl)
            case "amount_prepared_ml": return Self.take(value, \.number, into: &data.amountPreparedMl)
            case "amount_remaining_ml": return Self.take(value, \.number, into: &data.amountRemainingMl)
            case "feeding_started_at": return Self.take(value, \.string, into: &data.feedingStartedAt)
            case "refrigerated": return Self.take(value, \.bool, into: &data.refrigerated)
            case "contents": return Self.take(value, { $0.string.flatMap(DiaperContents.init(rawValue:)) }, into: &data.contents)
            case "category": return Self.take(value, \.string, into: &data.category)
            default: return true
            }
        }
        guard read else { return nil }
        self = data
    }

    /// Sets `field` from `value`: nil for null, else what `read` makes of it; false when it
    /// makes nothing (another type, or a string that is not one of the enum's).
    private static func take<T>(_ value: FlatJSON.Value, _ read: (FlatJSON.Value) -> T?, into field: inout T?) -> Bool {
        if value == .null {
            field = nil
            return true
        }
        guard let taken = read(value) else { return false }
        field = taken
        return true
    }
}

extension EventData: PostgresEncodable {
    static var postgresType: PostgresType { .jsonb }

    /// jsonb's binary form: the format version, then the document as `JSONEncoder` with sorted
    /// keys writes it (the same bytes; `FlatJSONTests` holds them together).
    func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        buffer.append(1) // jsonb binary format version
        var writer = FlatJSON.Writer(into: buffer)
        buffer = [] // the writer owns the bytes meanwhile (no copy), and gives them back
        defer { buffer = writer.bytes }
        writer.begin()
        try writer.member("amount_ml", amountMl)
        try writer.member("amount_prepared_ml", amountPreparedMl)
        try writer.member("amount_remaining_ml", amountRemainingMl)
        writer.member("both_sides", bothSides)
        writer.member("category", category)
        writer.member("contents", contents?.rawValue)
        writer.member("feeding_started_at", feedingStartedAt)
        writer.member("kind", kind)
        writer.member("refrigerated", refrigerated)
        writer.member("started_side", startedSide?.rawValue)
        writer.end()
    }
}
