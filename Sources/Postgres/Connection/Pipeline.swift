
extension PostgresConnection {
    /// Sends many statements in one go, in libpq's pipeline mode with a single sync point:
    /// they go out back to back and their results come back together, instead of one round
    /// trip each.
    ///
    /// The batch runs as one implicit transaction (unless a transaction is already open): if a
    /// statement fails, it and every later one are not applied, earlier ones are rolled back,
    /// and the error says which statement failed. The connection stays usable.
    ///
    /// ```swift
    /// let inserts: [SQL] = events.map { "INSERT INTO events (...) VALUES (\($0.id), ...)" }
    /// let results = try await connection.pipeline(inserts)
    /// ```
    public func pipeline(_ statements: [SQL], timeout: Duration? = nil) async throws -> [PostgresRows] {
        try await checkOwnership()
        guard !statements.isEmpty else { return [] }
        let rendered = try statements.map { try $0.render(quoteIdentifier: core.escapeIdentifier) }
        let idleBefore = !isInTransaction
        let observed = ObservedStatement(
            text: rendered.map(\.text).joined(separator: ";\n"), parameterCount: rendered.reduce(0) { $0 + $1.types.count },
            batchSize: rendered.count)
        return try await observer.observe(observed, server: server) {
            do {
                return try await runBatch(rendered, timeout: timeout)
            } catch let error as PostgresError where Self.isStalePlan(error) && idleBefore {
                // A plan the server invalidated (ALTER TABLE, DEALLOCATE): the batch rolled back
                // whole and its stale statements left the cache, so it runs again once.
                return try await runBatch(rendered, timeout: timeout)
            }
        }
    }

    private func runBatch(_ rendered: [RenderedSQL], timeout: Duration?) async throws -> [PostgresRows] {
        var steps: [Request.Step] = []
        steps.reserveCapacity(rendered.count)
        // The batch's own statements must survive until it is sent: no eviction among them.
        let floor = useCounter + 1
        let deadline = Deadline(timeout ?? configuration.queryTimeout)
        for statement in rendered {
            let prepared = try await preparedStatement(for: statement, keepingFrom: floor, timeout: deadline.remaining)
            steps.append(prepared.isUnnamed
                ? .executeUnnamed(statement: statement, resultFormat: prepared.resultFormat)
                : .execute(name: prepared.name, statement: statement, resultFormat: prepared.resultFormat))
            if prepared.touchesSession { core.mirror.sessionDirty.store(true, ordering: .releasing) }
        }
        do {
            let results = try await perform(.extended(steps), text: "pipeline of \(rendered.count) statements", timeout: deadline.remaining)
            return results.map { PostgresRows(storage: $0) }
        } catch var error as PostgresError {
            if Self.isStalePlan(error) {
                for statement in rendered { forgetStatement(statement.cacheKey, stillExists: error.sqlState != "26000") }
            }
            if let index = error.stepIndex {
                error.message = "statement \(index + 1) of \(rendered.count) in the pipeline failed: \(error.message). "
                    + "The batch was rolled back; statements after it did not run"
            } else {
                error.message = "a statement of the pipeline of \(rendered.count) failed: \(error.message). "
                    + "The batch was rolled back; statements after it did not run"
            }
            throw error
        }
    }
}
