/// Every failure of the wrapper: an error the server reported, a lost or refused connection,
/// a value that cannot be sent, or a misuse of the API.
///
/// Server errors carry every field libpq reports. `kind` classifies the common SQLSTATEs so
/// callers can `switch` instead of comparing strings, and `retry` says whether running the whole
/// transaction again is safe, may write twice, or cannot help.
///
/// ```swift
/// do {
///     try await connection.execute("INSERT INTO users (email) VALUES (\(email))")
/// } catch let error as PostgresError where error.kind == .uniqueViolation {
///     print("taken:", error.constraint ?? "?")   // "users_email_key"
/// }
/// ```
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public var kind: Kind
    /// The five-character SQLSTATE (`"23505"`), when the server (or libpq) gave one.
    public var sqlState: String?
    /// `ERROR`, `FATAL` or `PANIC` (not localized), when the server gave one.
    public var severity: String?
    /// The primary, human-readable message.
    public var message: String
    /// Secondary detail, such as the conflicting key.
    public var detail: String?
    /// Advice from the server on what to do.
    public var hint: String?
    /// 1-based character position of the error in the statement text.
    public var position: Int?
    /// Position inside an internally generated statement (`internalQuery`).
    public var internalPosition: Int?
    /// The internally generated statement that failed (for example inside a PL/pgSQL function).
    public var internalQuery: String?
    /// The call stack context (`WHERE` in psql's output).
    public var context: String?
    public var schema: String?
    public var table: String?
    public var column: String?
    public var dataType: String?
    /// The name of the violated constraint or index, as the server sent it (on a Citus
    /// worker, the shard's; see ``declaredConstraint``).
    public var constraint: String?
    /// ``constraint`` as the schema declares it. On a Citus cluster the error comes from the
    /// worker that holds the row, which names the shard's copy of the constraint and table
    /// after its shard id (`events_one_active_sleep_102021` on `events_102021`): that suffix
    /// is taken off. Citus passes a worker's error on without its fields (no constraint, no
    /// table: only the message, the detail and "while executing command on host:port" in the
    /// context), so for an integrity error passed on that way, and only then, the name is the
    /// one the message quotes (`violates unique constraint "…"`, in English as workers write
    /// it by default), without its shard suffix if it has one (a CHECK constraint keeps its
    /// name on the shards). Anywhere else it is ``constraint``.
    ///
    /// ```swift
    /// catch let error as PostgresError where error.declaredConstraint == "users_email_lower_key" { … }
    /// ```
    public var declaredConstraint: String? {
        if let constraint {
            guard let table, let underscore = table.lastIndex(of: "_") else { return constraint }
            let shard = table[underscore...]
            guard Self.isShardSuffix(shard), constraint.hasSuffix(shard), constraint.count > shard.count else { return constraint }
            return String(constraint.dropLast(shard.count))
        }
        guard sqlState?.hasPrefix("23") == true, context?.contains("while executing command on ") == true,
              let quoted = message.range(of: "constraint \""),
              let end = message[quoted.upperBound...].firstIndex(of: "\"") else { return nil }
        let named = message[quoted.upperBound..<end]
        // Indexes (unique keys, exclusions) are renamed per shard; CHECK constraints are not.
        guard let underscore = named.lastIndex(of: "_"), Self.isShardSuffix(named[underscore...]), underscore > named.startIndex else { return String(named) }
        return String(named[..<underscore])
    }

    /// `_` and digits: the suffix Citus gives a shard's tables and constraints.
    private static func isShardSuffix(_ suffix: Substring) -> Bool {
        suffix.count > 1 && suffix.first == "_" && suffix.dropFirst().allSatisfy { $0.isASCII && $0.isNumber }
    }
    /// Server source location, for bug reports.
    public var sourceFile: String?
    public var sourceLine: Int?
    public var sourceFunction: String?
    /// The SQL text that failed (never the parameter values).
    public var query: String?

    public init(kind: Kind, message: String, sqlState: String? = nil) {
        self.kind = kind
        self.message = message
        self.sqlState = sqlState
    }

    /// The classification of an error.
    ///
    /// ```swift
    /// if error.kind == .uniqueViolation { return .conflict }
    /// ```
    public enum Kind: String, Sendable, Hashable {
        // Integrity (class 23)
        case uniqueViolation
        case foreignKeyViolation
        case notNullViolation
        case checkViolation
        case exclusionViolation
        // Concurrency
        case serializationFailure
        case deadlockDetected
        case lockNotAvailable
        case queryCanceled
        // Connection
        /// The connection could not be made, or broke (class 08, or libpq saw the socket close).
        case connectionFailure
        /// The server terminated the session or is shutting down (57P01, 57P02, 57P03), or
        /// ended it for sitting idle too long (57P05, `idle_session_timeout`).
        case adminShutdown
        // Statement
        case undefinedTable
        case undefinedColumn
        case undefinedFunction
        case syntaxError
        case insufficientPrivilege
        case invalidTextRepresentation
        case numericOutOfRange
        case divisionByZero
        case raiseException
        /// The transaction is aborted: statements are ignored until `ROLLBACK` (25P02).
        case inFailedTransaction
        /// A server error not classified above: look at `sqlState`.
        case otherServerError
        // Client side
        /// A connection string, URL or option is invalid.
        case invalidConfiguration
        /// A value cannot be sent (for example a `String` holding NUL).
        case invalidParameter
        /// The API was used in a way that cannot work (for example two tasks sharing a
        /// connection inside a transaction).
        case misuse
        /// The pool waited `acquireTimeout` without getting a connection.
        case poolTimeout
        /// The pool is shut down.
        case poolClosed
        /// libpq returned something the wrapper did not expect.
        case protocolViolation
        /// A statement ran past its deadline and was cancelled (or abandoned, on a connection it
        /// shares with other callers).
        case timeout
    }

    /// Whether running the same work again can help, in three answers a caller can act on.
    ///
    /// ```swift
    /// switch error.retry {
    /// case .safe: try await runTransactionAgain()
    /// case .outcomeUnknown: try await checkWhetherItWasSaved()   // never blindly: it may have committed
    /// case .willNotSucceed: throw error
    /// }
    /// ```
    public enum Retry: String, Sendable, Hashable {
        /// Nothing was committed: a serialization failure, a deadlock, a lock timeout, a
        /// connection that failed before the statement was sent, or one lost inside a
        /// transaction (the server rolls it back), too many connections. Run it again.
        case safe
        /// The connection was lost after a COMMIT (or a statement outside a transaction) was
        /// sent and before its answer came: it may or may not have been applied. A blind retry
        /// can write twice.
        case outcomeUnknown
        /// Authentication, syntax, a constraint, a missing table…: the same call fails again.
        case willNotSucceed
    }

    /// Set by the connection when it is lost, from what was in flight (see `retry`).
    public var lostConnectionOutcome: Retry?

    /// Which step of a multi-statement request failed (the statement's index in a pipeline).
    var stepIndex: Int?

    /// See `Retry`.
    public var retry: Retry {
        if let lostConnectionOutcome { return lostConnectionOutcome }
        switch kind {
        case .serializationFailure, .deadlockDetected, .lockNotAvailable: return .safe
        case .connectionFailure, .adminShutdown:
            // A failure to connect: authentication and names will not get better; the rest may.
            let text = message.lowercased()
            let permanent = ["password authentication failed", "authentication failed", "no pg_hba.conf entry",
                             "does not exist", "ssl is not enabled", "certificate"].contains { text.contains($0) }
            return permanent ? .willNotSucceed : .safe
        default:
            return ["53300", "57P03", "53400"].contains(sqlState ?? "") ? .safe : .willNotSucceed
        }
    }

    /// Classifies a SQLSTATE.
    public static func kind(forSQLState state: String) -> Kind {
        switch state {
        case "23505": .uniqueViolation
        case "23503": .foreignKeyViolation
        case "23502": .notNullViolation
        case "23514": .checkViolation
        case "23P01": .exclusionViolation
        case "40001": .serializationFailure
        case "40P01": .deadlockDetected
        case "55P03": .lockNotAvailable
        case "57014": .queryCanceled
        case "57P01", "57P02", "57P03", "57P05": .adminShutdown
        case "42P01": .undefinedTable
        case "42703": .undefinedColumn
        case "42883": .undefinedFunction
        case "42601": .syntaxError
        case "42501": .insufficientPrivilege
        case "22P02": .invalidTextRepresentation
        case "22003": .numericOutOfRange
        case "22012": .divisionByZero
        case "P0001": .raiseException
        case "25P02": .inFailedTransaction
        default: state.hasPrefix("08") ? .connectionFailure : .otherServerError
        }
    }

    /// One paragraph for a log or a terminal: what failed, where, and what the server advises.
    public var description: String {
        var text = severity.map { "\($0): " } ?? ""
        text += message
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let constraint { text += "\n  constraint: \(constraint)" }
        if let table {
            text += "\n  table: " + (schema.map { "\($0).\(table)" } ?? table)
            if let column { text += ", column: \(column)" }
        }
        if let detail { text += "\n  detail: \(detail)" }
        if let hint { text += "\n  hint: \(hint)" }
        if let position { text += "\n  at character \(position) of the statement" }
        if let context { text += "\n  context: \(context)" }
        return text
    }
}

extension PostgresError: Equatable {
    public static func == (lhs: PostgresError, rhs: PostgresError) -> Bool {
        lhs.kind == rhs.kind && lhs.sqlState == rhs.sqlState && lhs.message == rhs.message
            && lhs.constraint == rhs.constraint && lhs.detail == rhs.detail
    }
}

/// A column value could not become the Swift type asked for.
///
/// It names the column, its PostgreSQL type and the Swift type, so the fix is obvious.
///
/// ```swift
/// do { _ = try row.decode(Int.self, column: "name") }
/// catch let error as PostgresDecodingError { print(error) }
/// // column "name" (text) cannot be decoded as Int: expected an integer type
/// ```
public struct PostgresDecodingError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The column name, or `#index` when decoding by position without a name.
    public var column: String
    /// The column's zero-based position.
    public var columnIndex: Int
    /// The column's PostgreSQL type.
    public var postgresType: PostgresType
    /// The Swift type asked for, as written in source.
    public var swiftType: String
    /// Why it failed.
    public var reason: String

    public init(column: String, columnIndex: Int, postgresType: PostgresType, swiftType: String, reason: String) {
        self.column = column
        self.columnIndex = columnIndex
        self.postgresType = postgresType
        self.swiftType = swiftType
        self.reason = reason
    }

    public var description: String {
        "column \"\(column)\" (\(postgresType)) cannot be decoded as \(swiftType): \(reason)"
    }
}
