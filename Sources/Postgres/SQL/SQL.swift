import Foundation
import Synchronization

/// A SQL statement or fragment whose interpolated values are sent as parameters.
///
/// Every `\(value)` becomes `$1`, `$2`, … and its value travels separately, in binary: no value
/// is ever spliced into the SQL text, so quotes, backslashes or `'); DROP TABLE …` in a value
/// are stored verbatim. Table and column names interpolate only through
/// `\(identifier: name)`, quoted by libpq's `PQescapeIdentifier`. Fragments compose: a `SQL`
/// interpolated into another keeps its values, and the parameters are renumbered.
///
/// ```swift
/// let email = "o'brien@example.com"
/// var query: SQL = "SELECT id, display_name FROM users WHERE lower(email) = lower(\(email))"
/// let active: SQL = "AND deleted_at IS NULL"
/// let events: SQL = "SELECT * FROM \(identifier: "events") WHERE child_id = \(childID) \(active)"
/// ```
///
/// Plain SQL text that must not be parameterized (a migration file) goes through the
/// deliberately named `SQL(unsafeRawSQL:)` or `PostgresConnection.executeUnsafeRawSQL(_:)`.
public struct SQL: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    enum Segment: Sendable {
        /// Text written in source: kept as the literal itself, not copied into a `String` each
        /// time the statement is built, and known by its address (the pool's session check of
        /// a literal is remembered, see `SessionSettings.needsOwnSession(_: SQL)`).
        case literal(StaticString)
        case text(String)
        case value(any PostgresEncodable)
        case null(PostgresType)
        case identifier([String])
    }

    var segments: [Segment]

    /// A literal written in source. String literals are `StaticString`, so a runtime `String`
    /// cannot become SQL text by accident.
    public init(stringLiteral value: StaticString) {
        segments = [.literal(value)]
    }

    public init(stringInterpolation: StringInterpolation) {
        segments = stringInterpolation.segments
    }

    /// SQL text taken as-is, with no parameters. Only for trusted text such as migration files:
    /// never build it from user input.
    public init(unsafeRawSQL text: String) {
        segments = [.text(text)]
    }

    /// Joins fragments: `SQL.joined([a, b], separator: ", ")`.
    public static func joined(_ parts: [SQL], separator: SQL = ", ") -> SQL {
        var result = SQL(segments: [])
        for (index, part) in parts.enumerated() {
            if index > 0 { result.segments += separator.segments }
            result.segments += part.segments
        }
        return result
    }

    init(segments: [Segment]) { self.segments = segments }

    /// Appends another fragment (with a space between them).
    public mutating func append(_ other: SQL) {
        if !segments.isEmpty { segments.append(.text(" ")) }
        segments += other.segments
    }

    /// One bound value of a statement: what `$n` stands for.
    public struct Parameter: Sendable {
        /// The type the parameter is declared as.
        public let type: PostgresType
        /// The value; `nil` for SQL NULL.
        public let value: (any PostgresEncodable)?
    }

    /// The values bound to `$1…$n` of `description`, in order. With `description`, the
    /// statement exactly as the server receives it: to `EXPLAIN` it in psql, or to hand it to
    /// another client (the benchmarks give the store's statements to PostgresNIO and pgbench).
    ///
    /// ```swift
    /// let sql: SQL = "SELECT * FROM events WHERE child_id = \(childID) AND start_time >= \(since)"
    /// print(sql.description)                  // SELECT * FROM events WHERE child_id = $1 AND start_time >= $2
    /// print(sql.parameters.map(\.type))       // [uuid, timestamptz]
    /// ```
    public var parameters: [Parameter] {
        segments.compactMap { segment in
            switch segment {
            case .value(let value): Parameter(type: type(of: value).postgresType, value: value)
            case .null(let type): Parameter(type: type, value: nil)
            case .literal, .text, .identifier: nil
            }
        }
    }

    /// The statement text with `$n` placeholders, for logs. Values are never shown.
    public var description: String {
        var text = ""
        var number = 0
        for segment in segments {
            switch segment {
            case .literal(let sql): sql.withUTF8Buffer { text += String(decoding: $0, as: UTF8.self) }
            case .text(let sql): text += sql
            case .value, .null:
                number += 1
                text += "$\(number)"
            case .identifier(let parts): text += parts.map { "\"" + $0.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }.joined(separator: ".")
            }
        }
        return text
    }

    /// The number of parameters.
    public var parameterCount: Int {
        segments.reduce(0) { count, segment in
            switch segment {
            case .value, .null: count + 1
            default: count
            }
        }
    }

    /// Builds `SQL` from a string literal with interpolations.
    ///
    /// ```swift
    /// let query: SQL = "SELECT * FROM events WHERE id = \(id)"   // built by this type
    /// ```
    public struct StringInterpolation: StringInterpolationProtocol, Sendable {
        var segments: [Segment] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            segments.reserveCapacity(interpolationCount * 2 + 1)
        }

        public mutating func appendLiteral(_ literal: StaticString) {
            // (utf8CodeUnitCount may only be asked of a literal with a pointer representation.)
            if !literal.hasPointerRepresentation || literal.utf8CodeUnitCount > 0 { segments.append(.literal(literal)) }
        }

        /// A value, sent as a parameter.
        public mutating func appendInterpolation<T: PostgresEncodable>(_ value: T) {
            segments.append(.value(value))
        }

        /// An optional value: `nil` is sent as a typed NULL parameter.
        public mutating func appendInterpolation<T: PostgresEncodable>(_ value: T?) {
            if let value { segments.append(.value(value)) } else { segments.append(.null(T.postgresType)) }
        }

        /// Any `Encodable` value as a `jsonb` parameter.
        public mutating func appendInterpolation<T: Encodable & Sendable>(json value: T) {
            segments.append(.value(AnyJSON(value)))
        }

        /// A fragment; its parameters are renumbered into this statement.
        public mutating func appendInterpolation(_ fragment: SQL) {
            segments += fragment.segments
        }

        /// A table, column or schema name, quoted by `PQescapeIdentifier`. Several parts make a
        /// qualified name: `\(identifier: "bbmigrate", "schema_migrations")`.
        public mutating func appendInterpolation(identifier parts: String...) {
            segments.append(.identifier(parts))
        }
    }
}

/// An `Encodable` sent as jsonb.
struct AnyJSON: PostgresEncodable {
    let value: any Encodable & Sendable
    init<T: Encodable & Sendable>(_ value: T) { self.value = value }
    static var postgresType: PostgresType { .jsonb }
    func encode(into buffer: inout [UInt8]) throws(PostgresError) { try JSONCoding.appendJSONB(value, into: &buffer) }
}

/// A statement ready for libpq: text with `$n`, parameter types and binary values.
struct RenderedSQL {
    var text: String
    var types: [UInt32]
    /// All parameter bytes back to back, plus one trailing byte so the base pointer is never nil.
    var buffer: [UInt8]
    var offsets: [Int]
    /// -1 for NULL.
    var lengths: [Int32]

    /// Calls `body` with libpq's parameter arrays: values, lengths and formats (all binary).
    func withParameters<R>(_ body: (Int32, [UnsafePointer<CChar>?], UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R) -> R? {
        let count = types.count
        return buffer.withUnsafeBytes { bytes -> R? in
            guard let base = bytes.baseAddress else { return nil }
            var values = [UnsafePointer<CChar>?](repeating: nil, count: count)
            let formats = [Int32](repeating: 1, count: count)
            for index in 0..<count where lengths[index] >= 0 {
                values[index] = (base + offsets[index]).assumingMemoryBound(to: CChar.self)
            }
            return lengths.withUnsafeBufferPointer { lengths in
                formats.withUnsafeBufferPointer { formats in
                    body(Int32(count), values, lengths.baseAddress, formats.baseAddress)
                }
            }
        }
    }

    /// The statement cache's key: the text, plus the parameter types (the same text with other
    /// types is another prepared statement). Set once by `render`.
    var cacheKey = StatementKey(text: "", types: [])
}

/// What the statement cache knows a statement by: its text and parameter types. The text's
/// hash is computed once per text (render remembers it with the text of a statement built
/// from literals), so finding the store's 6 kB dashboard in the cache hashes a few words, and
/// comparing two keys that share the remembered text is a pointer comparison.
struct StatementKey: Hashable, Sendable {
    let text: String
    let types: [UInt32]
    private let textHash: Int

    init(text: String, types: [UInt32], textHash: Int? = nil) {
        self.text = text
        self.types = types
        self.textHash = textHash ?? text.hashValue
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(textHash)
        hasher.combine(types)
    }

    static func == (a: StatementKey, b: StatementKey) -> Bool {
        a.textHash == b.textHash && a.types == b.types && a.text == b.text
    }
}

extension SQL {
    /// Numbers the parameters, encodes the values and quotes identifiers.
    ///
    /// The text of a statement made of source literals and values only depends on which
    /// literals and where the values are: it is built once per such shape and remembered (at
    /// most `rememberedShapes`), with its hash; later renders only encode the values.
    ///
    /// `looked`: the statement's shape as the caller already looked it up (the pool does,
    /// for its session check), so that it is not worked out and looked up twice.
    func render(quoteIdentifier: (String) throws -> String, looked: ShapeLookup? = nil) throws -> RenderedSQL {
        var rendered = RenderedSQL(text: "", types: [], buffer: [], offsets: [], lengths: [])
        rendered.buffer.reserveCapacity(64)
        let lookup = looked ?? shapeLookup
        let shape = lookup?.shape
        var textHash: Int?
        if let known = lookup?.facts?.text {
            rendered.text = known.text
            textHash = known.hash
        } else {
            for segment in segments {
                switch segment {
                case .literal(let sql): sql.withUTF8Buffer { rendered.text += String(decoding: $0, as: UTF8.self) }
                case .text(let sql): rendered.text += sql
                case .identifier(let parts): rendered.text += try parts.map(quoteIdentifier).joined(separator: ".")
                case .value, .null:
                    rendered.text += "$"
                    rendered.text += String(rendered.offsets.count + 1)
                    rendered.offsets.append(0) // counts placeholders here; the values fill it below
                }
            }
            rendered.offsets.removeAll(keepingCapacity: true)
            if let shape {
                let hash = rendered.text.hashValue
                textHash = hash
                Self.remember(shape) { $0.text = (rendered.text, hash) }
            }
        }
        for index in segments.indices {
            switch segments[index] {
            case .null(let type):
                rendered.types.append(type.rawValue)
                rendered.offsets.append(rendered.buffer.count)
                rendered.lengths.append(-1)
            case .value(let value):
                let start = rendered.buffer.count
                do {
                    try value.encode(into: &rendered.buffer)
                } catch {
                    var described = error
                    described.message = "parameter $\(rendered.types.count + 1) (\(type(of: value))): " + error.message
                    throw described
                }
                guard let length = Int32(exactly: rendered.buffer.count - start) else {
                    throw PostgresError(kind: .invalidParameter, message: "parameter $\(rendered.types.count + 1) is larger than 2 GiB")
                }
                rendered.types.append(type(of: value).postgresType.rawValue)
                rendered.offsets.append(start)
                rendered.lengths.append(length)
            case .literal, .text, .identifier:
                continue
            }
        }
        guard rendered.types.count <= 65535 else {
            throw PostgresError(kind: .invalidParameter, message: "a statement can have at most 65535 parameters; this one has \(rendered.types.count)")
        }
        rendered.buffer.append(0)
        rendered.cacheKey = StatementKey(text: rendered.text, types: rendered.types, textHash: textHash)
        return rendered
    }

    /// Which literals, and where the parameters are (0); nil when the text also depends on
    /// something else (runtime text, identifiers, a one-character literal without an address).
    var textShape: TextShape? {
        var parts: [UInt] = []
        parts.reserveCapacity(segments.count)
        var hash: UInt = 0xcbf2_9ce4_8422_2325
        for index in segments.indices {
            let part: UInt
            switch segments[index] {
            case .literal(let sql):
                guard sql.hasPointerRepresentation else { return nil }
                part = UInt(bitPattern: sql.utf8Start)
            case .value, .null: part = 0
            case .text, .identifier: return nil
            }
            parts.append(part)
            hash = (hash ^ part) &* 0x0000_0100_0000_01b3
        }
        return TextShape(parts: parts, hash: hash)
    }

    /// A statement's literals and parameter positions. Its hash is worked out while the parts
    /// are collected (one multiply per part), so finding a shape among the remembered ones
    /// hashes one word rather than every part again.
    struct TextShape: Hashable, Sendable {
        let parts: [UInt]
        let hash: UInt

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (a: TextShape, b: TextShape) -> Bool { a.hash == b.hash && a.parts == b.parts }
    }

    /// What is known of one shape, each part filled the first time it is needed: its text with
    /// the text's hash (`render`), and whether it may change the session
    /// (`SessionSettings.needsOwnSession(_: SQL)`, asked by the pool before every statement).
    struct ShapeFacts: Sendable {
        var text: (text: String, hash: Int)?
        var ownSession: Bool?
    }

    static func facts(of shape: TextShape) -> ShapeFacts? { shapes.withLock { $0[shape] } }

    /// A statement's shape and what was known of it when it was looked up.
    struct ShapeLookup: Sendable {
        let shape: TextShape
        let facts: ShapeFacts?
    }

    /// This statement's shape, looked up among the remembered ones; nil when it has none.
    var shapeLookup: ShapeLookup? {
        textShape.map { ShapeLookup(shape: $0, facts: Self.facts(of: $0)) }
    }

    /// Records a fact about `shape` (at most `rememberedShapes` shapes are kept).
    static func remember(_ shape: TextShape, _ update: (inout ShapeFacts) -> Void) {
        shapes.withLock { shapes in
            if let index = shapes.index(forKey: shape) {
                update(&shapes.values[index])
            } else if shapes.count < rememberedShapes {
                var facts = ShapeFacts()
                update(&facts)
                shapes[shape] = facts
            }
        }
    }

    /// A program has finitely many statement shapes; the bound only guards against one that
    /// builds statements from an unbounded number of literal combinations.
    static let rememberedShapes = 4096
    private static let shapes = Mutex<[TextShape: ShapeFacts]>([:])
}
