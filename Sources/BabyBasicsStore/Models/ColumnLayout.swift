import Postgres

/// Rows the store reads by position (a sync page's 500 events, the dashboard's 29 columns)
/// check once per result that the statement's columns are the ones they expect, in order; a
/// statement changed on one side only is a decoding error naming the first column out of
/// place, never a value read from the wrong column.
enum ColumnLayout {
    /// Throws unless `columns` hold `names` in order from position `first`.
    static func check(_ columns: [PostgresColumn], from first: Int = 0, are names: [String], swiftType: String, what: String) throws {
        for (offset, name) in names.enumerated() where first + offset >= columns.count || columns[first + offset].name != name {
            throw PostgresDecodingError(column: name, columnIndex: first + offset, postgresType: .unspecified, swiftType: swiftType,
                                        reason: "expected \(what) in order from column \(first); the result has: \(columns.map(\.name).joined(separator: ", "))")
        }
    }
}
