import Foundation
import Postgres

/// A jsonb value from prepared JSON text (no encoder per row).
struct JSONB: PostgresEncodable {
    let bytes: [UInt8]
    init(_ text: String) { bytes = [1] + Array(text.utf8) }
    static var postgresType: PostgresType { .jsonb }
    func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.append(contentsOf: bytes) }
}

extension JSONB {
    static let wet = JSONB(#"{"contents":"wet"}"#)
}
