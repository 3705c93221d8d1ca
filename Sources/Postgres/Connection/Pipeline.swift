import CLibPQ

extension PostgresConnection {
    /// Sends many statements in libpq's pipeline mode: they go out back to back and their
    /// results come back together, instead of one round trip each.
    ///
    /// The batch runs as one implicit transaction (unless a transaction is already open): if a
    /// statement fails, it and every later one are not applied, earlier ones are rolled back, and
    /// the error says which statement failed. The connection stays usable. Meant for writes and
    /// small results; statements are sent in chunks of 256 with a flush request, so neither side
    /// can fill its socket buffer while the other waits.
    ///
    /// ```swift
    /// let inserts: [SQL] = events.map { "INSERT INTO events (...) VALUES (\($0.id), ...)" }
    /// let results = try await connection.pipeline(inserts)
    /// ```
    public func pipeline(_ statements: [SQL]) async throws -> [PostgresRows] {
        try checkOwnership()
        guard !statements.isEmpty else { return [] }
        let rendered = try statements.map { try $0.render(quoteIdentifier: escapeIdentifier) }
        // Prepare (or find in the cache) every statement first, outside the pipeline.
        let idleBefore = !isInTransaction
        do {
            return try await runBatch(rendered)
        } catch let error as PostgresError where Self.isStalePlan(error) && idleBefore {
            // A plan the server invalidated (ALTER TABLE, DEALLOCATE): the batch rolled back
            // whole and its stale statements left the cache, so it runs again once.
            return try await runBatch(rendered)
        }
    }

    private func runBatch(_ rendered: [RenderedSQL]) async throws -> [PostgresRows] {
        var prepared: [PreparedStatement] = []
        prepared.reserveCapacity(rendered.count)
        // The batch's own statements must survive until it is sent: no eviction among them.
        let floor = useCounter + 1
        for statement in rendered { prepared.append(try preparedStatement(for: statement, keepingFrom: floor)) }
        return try await runCancellable { try self.runPipeline(rendered, prepared) }
    }

    private func runPipeline(_ rendered: [RenderedSQL], _ prepared: [PreparedStatement]) throws -> [PostgresRows] {
        let connection = try liveConnection()
        guard PQenterPipelineMode(connection) == 1 else {
            throw PostgresError(kind: .protocolViolation, message: "libpq refused pipeline mode: \(lastErrorMessage(connection))")
        }
        var results: [PostgresRows] = []
        results.reserveCapacity(rendered.count)
        var failure: (index: Int, error: PostgresError)?
        var sent = 0
        var received = 0
        let chunk = 256
        do {
            while received < rendered.count {
                let end = min(sent + chunk, rendered.count)
                while sent < end {
                    guard send(rendered[sent], prepared[sent], on: connection) == 1 else { throw connectionError(connection, query: rendered[sent].text) }
                    sent += 1
                }
                let queued = sent == rendered.count ? PQpipelineSync(connection) : PQsendFlushRequest(connection)
                guard queued == 1, PQflush(connection) == 0 else { throw connectionError(connection, query: "pipeline") }
                while received < sent {
                    guard let result = PQgetResult(connection) else { throw connectionError(connection, query: rendered[received].text) }
                    switch PQresultStatus(result) {
                    case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
                        results.append(PostgresRows(storage: ResultStorage(result: result)))
                    case PGRES_PIPELINE_ABORTED:
                        PQclear(result)
                    case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
                        PQclear(result)
                        abandonCopy(connection)
                        if failure == nil { failure = (received, PostgresError(kind: .misuse, message: "COPY cannot run in a pipeline")) }
                    default:
                        let error = makeError(result, connection: connection, query: rendered[received].text)
                        PQclear(result)
                        if Self.isStalePlan(error) { dropCachedStatement(rendered[received].cacheKey) }
                        if failure == nil { failure = (received, error) }
                    }
                    while let extra = PQgetResult(connection) { PQclear(extra) } // the command's terminator
                    received += 1
                }
            }
            // The Sync's own result.
            while let result = PQgetResult(connection) {
                let done = PQresultStatus(result) == PGRES_PIPELINE_SYNC
                PQclear(result)
                if done { break }
            }
        } catch {
            leavePipeline(connection)
            throw error
        }
        leavePipeline(connection)
        if let failure {
            var error = failure.error
            error.message = "statement \(failure.index + 1) of \(rendered.count) in the pipeline failed: \(error.message). "
                + "The batch was rolled back; statements after it did not run"
            throw error
        }
        return results
    }

    private func send(_ statement: RenderedSQL, _ prepared: PreparedStatement, on connection: OpaquePointer) -> Int32 {
        statement.withParameters { count, values, lengths, formats in
            // Without a cache every statement shares the unnamed name: send each with its own text.
            guard !prepared.isUnnamed else {
                return statement.types.withUnsafeBufferPointer { types in
                    PQsendQueryParams(connection, statement.text, count, types.baseAddress, values, lengths, formats, prepared.resultFormat.rawValue)
                }
            }
            return PQsendQueryPrepared(connection, prepared.name, count, values, lengths, formats, prepared.resultFormat.rawValue)
        } ?? 0
    }

    /// Leaves pipeline mode, reading whatever results are still pending.
    private func leavePipeline(_ connection: OpaquePointer) {
        var attempts = 0
        while PQpipelineStatus(connection) != PQ_PIPELINE_OFF && attempts < 100_000 {
            if PQexitPipelineMode(connection) == 1 { return }
            if PQstatus(connection) == CONNECTION_BAD { break }
            if let result = PQgetResult(connection) { PQclear(result) } else if PQpipelineSync(connection) != 1 { break }
            attempts += 1
        }
        if PQpipelineStatus(connection) != PQ_PIPELINE_OFF { brokenFlag.store(true, ordering: .releasing) }
    }
}
