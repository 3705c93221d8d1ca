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
    let connection: LibPQConnection
    var buffer: [UInt8] = []
    var fieldCount: Int
    /// Rows appended so far.
    public private(set) var rows = 0
    var failed: PostgresError?

    /// The most bytes handed to libpq at once (its limit is 2 GiB); a row may span chunks.
    let chunkLimit: Int

    init(connection: LibPQConnection, fieldCount: Int, chunkLimit: Int) {
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
        guard Int32(exactly: buffer.count) != nil else {
            throw PostgresError(kind: .invalidParameter, message: "COPY row \(rows + 1) is larger than 2 GiB")
        }
        guard buffer.withUnsafeBufferPointer({ connection.putCopyData($0) }) else {
            throw PostgresError(kind: .connectionFailure, message: "COPY data could not be sent: " + connection.errorMessage.trimmingCharacters(in: .whitespacesAndNewlines))
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
    /// the whole COPY: nothing is loaded, and the error carries its SQLSTATE. `rows` runs on a
    /// thread of its own (the COPY owns the connection meanwhile), never on an I/O thread.
    public func copyIn(
        table: String, schema: String? = nil, columns: [String],
        _ rows: @escaping @Sendable (inout PostgresCopyWriter) throws -> Void
    ) async throws -> Int {
        try await copyIn(table: table, schema: schema, columns: columns, chunkLimit: Int(Int32.max) - (1 << 20), rows)
    }

    func copyIn(
        table: String, schema: String? = nil, columns: [String], chunkLimit: Int,
        _ rows: @escaping @Sendable (inout PostgresCopyWriter) throws -> Void
    ) async throws -> Int {
        try await checkOwnership()
        let target: SQL = schema.map { "\(identifier: $0, table)" } ?? "\(identifier: table)"
        let columnList = SQL.joined(columns.map { "\(identifier: $0)" })
        let statement = try SQL("COPY \(target) (\(columnList)) FROM STDIN WITH (FORMAT binary)").render(quoteIdentifier: core.escapeIdentifier).text
        let fieldCount = columns.count
        return try await observer.observe(ObservedStatement(text: statement, parameterCount: 0), server: server) {
            try await blocking { session in
                let connection = session.connection
                try session.startCopy(statement, expecting: .copyIn)
                var writer = PostgresCopyWriter(connection: connection, fieldCount: fieldCount, chunkLimit: chunkLimit)
                do {
                    try rows(&writer)
                    writer.buffer.appendBigEndian(Int16(-1)) // trailer
                    try writer.flush()
                } catch {
                    // Abort: the server rolls the COPY back; report the client's reason.
                    _ = connection.putCopyEnd(abortReason: "aborted by the client: \(error)")
                    connection.drainResults()
                    throw error
                }
                guard connection.putCopyEnd(abortReason: nil) else { throw session.connectionError(query: statement) }
                return try session.finishCopy(query: statement)
            }
        }
    }

    /// Streams `COPY (query) TO STDOUT` (or a whole table) to `body`, chunk by chunk, in
    /// `format`. COPY takes no parameters, so `query` must have none (filter with `stream(_:)`
    /// instead). Returns the number of rows. `body` runs on a thread of its own.
    ///
    /// ```swift
    /// try await connection.copyOut(table: "events", format: .csv) { chunk in file.write(Data(chunk)) }
    /// ```
    public func copyOut(query: SQL, format: PostgresCopyFormat = .text, _ body: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void) async throws -> Int {
        guard query.parameterCount == 0 else {
            throw PostgresError(kind: .misuse, message: "COPY cannot take parameters; stream a parameterized query with stream(_:) instead")
        }
        return try await copyOut(statement: "COPY (\(query)) TO STDOUT WITH (FORMAT \(SQL(unsafeRawSQL: format.rawValue)))", body)
    }

    /// Streams a whole table (or some of its columns) with `COPY … TO STDOUT`.
    public func copyOut(table: String, schema: String? = nil, columns: [String]? = nil, format: PostgresCopyFormat = .text, _ body: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void) async throws -> Int {
        let target: SQL = schema.map { "\(identifier: $0, table)" } ?? "\(identifier: table)"
        let columnList: SQL = columns.map { "(\(SQL.joined($0.map { "\(identifier: $0)" })))" } ?? ""
        return try await copyOut(statement: "COPY \(target) \(columnList) TO STDOUT WITH (FORMAT \(SQL(unsafeRawSQL: format.rawValue)))", body)
    }

    private func copyOut(statement sql: SQL, _ body: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void) async throws -> Int {
        try await checkOwnership()
        let statement = try sql.render(quoteIdentifier: core.escapeIdentifier).text
        return try await observer.observe(ObservedStatement(text: statement, parameterCount: 0), server: server) {
            try await blocking { session in
                let connection = session.connection
                try session.startCopy(statement, expecting: .copyOut)
                var failure: (any Error)?
                while true {
                    let more = connection.readCopyChunk { chunk in
                        guard failure == nil else { return }
                        do { try body(chunk) } catch {
                            failure = error
                            // Stop the server; the rest of the data is drained below.
                            connection.makeCancel()?.sendBlocking()
                        }
                    }
                    guard let more else { throw session.connectionError(query: statement) }
                    if !more { break }
                }
                if let failure {
                    connection.drainResults()
                    throw failure
                }
                return try session.finishCopy(query: statement)
            }
        }
    }

    /// Runs `work` with the connection in blocking mode on a thread of its own (see
    /// `runBlocking`); cancelling the task cancels the COPY on the server.
    private func blocking<T: Sendable>(_ work: @escaping @Sendable (BlockingSession) throws -> T) async throws -> T {
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before the COPY began", sqlState: "57014")
        }
        let core = self.core
        let loop = self.loop
        let secrets = core.secrets
        return try await withTaskCancellationHandler { [self] in
            try await self.runBlocking { connection in try work(BlockingSession(connection: connection, secrets: secrets)) }
        } onCancel: {
            loop.execute { core.cancelBlocking() }
        }
    }
}

extension PostgresConnection {
    /// Runs `body` with the connection in blocking mode on a thread of its own, once nothing
    /// else is in flight; the I/O thread leaves the socket alone meanwhile.
    func runBlocking<T: Sendable>(_ body: @escaping @Sendable (LibPQConnection) throws -> T) async throws -> T {
        // Nothing may be sent between the check and the hand-over: no await between them.
        while core.lastPendingID != nil { await waitUntilIdle() }
        let box = UncheckedBox(try core.beginBlocking())
        let outcome: Result<T, any Error> = await withCheckedContinuation { continuation in
            runOnHelperThread { continuation.resume(returning: Result { try body(box.value) }) }
        }
        core.endBlocking()
        return try outcome.get()
    }
}

/// A COPY on the helper thread that owns the connection meanwhile (libpq in blocking mode).
struct BlockingSession {
    let connection: LibPQConnection
    let secrets: [String]

    /// Sends the COPY statement and checks that the server entered `status`; a refusal (a bad
    /// column, a missing table) comes back as its own error, with every field the server sent.
    func startCopy(_ text: String, expecting status: LibPQConnection.CopyStatus) throws {
        switch connection.execute(text, secrets: secrets) {
        case .failure(let error):
            throw error
        case .success(let started) where started == status:
            return
        case .success:
            var error = PostgresError(kind: .misuse, message: "COPY did not start")
            error.query = text
            throw error
        }
    }

    /// Reads the COPY's final result and drains libpq to idle before reporting it, so an error
    /// never leaves the connection busy.
    func finishCopy(query: String) throws -> Int {
        try connection.finishBlockingCommand(query: query, secrets: secrets).get()
    }

    func connectionError(query: String) -> PostgresError {
        connection.connectionError(query: query, secrets: secrets)
    }
}
