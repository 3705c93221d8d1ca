/// A PostgreSQL type, identified by its OID in `pg_type`.
///
/// Built-in types have fixed OIDs; user types (enums, domains, composites) get theirs at
/// `CREATE TYPE` time and decode from text.
///
/// ```swift
/// let column = rows.columns[0]
/// if column.type == .timestamptz { print("a point in time") }
/// ```
public struct PostgresType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The OID, as `pg_type.oid`.
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public init(_ oid: UInt32) { self.rawValue = oid }

    public static let unspecified = PostgresType(0)
    public static let bool = PostgresType(16)
    public static let bytea = PostgresType(17)
    public static let char = PostgresType(18)
    public static let name = PostgresType(19)
    public static let int8 = PostgresType(20)
    public static let int2 = PostgresType(21)
    public static let int4 = PostgresType(23)
    public static let text = PostgresType(25)
    public static let oid = PostgresType(26)
    public static let json = PostgresType(114)
    public static let xml = PostgresType(142)
    public static let float4 = PostgresType(700)
    public static let float8 = PostgresType(701)
    public static let unknown = PostgresType(705)
    public static let bpchar = PostgresType(1042)
    public static let varchar = PostgresType(1043)
    public static let date = PostgresType(1082)
    public static let time = PostgresType(1083)
    public static let timestamp = PostgresType(1114)
    public static let timestamptz = PostgresType(1184)
    public static let interval = PostgresType(1186)
    public static let numeric = PostgresType(1700)
    public static let uuid = PostgresType(2950)
    public static let jsonb = PostgresType(3802)
    public static let xid8 = PostgresType(5069)

    public static let boolArray = PostgresType(1000)
    public static let byteaArray = PostgresType(1001)
    public static let int2Array = PostgresType(1005)
    public static let int4Array = PostgresType(1007)
    public static let textArray = PostgresType(1009)
    public static let varcharArray = PostgresType(1015)
    public static let int8Array = PostgresType(1016)
    public static let float4Array = PostgresType(1021)
    public static let float8Array = PostgresType(1022)
    public static let uuidArray = PostgresType(2951)
    public static let jsonArray = PostgresType(199)
    public static let timestampArray = PostgresType(1115)
    public static let dateArray = PostgresType(1182)
    public static let timeArray = PostgresType(1183)
    public static let timestamptzArray = PostgresType(1185)
    public static let intervalArray = PostgresType(1187)
    public static let numericArray = PostgresType(1231)
    public static let jsonbArray = PostgresType(3807)
    public static let int4range = PostgresType(3904)
    public static let numrange = PostgresType(3906)
    public static let tstzrange = PostgresType(3910)
    public static let daterange = PostgresType(3912)
    public static let int8range = PostgresType(3926)

    /// The SQL name of a built-in type, or `oid 12345` for others.
    public var description: String {
        switch self {
        case .bool: "boolean"
        case .bytea: "bytea"
        case .char: "\"char\""
        case .name: "name"
        case .int8: "bigint"
        case .int2: "smallint"
        case .int4: "integer"
        case .text: "text"
        case .oid: "oid"
        case .json: "json"
        case .xml: "xml"
        case .float4: "real"
        case .float8: "double precision"
        case .unknown: "unknown"
        case .bpchar: "character"
        case .varchar: "character varying"
        case .date: "date"
        case .time: "time"
        case .timestamp: "timestamp"
        case .timestamptz: "timestamptz"
        case .interval: "interval"
        case .numeric: "numeric"
        case .uuid: "uuid"
        case .jsonb: "jsonb"
        case .xid8: "xid8"
        case .boolArray: "boolean[]"
        case .byteaArray: "bytea[]"
        case .int2Array: "smallint[]"
        case .int4Array: "integer[]"
        case .textArray: "text[]"
        case .varcharArray: "character varying[]"
        case .int8Array: "bigint[]"
        case .float4Array: "real[]"
        case .float8Array: "double precision[]"
        case .uuidArray: "uuid[]"
        case .jsonArray: "json[]"
        case .timestampArray: "timestamp[]"
        case .dateArray: "date[]"
        case .timeArray: "time[]"
        case .timestamptzArray: "timestamptz[]"
        case .intervalArray: "interval[]"
        case .numericArray: "numeric[]"
        case .jsonbArray: "jsonb[]"
        case .int4range: "int4range"
        case .numrange: "numrange"
        case .tstzrange: "tstzrange"
        case .daterange: "daterange"
        case .int8range: "int8range"
        default: "oid \(rawValue)"
        }
    }

    /// Types whose binary format this library decodes. A result holding any other type is
    /// fetched in text format, so that unknown types (enums, `inet`, …) still decode as `String`.
    static let binaryDecodable: Set<PostgresType> = [
        .bool, .bytea, .char, .name, .int8, .int2, .int4, .text, .oid, .json, .xml, .float4, .float8,
        .unknown, .bpchar, .varchar, .date, .time, .timestamp, .timestamptz, .interval, .numeric,
        .uuid, .jsonb, .xid8, .boolArray, .byteaArray, .int2Array, .int4Array, .textArray,
        .varcharArray, .int8Array, .float4Array, .float8Array, .uuidArray, .jsonArray, .timestampArray, .dateArray,
        .timeArray, .timestamptzArray, .intervalArray, .numericArray, .jsonbArray, .int4range, .tstzrange,
        .daterange, .int8range,
    ]

    /// Whether a value of this type, in either format, is plain UTF-8 text. A switch, not a
    /// `Set`: it is asked once per decoded text cell, and hashing was a tenth of decoding time.
    var isTextual: Bool {
        switch rawValue {
        // text, varchar, bpchar, name, unknown, json, xml, "char" (the static lets above)
        case 25, 1043, 1042, 19, 705, 114, 142, 18: true
        default: false
        }
    }
}

/// How a value travels on the wire: PostgreSQL's text or binary representation.
///
/// ```swift
/// let binary = rows.columns.allSatisfy { $0.format == .binary }
/// ```
public enum PostgresFormat: Int32, Sendable {
    case text = 0
    case binary = 1
}
