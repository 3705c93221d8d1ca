import Foundation

/// Shared by a row stream's iterator and its connection: the request, the rows waiting, and
/// how the stream ended if it ended early.
final class StreamHandle: @unchecked Sendable {
    /// The statement's cache key, to forget a plan the server invalidated.
    let cacheKey: StatementKey
    let requestID: UInt64
    let state: RowStreamState
    private let lock = NSLock()
    private var abandonedFlag = false
    private var closedReason: String?

    init(cacheKey: StatementKey, requestID: UInt64, state: RowStreamState) {
        self.cacheKey = cacheKey
        self.requestID = requestID
        self.state = state
    }

    var abandoned: Bool { lock.withLock { abandonedFlag } }
    func abandon() { lock.withLock { abandonedFlag = true } }

    /// Why the stream was cut off before its reader finished: its connection went back to the
    /// pool or closed. A later `next()` throws this rather than ending as if the result were
    /// complete.
    var closedEarly: String? { lock.withLock { closedReason } }
    func closed(reason: String) { lock.withLock { if closedReason == nil { closedReason = reason } } }
}

/// Rows of one query, delivered one at a time as the server sends them (libpq single-row
/// mode), so a large result is never held whole in memory: at most a few hundred rows wait for
/// the reader, and the server waits when they do.
///
/// While a stream is open its connection runs nothing else. Leaving the loop early (or
/// dropping the iterator) cancels the query on the server; the connection is cleaned up before
/// its next statement. Cancelling the consuming task cancels the query too. Reading a stream
/// after its connection went back to a pool (outside `withConnection`) throws.
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
        try await checkOwnership()
        let rendered = try sql.render(quoteIdentifier: core.escapeIdentifier)
        // Observed until the statement is sent; its rows are read later, at the caller's pace.
        return try await observer.observe(ObservedStatement(text: rendered.text, parameterCount: rendered.types.count), server: server) {
            let statement = try await preparedStatement(for: rendered)
            let step: Request.Step = statement.isUnnamed
                ? .executeUnnamed(statement: rendered, resultFormat: statement.resultFormat)
                : .execute(name: statement.name, statement: rendered, resultFormat: statement.resultFormat)
            let state = RowStreamState()
            let request = Request(id: Self.nextRequestID(), kind: .stream(step, state), text: rendered.text)
            let handle = StreamHandle(cacheKey: rendered.cacheKey, requestID: request.id, state: state)
            core.submit(request, deadline: PostgresDeadline.bounding(configuration.queryTimeout))
            openStream = handle
            return PostgresRowSequence(connection: self, handle: handle, owner: IteratorOwner(handle: handle))
        }
    }

    /// The next row of the open stream, or `nil` at its end.
    func nextStreamRow(_ handle: StreamHandle) async throws -> PostgresRow? {
        if let reason = handle.closedEarly {
            throw PostgresError(kind: .misuse, message: "the row stream was cut off because \(reason); read it to the end inside withConnection (or before the next statement on its connection)")
        }
        guard openStream === handle else { return nil }
        let core = self.core
        let loop = self.loop
        let id = handle.requestID
        do {
            let row = try await withTaskCancellationHandler { [self] in
                try await self.nextRow(handle.state) // uses self: stays on the I/O thread
            } onCancel: {
                loop.execute { core.interrupt(id, .cancelled) }
            }
            guard let row else {
                if openStream === handle { openStream = nil }
                return nil
            }
            return PostgresRows(storage: row)[0]
        } catch let error as PostgresError {
            if openStream === handle { openStream = nil }
            if Self.isStalePlan(error) { forgetStatement(handle.cacheKey, stillExists: error.sqlState != "26000") }
            throw error
        }
    }

    private func nextRow(_ state: RowStreamState) async throws -> ResultStorage? {
        let core = self.core
        return try await withCheckedThrowingContinuation { core.whenRowArrives(state, $0) }
    }

    /// Before any other statement: an abandoned stream is cancelled and drained; a stream
    /// still being read is a misuse.
    func settleStream() async throws {
        guard let stream = openStream else { return }
        if stream.state.finished && stream.state.buffered == 0 {
            openStream = nil
            return
        }
        guard stream.abandoned else {
            throw PostgresError(kind: .misuse, message: "a row stream is still open on this connection; finish or leave its loop before running another statement")
        }
        await closeStream(reason: nil)
    }

    /// Cancels and drains the open stream, if any. With a reason (the pool took the
    /// connection back), a reader that comes later gets an error instead of a silent end.
    func closeStream(reason: String?) async {
        guard let stream = openStream else { return }
        openStream = nil
        if let reason, !(stream.state.finished && stream.state.buffered == 0) { stream.closed(reason: reason) }
        core.abandonStream(stream.state)
        await waitUntilComplete(stream.requestID)
    }
}
