import Foundation

/// A statement prepared on one connection.
struct PreparedStatement {
    let name: String
    let resultFormat: PostgresFormat
    var lastUse: Int
    /// It may change session state (see `SessionSettings.mayChangeSession`).
    let touchesSession: Bool
    /// The cache is off: the statement is sent with its text each time (PQsendQueryParams).
    var isUnnamed: Bool { name.isEmpty }
}

extension PostgresConnection {
    /// The prepared statement for `rendered`, from the cache or prepared now (one round trip:
    /// Parse and Describe with one sync). Whether results come back in binary or text depends
    /// on the described column types. With the cache off nothing is prepared: each statement is
    /// one Parse/Bind/Describe/Execute/Sync exchange, which a transaction pooler cannot split
    /// between two server connections, and results come back as text, which every decoder reads.
    ///
    /// `keepingFrom`: entries used at or after this `useCounter` value are never evicted (a
    /// pipeline's own statements, until it is sent). `timeout`: the caller's deadline, which
    /// preparing counts against (nil: the configured `queryTimeout`).
    func preparedStatement(for rendered: RenderedSQL, keepingFrom floor: Int = 0, timeout: Duration? = nil) async throws -> PreparedStatement {
        useCounter += 1
        let capacity = configuration.statementCacheCapacity
        guard capacity > 0, !isBehindPooler else {
            return PreparedStatement(name: "", resultFormat: .text, lastUse: useCounter, touchesSession: SessionSettings.mayChangeSession(rendered.text))
        }
        let key = rendered.cacheKey
        if var cached = statements[key] {
            cached.lastUse = useCounter
            statements[key] = cached
            return cached
        }
        flushDeallocations()
        if statements.count >= capacity { evictLeastRecentlyUsed(keepingFrom: floor) }
        statementCounter += 1
        let name = "bb_\(statementCounter)"
        let results = try await perform(
            .extended([.prepare(name: name, text: rendered.text, types: rendered.types), .describe(name: name)]),
            text: rendered.text, timeout: timeout)
        let columns = results.last?.columns ?? []
        let binary = columns.allSatisfy { PostgresType.binaryDecodable.contains($0.type) }
        let statement = PreparedStatement(
            name: name, resultFormat: binary ? .binary : .text, lastUse: useCounter, touchesSession: SessionSettings.mayChangeSession(rendered.text))
        if let raced = statements[key] {
            // Another task prepared the same text meanwhile (this connection is shared).
            pendingDeallocations.append(name)
            return raced
        }
        statements[key] = statement
        return statement
    }

    private func evictLeastRecentlyUsed(keepingFrom floor: Int) {
        guard let oldest = statements.filter({ floor == 0 || $0.value.lastUse < floor }).min(by: { $0.value.lastUse < $1.value.lastUse }) else { return }
        statements[oldest.key] = nil
        pendingDeallocations.append(oldest.value.name)
        flushDeallocations()
    }

    /// Forgets a cached statement the server no longer accepts; one that still exists on the
    /// server (a plan invalidated by ALTER TABLE) is deallocated, not left behind.
    func forgetStatement(_ key: StatementKey, stillExists: Bool) {
        guard let statement = statements.removeValue(forKey: key) else { return }
        if stillExists { pendingDeallocations.append(statement.name) }
        flushDeallocations()
    }

    /// Sends the waiting `DEALLOCATE`s, fire and forget, when no transaction is open (one that
    /// failed would refuse them).
    func flushDeallocations() {
        guard !pendingDeallocations.isEmpty, core.transactionStatus == .idle else { return }
        let steps = pendingDeallocations.map { Request.Step.deallocate(name: $0) }
        pendingDeallocations.removeAll()
        let request = Request(id: Self.nextRequestID(), kind: .extended(steps), text: "DEALLOCATE")
        core.submit(request, deadline: nil)
    }

    /// The names of the statements this connection has prepared (for tests).
    func cachedStatementNames() -> [String] { statements.values.map(\.name).sorted() }
}
