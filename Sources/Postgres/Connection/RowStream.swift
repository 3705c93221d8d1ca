import CLibPQ
import Foundation

/// Shared by a row stream's iterator and its connection: whether the consumer went away.
final class StreamHandle: @unchecked Sendable {
    /// The statement's cache key, to forget a plan the server invalidated.
    let cacheKey: String
    init(cacheKey: String) { self.cacheKey = cacheKey }
    private let lock = NSLock()
    private var abandonedFlag = false
    var abandoned: Bool { lock.withLock { abandonedFlag } }
    func abandon() { lock.withLock { abandonedFlag = true } }
}

/// Rows of one query, delivered one at a time as the server sends them (libpq single-row
/// mode), so a large result is never held whole in memory.
///
/// While a stream is open its connection runs nothing else. Leaving the loop early (or
/// dropping the iterator) cancels the query on the server; the connection is cleaned up before
/// its next statement. Cancelling the consuming task cancels the query too.
///
/// ```swift
/// for try await row in try await connection.stream("SELECT id, start_time FROM events WHERE child_id = \(id)") {
///     let (eventID, start) = try row.decode((UUID, Date).self)
/// }
/// ```
public struct PostgresRowSequence: AsyncSequence, Sendable {
    /// Each element is one row.
    ///
    /// ```swift
    /// for try await row in rows { _ = row }
    /// ```
    public typealias Element = PostgresRow
    let connection: PostgresConnection
    let handle: StreamHandle
    /// Shared by the sequence and its iterator: when both are gone, the stream is abandoned
    /// (even if it was never iterated).
    let owner: IteratorOwner

    public func makeAsyncIterator() -> Iterator {
        Iterator(connection: connection, handle: handle, owner: owner)
    }

    /// Reads the next row from the connection.
    ///
    /// ```swift
    /// var iterator = rows.makeAsyncIterator(); let first = try await iterator.next()
    /// ```
    public struct Iterator: AsyncIteratorProtocol {
        let connection: PostgresConnection
        let handle: StreamHandle
        let owner: IteratorOwner

        public mutating func next() async throws -> PostgresRow? {
            try await connection.nextStreamRow(handle)
        }
    }
}

/// Marks the stream abandoned when the last copy of its iterator goes away.
final class IteratorOwner: Sendable {
    let handle: StreamHandle
    init(handle: StreamHandle) { self.handle = handle }
    deinit { handle.abandon() }
}

extension PostgresConnection {
    /// Starts `sql` in single-row mode and returns its rows as an `AsyncSequence`.
    public func stream(_ sql: SQL) async throws -> PostgresRowSequence {
        try checkOwnership()
        let rendered = try sql.render(quoteIdentifier: escapeIdentifier)
        let statement = try preparedStatement(for: rendered)
        let connection = try liveConnection()
        let sent = rendered.withParameters { count, values, lengths, formats -> Int32 in
            guard !statement.isUnnamed else {
                return rendered.types.withUnsafeBufferPointer { types in
                    PQsendQueryParams(connection, rendered.text, count, types.baseAddress, values, lengths, formats, statement.resultFormat.rawValue)
                }
            }
            return PQsendQueryPrepared(connection, statement.name, count, values, lengths, formats, statement.resultFormat.rawValue)
        } ?? 0
        guard sent == 1 else { throw connectionError(connection, query: rendered.text) }
        _ = PQsetSingleRowMode(connection)
        let handle = StreamHandle(cacheKey: rendered.cacheKey)
        openStream = handle
        return PostgresRowSequence(connection: self, handle: handle, owner: IteratorOwner(handle: handle))
    }

    /// The next row of the open stream, or `nil` at its end.
    func nextStreamRow(_ handle: StreamHandle) async throws -> PostgresRow? {
        guard openStream === handle else { return nil }
        return try await runCancellable {
            let connection = try self.liveConnection()
            guard let result = PQgetResult(connection) else {
                self.openStream = nil
                return nil
            }
            switch PQresultStatus(result) {
            case PGRES_SINGLE_TUPLE:
                return PostgresRows(storage: ResultStorage(result: result))[0]
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK:
                PQclear(result)
                while let extra = PQgetResult(connection) { PQclear(extra) }
                self.openStream = nil
                return nil
            case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
                self.openStream = nil
                PQclear(result)
                self.abandonCopy(connection)
                throw PostgresError(kind: .misuse, message: "COPY cannot run through stream(); use copyOut")
            default:
                self.openStream = nil
                let error = self.makeError(result, connection: connection, query: "stream")
                PQclear(result)
                while let extra = PQgetResult(connection) { PQclear(extra) }
                if Self.isStalePlan(error) { self.dropCachedStatement(handle.cacheKey) }
                if PQstatus(connection) == CONNECTION_BAD { self.brokenFlag.store(true, ordering: .releasing) }
                throw error
            }
        }
    }

    /// Before any other statement: an abandoned stream is cancelled and drained; a stream
    /// still being read is a misuse.
    func settleStream() throws(PostgresError) {
        guard let stream = openStream else { return }
        guard stream.abandoned else {
            throw PostgresError(kind: .misuse, message: "a row stream is still open on this connection; finish or leave its loop before running another statement")
        }
        closeStream()
    }

    /// Cancels and drains the open stream, if any (also used when a pool takes the connection back).
    public func closeStream() {
        guard openStream != nil, let handle = try? liveConnection() else {
            openStream = nil
            return
        }
        openStream = nil
        if let cancel = PQgetCancel(handle) {
            var message = [CChar](repeating: 0, count: 256)
            _ = PQcancel(cancel, &message, Int32(message.count))
            PQfreeCancel(cancel)
        }
        while let result = PQgetResult(handle) { PQclear(result) }
    }
}
