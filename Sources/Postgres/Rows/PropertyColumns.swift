import Synchronization

/// Where the properties of one `Decodable` row type are among a result's columns: coding
/// key → column position (-1: the result has no such column).
///
/// Built for a layout of columns and kept between results, so that decoding a row looks each
/// property up once, without a lock. Before it, every result worked its keys out again: for
/// each property of its first row, up to five hashed lookups (the exact name, the snake_case
/// conversion, the snake_case name) and a global lock; a one-row result (the dashboard's 29
/// properties) paid all of it on every call.
///
/// Immutable: a key not seen yet is worked out the slow way once and published in a new map
/// (`adding`), which later results of the same layout then start from.
final class PropertyColumns: Sendable {
    /// The column names the map was built for, in order.
    let columnNames: [String]
    /// Coding key (`stringValue`) → column, or -1.
    let columns: [String: Int]

    init(columnNames: [String], columns: [String: Int] = [:]) {
        self.columnNames = columnNames
        self.columns = columns
    }

    /// This map, with `key` at `column` (-1: none).
    func adding(_ key: String, at column: Int) -> PropertyColumns {
        var columns = self.columns
        columns[key] = column
        return PropertyColumns(columnNames: columnNames, columns: columns)
    }

    /// Whether the map was built for these columns.
    func fits(_ columns: [PostgresColumn]) -> Bool {
        guard columnNames.count == columns.count else { return false }
        for (name, column) in zip(columnNames, columns) where name != column.name { return false }
        return true
    }

    /// The map last used for each row type (the coding keys' type), whatever its layout; a
    /// result whose columns differ starts a new one. At most `remembered` types are kept.
    static func known(for keys: ObjectIdentifier) -> PropertyColumns? { latest.withLock { $0[keys] } }

    static func remember(_ map: PropertyColumns, for keys: ObjectIdentifier) {
        latest.withLock { if $0.count < remembered || $0[keys] != nil { $0[keys] = map } }
    }

    static let remembered = 4096
    private static let latest = Mutex<[ObjectIdentifier: PropertyColumns]>([:])
}
