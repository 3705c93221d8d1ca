import Foundation
import Postgres

/// A jsonb value from prepared JSON text (no encoder per row).
struct JSONB: PostgresEncodable {
    let bytes: [UInt8]
    init(_ text: String) { bytes = [1] + Array(text.utf8) }
    static var postgresType: PostgresType { .jsonb }
    func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.append(contentsOf: bytes) }
}

/// An `xid8` value (the sync cursor's first column).
struct XID8: PostgresEncodable {
    let value: UInt64
    static var postgresType: PostgresType { .xid8 }
    func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndianUInt64(value) }
}

extension Array where Element == UInt8 {
    mutating func appendBigEndianUInt64(_ value: UInt64) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }
}

extension JSONB {
    static let wet = JSONB(#"{"contents":"wet"}"#)
}
