import Foundation

extension PostgresConnection {
    /// Runs a statement and returns its rows. `timeout` overrides the configuration's
    /// `queryTimeout` for this statement: past it, the statement is cancelled and the call
    /// throws `.timeout`.
    ///
    /// ```swift
    /// let rows = try await connection.query("SELECT id FROM users WHERE email = \(email)")
    /// let slow = try await connection.query("SELECT pg_sleep(3)", timeout: .seconds(1))   // throws .timeout
    /// ```
    public func query(_ sql: SQL, timeout: Duration? = nil) async throws -> PostgresRows {
        try await query(sql, timeout: timeout, looked: nil)
    }

    /// `query`, with the statement's shape as the pool looked it up (see `SQL.render`).
    func query(_ sql: SQL, timeout: Duration?, looked: SQL.ShapeLookup?) async throws -> PostgresRows {
        try await checkOwnership()
        let rendered = try sql.render(quoteIdentifier: core.escapeIdentifier, looked: looked)
        return try await observer.observe(ObservedStatement(text: rendered.text, parameterCount: rendered.types.count), server: server) {
            try await run(rendered, timeout: timeout)
        }
    }

    /// Runs a statement and returns the number of rows it affected.
    ///
    /// ```swift
    /// let changed = try await connection.execute("UPDATE users SET display_name = \(name) WHERE id = \(id)")
    /// ```
    @discardableResult
    public func execute(_ sql: SQL, timeout: Duration? = nil) async throws -> Int {
        try await query(sql, timeout: timeout).affectedRows
    }

    /// Every row as a `Decodable` struct.
    ///
    /// ```swift
    /// let users = try await connection.fetchAll(User.self, "SELECT * FROM users ORDER BY email")
    /// ```
    public func fetchAll<T: Decodable & Sendable>(_ type: T.Type, _ sql: SQL, timeout: Duration? = nil) async throws -> [T] {
        try await query(sql, timeout: timeout).decode(as: type)
    }

    /// The first row as a `Decodable` struct, or `nil` when there is none.
    ///
    /// ```swift
    /// let user = try await connection.fetchOne(User.self, "SELECT * FROM users WHERE id = \(id)")
    /// ```
    public func fetchOne<T: Decodable & Sendable>(_ type: T.Type, _ sql: SQL, timeout: Duration? = nil) async throws -> T? {
        try await query(sql, timeout: timeout).first?.decode(as: type)
    }

    /// The first column of the first row, or `nil` when there is no row (or it is NULL).
    ///
    /// ```swift
    /// let count = try await connection.fetchValue(Int.self, "SELECT count(*) FROM events") ?? 0
    /// ```
    public func fetchValue<T: PostgresDecodable & Sendable>(_ type: T.Type, _ sql: SQL, timeout: Duration? = nil) async throws -> T? {
        guard let row = try await query(sql, timeout: timeout).first else { return nil }
        return try row.decode(T?.self, at: 0)
    }

    /// Runs SQL text exactly as given, through the simple query protocol: several statements
    /// separated by semicolons, no parameters. Returns the last statement's command tag. For
    /// migration files and other trusted scripts only; never pass it text built from user input.
    ///
    /// ```swift
    /// try await connection.executeUnsafeRawSQL(try String(contentsOfFile: "Migrations/0001_users.sql"))
    /// ```
    @discardableResult
    public func executeUnsafeRawSQL(_ text: String, timeout: Duration? = nil) async throws -> String {
        try await checkOwnership()
        core.mirror.sessionDirty.store(true, ordering: .releasing) // a script may change anything
        let results = try await observer.observe(ObservedStatement(text: text, parameterCount: 0), server: server) {
            try await perform(.simple(text), text: text, timeout: timeout)
        }
        return results.last?.commandTag ?? ""
    }

    /// Runs a rendered statement: prepared and cached (or unnamed with the cache off), retried
    /// once when the server dropped or invalidated the plan outside a transaction.
    func run(_ rendered: RenderedSQL, timeout: Duration?) async throws -> PostgresRows {
        // One deadline for the whole call: preparing counts against it.
        let deadline = Deadline(timeout ?? configuration.queryTimeout)
        let statement = try await preparedStatement(for: rendered, timeout: deadline.remaining)
        let idleBefore = core.transactionStatus == .idle
        do {
            return try await execute(statement, rendered, timeout: deadline.remaining)
        } catch let error as PostgresError where Self.isStalePlan(error) && !statement.isUnnamed {
            // DEALLOCATE, DISCARD, ALTER TABLE: the plan is gone or no longer fits.
            forgetStatement(rendered.cacheKey, stillExists: error.sqlState != "26000")
            guard idleBefore else { throw error } // the transaction is aborted: let the caller retry it
            let again = try await preparedStatement(for: rendered, timeout: deadline.remaining)
            return try await execute(again, rendered, timeout: deadline.remaining)
        }
    }

    private func execute(_ statement: PreparedStatement, _ rendered: RenderedSQL, timeout: Duration?) async throws -> PostgresRows {
        let step: Request.Step = statement.isUnnamed
            ? .executeUnnamed(statement: rendered, resultFormat: statement.resultFormat)
            : .execute(name: statement.name, statement: rendered, resultFormat: statement.resultFormat)
        let results = try await perform(.extended([step]), text: rendered.text, timeout: timeout)
        guard let result = results.last else {
            throw PostgresError(kind: .protocolViolation, message: "the server sent no result for the statement")
        }
        if statement.touchesSession || SessionSettings.changesSession(commandTag: result.commandTag) {
            core.mirror.sessionDirty.store(true, ordering: .releasing)
            if result.commandTag == "PREPARE" { userPrepared = true }
        }
        return PostgresRows(storage: result)
    }

    static func isStalePlan(_ error: PostgresError) -> Bool {
        error.sqlState == "26000" || (error.sqlState == "0A000" && error.sourceFunction == "RevalidateCachedQuery")
    }

    /// Quotes a name with libpq's `PQescapeIdentifier` (used by `\(identifier:)`).
    func escapeIdentifier(_ name: String) throws -> String { try core.escapeIdentifier(name) }
}

/// A call's deadline, shared by the round trips it makes (prepare, then execute).
struct Deadline {
    private let end: ContinuousClock.Instant?

    init(_ limit: Duration?) { end = limit.map { .now + $0 } }

    /// What is left of it (at least a millisecond, so an expired deadline still expires at
    /// once rather than meaning "none"); nil when there is no deadline.
    var remaining: Duration? {
        end.map { max(.milliseconds(1), ContinuousClock.now.duration(to: $0)) }
    }
}
