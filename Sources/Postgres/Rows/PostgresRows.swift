import Foundation

/// A column of a result: its name, type and wire format.
///
/// ```swift
/// let names = rows.columns.map(\.name)
/// ```
public struct PostgresColumn: Sendable, Hashable {
    public let name: String
    public let type: PostgresType
    public let format: PostgresFormat
}

/// The rows a statement returned, with its columns and command tag.
///
/// A random-access collection of `PostgresRow`. The memory is libpq's result, freed when the
/// last row referencing it goes away.
///
/// ```swift
/// let rows = try await connection.query("SELECT id, name FROM children WHERE primary_caregiver_id = \(userID)")
/// for row in rows {
///     let (id, name) = try row.decode((UUID, String).self)
/// }
/// let children = try rows.decode(as: Child.self)
/// ```
public struct PostgresRows: Sendable, RandomAccessCollection {
    let storage: ResultStorage

    init(storage: ResultStorage) { self.storage = storage }

    public var startIndex: Int { 0 }
    public var endIndex: Int { storage.rowCount }
    /// The row at `position`. A position outside the result gives a row whose every decode
    /// throws (naming the position), never a crash.
    public subscript(position: Int) -> PostgresRow { PostgresRow(storage: storage, index: position) }

    /// The result's columns, in order.
    public var columns: [PostgresColumn] { storage.columns }
    /// The command tag, such as `INSERT 0 1` or `SELECT 3`.
    public var commandTag: String { storage.commandTag }
    /// Rows inserted, updated, deleted, selected, copied: the number in the command tag.
    public var affectedRows: Int { storage.affectedRows }

    /// Every row as a `Decodable` struct (see `PostgresRow.decode(as:)`).
    public func decode<T: Decodable>(as type: T.Type) throws -> [T] {
        try map { try $0.decode(as: type) }
    }

    /// The first column of every row.
    public func decodeColumn<T: PostgresDecodable>(_ type: T.Type) throws -> [T] {
        try map { try $0.decode(type, at: 0) }
    }
}

/// One row of a result.
///
/// Decode by position, by name, into a tuple, or into a `Decodable` struct whose camelCase
/// properties match snake_case columns.
///
/// ```swift
/// let id = try row.decode(UUID.self, at: 0)
/// let name: String = try row["display_name"]
/// let (count, last) = try row.decode((Int, Date?).self)
/// let user = try row.decode(as: User.self)
/// ```
public struct PostgresRow: Sendable {
    @usableFromInline let storage: ResultStorage
    /// The row's position in its result.
    public let index: Int

    /// The result's columns.
    public var columns: [PostgresColumn] { storage.columns }

    /// Calls `body` with the raw cell at `column`. The cell's bytes belong to the result and
    /// are valid only inside `body`; copy what you need to keep.
    ///
    /// ```swift
    /// let isJSON = try row.withCell(at: 0) { $0.type == .jsonb }
    /// ```
    public func withCell<R>(at column: Int, _ body: (PostgresCell) throws -> R) throws -> R {
        try checkPosition(column: column, swiftType: R.self)
        return try withExtendedLifetime(storage) { try body(storage.cell(row: index, column: column)) }
    }

    /// Whether the value at `column` is NULL (true for a column or row that does not exist).
    public func isNull(at column: Int) -> Bool {
        guard column >= 0, column < storage.columns.count, index >= 0, index < storage.rowCount else { return true }
        return storage.isNull(row: index, column: column)
    }

    /// Throws unless this row and `column` exist.
    @usableFromInline
    func checkPosition<T>(column: Int, swiftType: T.Type) throws(PostgresDecodingError) {
        guard index >= 0, index < storage.rowCount else {
            throw PostgresDecodingError(
                column: "#\(column)", columnIndex: column, postgresType: .unspecified, swiftType: "\(T.self)",
                reason: "row \(index) does not exist; the result has \(storage.rowCount) row(s)")
        }
        guard column >= 0, column < storage.columns.count else {
            throw PostgresDecodingError(
                column: "#\(column)", columnIndex: column, postgresType: .unspecified, swiftType: "\(T.self)",
                reason: "the result has \(storage.columns.count) column(s)")
        }
    }

    /// The zero-based index of the column named `name`.
    public func columnIndex(_ name: String) -> Int? { storage.columnIndex(named: name) }

    /// The value at position `column`.
    ///
    /// Inlinable, like the tuple form below: the caller's module specializes it for `T`, so
    /// decoding a row calls each type's decoder directly (no generic dispatch per cell).
    @inlinable
    public func decode<T: PostgresDecodable>(_ type: T.Type, at column: Int) throws -> T {
        try checkPosition(column: column, swiftType: T.self)
        return try T(from: storage.cell(row: index, column: column))
    }

    /// The value of the column named `name`.
    public func decode<T: PostgresDecodable>(_ type: T.Type, column name: String) throws -> T {
        guard let column = storage.columnIndex(named: name) else {
            throw PostgresDecodingError(
                column: name, columnIndex: -1, postgresType: .unspecified, swiftType: "\(T.self)",
                reason: "there is no such column; the result has: \(storage.columns.map(\.name).joined(separator: ", "))")
        }
        try checkPosition(column: column, swiftType: T.self)
        return try T(from: storage.cell(row: index, column: column))
    }

    /// `let name: String = try row["name"]`
    public subscript<T: PostgresDecodable>(_ name: String) -> T {
        get throws { try decode(T.self, column: name) }
    }

    /// `let id: UUID = try row[0]`
    public subscript<T: PostgresDecodable>(_ column: Int) -> T {
        get throws { try decode(T.self, at: column) }
    }

    /// The first columns, in order, as a tuple: `try row.decode((UUID, String, Int?).self)`.
    @inlinable
    public func decode<each T: PostgresDecodable>(_ types: (repeat each T).Type) throws -> (repeat each T) {
        var column = 0
        return (repeat try decodeNext((each T).self, &column))
    }

    @inlinable
    func decodeNext<T: PostgresDecodable>(_ type: T.Type, _ column: inout Int) throws -> T {
        defer { column += 1 }
        return try decode(T.self, at: column)
    }

    /// A `Decodable` struct, matching camelCase properties to snake_case columns
    /// (`birthDate` ← `birth_date`). A missing column or a NULL for a non-optional property
    /// throws, naming the column.
    public func decode<T: Decodable>(as type: T.Type) throws -> T {
        try T(from: RowDecoder(row: self))
    }
}
