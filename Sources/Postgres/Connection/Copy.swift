import CLibPQ
import Foundation

/// Builds the rows of a binary `COPY … FROM STDIN`, sending them in 256 KiB chunks.
///
/// Values use the same exact binary encoders as query parameters, so each Swift type must
/// match its column's type (an `Int` for a `bigint`, an `Int32` for an `integer`).
///
/// ```swift
/// try await connection.copyIn(table: "events", columns: ["id", "child_id", "start_time"]) { writer in
///     for event in events { try writer.append([event.id, event.childID, event.start]) }
/// }
/// ```
public struct PostgresCopyWriter: ~Copyable {
    let connection: OpaquePointer
    var buffer: [UInt8] = []
    var fieldCount: Int
    /// Rows appended so far.
    public private(set) var rows = 0
    var failed: PostgresError?

    /// The most bytes handed to libpq at once (its limit is 2 GiB); a row may span chunks.
    let chunkLimit: Int

    init(connection: OpaquePointer, fieldCount: Int, chunkLimit: Int) {
        self.connection = connection
        self.fieldCount = fieldCount
        self.chunkLimit = chunkLimit
        buffer.reserveCapacity(1 << 18)
        buffer.append(contentsOf: Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00]) // signature
        buffer.appendBigEndian(Int32(0)) // flags
        buffer.appendBigEndian(Int32(0)) // header extension length
    }

    /// Appends one row; `nil` is NULL. Throws (and the COPY is aborted) if a value cannot be
    /// sent, naming the row and column.
    public mutating func append(_ values: [(any PostgresEncodable)?]) throws {
        guard values.count == fieldCount else {
            throw PostgresError(kind: .misuse, message: "COPY row \(rows + 1) has \(values.count) values for \(fieldCount) columns")
        }
        guard let fields = Int16(exactly: fieldCount) else {
            throw PostgresError(kind: .invalidParameter, message: "COPY supports at most 32767 columns")
        }
        buffer.appendBigEndian(fields)
        for (column, value) in values.enumerated() {
            guard let value else {
                buffer.appendBigEndian(Int32(-1))
                continue
            }
            let lengthOffset = buffer.count
            buffer.appendBigEndian(Int32(0))
            do {
                try value.encode(into: &buffer)
            } catch {
                var described = error
                described.message = "COPY row \(rows + 1), column \(column + 1): " + error.message
                throw described
            }
            guard let length = Int32(exactly: buffer.count - lengthOffset - 4) else {
                throw PostgresError(kind: .invalidParameter, message: "COPY row \(rows + 1), column \(column + 1): value larger than 2 GiB")
            }
            Swift.withUnsafeBytes(of: length.bigEndian) { bytes in
                for index in 0..<4 { buffer[lengthOffset + index] = bytes[index] }
            }
            // Keep every chunk sent to libpq under its 2 GiB length limit; the row's bytes so far
            // are complete (its length is written), so it may continue in the next chunk.
            if buffer.count > chunkLimit { try flush() }
        }
        rows += 1
        if buffer.count >= min(1 << 18, chunkLimit) { try flush() }
    }

    /// Sends what is buffered.
    mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        guard let count = Int32(exactly: buffer.count) else {
            throw PostgresError(kind: .invalidParameter, message: "COPY row \(rows + 1) is larger than 2 GiB")
        }
        let sent = buffer.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { PQputCopyData(connection, $0.baseAddress, count) }
        }
        guard sent == 1 else {
            throw PostgresError(kind: .connectionFailure, message: "COPY data could not be sent: " + String(cString: PQerrorMessage(connection)))
        }
        buffer.removeAll(keepingCapacity: true)
    }
}

/// The format of `COPY … TO STDOUT`.
///
/// ```swift
/// try await connection.copyOut(table: "events", format: .csv) { _ in }
/// ```
public enum PostgresCopyFormat: String, Sendable {
    case text, csv, binary
}

extension PostgresConnection {
    /// Loads rows with binary `COPY table (columns) FROM STDIN`: the fastest way in. Table and
    /// column names are quoted by `PQescapeIdentifier`. Returns the number of rows copied.
    ///
    /// A value that cannot be sent, or a server error (a constraint, a type mismatch), aborts
    /// the whole COPY: nothing is loaded, and the error carries its SQLSTATE.
    public func copyIn(
        table: String, schema: String? = nil, columns: [String],
        _ rows: @Sendable (inout PostgresCopyWriter) throws -> Void
    ) async throws -> Int {
        try await copyIn(table: table, schema: schema, columns: columns, chunkLimit: Int(Int32.max) - (1 << 20), rows)
    }

    func copyIn(
        table: String, schema: String? = nil, columns: [String], chunkLimit: Int,
        _ rows: @Sendable (inout PostgresCopyWriter) throws -> Void
    ) async throws -> Int {
        try checkOwnership()
        let target: SQL = schema.map { "\(identifier: $0, table)" } ?? "\(identifier: table)"
        let columnList = SQL.joined(columns.map { "\(identifier: $0)" })
        let statement = try SQL("COPY \(target) (\(columnList)) FROM STDIN WITH (FORMAT binary)").render(quoteIdentifier: escapeIdentifier)
        return try await runCancellable {
            let connection = try self.liveConnection()
            try self.startCopy(connection, statement.text, expecting: PGRES_COPY_IN)
            var writer = PostgresCopyWriter(connection: connection, fieldCount: columns.count, chunkLimit: chunkLimit)
            do {
                try rows(&writer)
                writer.buffer.appendBigEndian(Int16(-1)) // trailer
                try writer.flush()
            } catch {
                // Abort: the server rolls the COPY back; report the client's reason.
                _ = PQputCopyEnd(connection, "aborted by the client: \(error)")
                while let result = PQgetResult(connection) { PQclear(result) }
                throw error
            }
            guard PQputCopyEnd(connection, nil) == 1 else { throw self.connectionError(connection, query: statement.text) }
            return try self.finishCopy(connection, query: statement.text)
        }
    }

    /// Streams `COPY (query) TO STDOUT` (or a whole table) to `body`, chunk by chunk, in
    /// `format`. COPY takes no parameters, so `query` must have none (filter with `stream(_:)`
    /// instead). Returns the number of rows.
    ///
    /// ```swift
    /// try await connection.copyOut(table: "events", format: .csv) { chunk in file.write(Data(chunk)) }
    /// ```
    public func copyOut(query: SQL, format: PostgresCopyFormat = .text, _ body: @Sendable (UnsafeRawBufferPointer) throws -> Void) async throws -> Int {
        guard query.parameterCount == 0 else {
            throw PostgresError(kind: .misuse, message: "COPY cannot take parameters; stream a parameterized query with stream(_:) instead")
        }
        return try await copyOut(statement: "COPY (\(query)) TO STDOUT WITH (FORMAT \(SQL(unsafeRawSQL: format.rawValue)))", body)
    }

    /// Streams a whole table (or some of its columns) with `COPY … TO STDOUT`.
    public func copyOut(table: String, schema: String? = nil, columns: [String]? = nil, format: PostgresCopyFormat = .text, _ body: @Sendable (UnsafeRawBufferPointer) throws -> Void) async throws -> Int {
        let target: SQL = schema.map { "\(identifier: $0, table)" } ?? "\(identifier: table)"
        let columnList: SQL = columns.map { "(\(SQL.joined($0.map { "\(identifier: $0)" })))" } ?? ""
        return try await copyOut(statement: "COPY \(target) \(columnList) TO STDOUT WITH (FORMAT \(SQL(unsafeRawSQL: format.rawValue)))", body)
    }

    private func copyOut(statement sql: SQL, _ body: @Sendable (UnsafeRawBufferPointer) throws -> Void) async throws -> Int {
        try checkOwnership()
        let statement = try sql.render(quoteIdentifier: escapeIdentifier)
        return try await runCancellable {
            let connection = try self.liveConnection()
            try self.startCopy(connection, statement.text, expecting: PGRES_COPY_OUT)
            var failure: (any Error)?
            while true {
                var chunk: UnsafeMutablePointer<CChar>?
                let length = PQgetCopyData(connection, &chunk, 0)
                if length > 0, let chunk {
                    if failure == nil {
                        do { try body(UnsafeRawBufferPointer(start: chunk, count: Int(length))) } catch {
                            failure = error
                            // Stop the server; the rest of the data is drained below.
                            var message = [CChar](repeating: 0, count: 256)
                            if let cancel = PQgetCancel(connection) {
                                _ = PQcancel(cancel, &message, Int32(message.count))
                                PQfreeCancel(cancel)
                            }
                        }
                    }
                    PQfreemem(chunk)
                } else if length == -1 {
                    break
                } else {
                    throw self.connectionError(connection, query: statement.text)
                }
            }
            if let failure {
                while let result = PQgetResult(connection) { PQclear(result) }
                throw failure
            }
            return try self.finishCopy(connection, query: statement.text)
        }
    }

    /// Sends the COPY statement and checks that the server entered `status`; a refusal (a bad
    /// column, a missing table) comes back as its own error.
    private func startCopy(_ connection: OpaquePointer, _ text: String, expecting status: ExecStatusType) throws {
        guard let started = PQexec(connection, text) else { throw connectionError(connection, query: text) }
        guard PQresultStatus(started) == status else {
            _ = try check(started, query: text) // throws the server's error
            throw PostgresError(kind: .protocolViolation, message: "COPY did not start")
        }
        PQclear(started)
    }

    /// Reads the COPY's final result and drains libpq to idle before reporting it, so an error
    /// never leaves the connection busy.
    private func finishCopy(_ connection: OpaquePointer, query: String) throws -> Int {
        let result = PQgetResult(connection)
        while let extra = PQgetResult(connection) { PQclear(extra) }
        return try check(result, query: query).affectedRows
    }
}
