import Foundation
import Synchronization

extension PostgresConnection {
    /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it throws (or the
    /// task is cancelled). Called inside another `transaction`, it opens a savepoint instead, so
    /// an inner failure rolls back only the inner work.
    ///
    /// `body` runs on the connection's I/O thread, so its statements need no hop; keep heavy
    /// computation out of it (it would delay the other connections of that thread).
    ///
    /// ```swift
    /// let child = try await connection.transaction(.init(isolation: .serializable)) { connection in
    ///     try await connection.execute("INSERT INTO children ...")
    ///     try await connection.execute("INSERT INTO caregivers ...")
    ///     return childID
    /// }
    /// ```
    @discardableResult
    public func transaction<T: Sendable>(
        _ options: TransactionOptions = TransactionOptions(),
        _ body: @Sendable (isolated PostgresConnection) async throws -> T
    ) async throws -> T {
        try await settleStream()
        if let token = transactionToken {
            guard TransactionContext.tokens.contains(token) else { throw Self.sharedTransactionMisuse }
            savepointCounter += 1
            let savepoint = "bb_savepoint_\(savepointCounter)"
            try await runControl("SAVEPOINT \(savepoint)")
            do {
                let value = try await body(self)
                try await runControl("RELEASE SAVEPOINT \(savepoint)")
                return value
            } catch {
                if !isBroken, isInTransaction {
                    _ = try? await runControl("ROLLBACK TO SAVEPOINT \(savepoint)", ignoringCancellation: true)
                    _ = try? await runControl("RELEASE SAVEPOINT \(savepoint)", ignoringCancellation: true)
                }
                throw error
            }
        }
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before the transaction began", sqlState: "57014")
        }
        let token = TransactionContext.nextToken()
        // Other tasks' pipelined statements finish first: BEGIN must not wrap them.
        await waitForQuiet()
        transactionToken = token
        defer { transactionToken = nil }
        do {
            try await runControl(options.beginStatement)
            let value = try await TransactionContext.$tokens.withValue(TransactionContext.tokens.union([token])) {
                try await body(self)
            }
            let tag = try await runControl("COMMIT")
            if tag == "ROLLBACK" {
                throw PostgresError(
                    kind: .inFailedTransaction,
                    message: "the transaction was rolled back at COMMIT: a statement inside it failed and its error was caught; nothing was saved",
                    sqlState: "25P02")
            }
            return value
        } catch {
            if !isBroken, isInTransaction { _ = try? await runControl("ROLLBACK", ignoringCancellation: true) }
            throw error
        }
    }

    /// Runs a transaction-control statement (text format, unnamed: nothing to cache).
    @discardableResult
    func runControl(_ text: String, ignoringCancellation: Bool = false) async throws -> String {
        let rendered = RenderedSQL(controlText: text)
        let results = try await observer.observe(ObservedStatement(text: text, parameterCount: 0), server: server) {
            try await perform(
                .extended([.executeUnnamed(statement: rendered, resultFormat: .text)]), text: text, timeout: nil,
                ignoringCancellation: ignoringCancellation)
        }
        return results.last?.commandTag ?? ""
    }

    /// Returns once nothing is in flight on this connection.
    func waitForQuiet() async {
        await waitUntilIdle()
    }

    static let sharedTransactionMisuse = PostgresError(
        kind: .misuse,
        message: "this connection is inside a transaction owned by another task; give each task its own connection (use PostgresPool)")

    /// Refuses a statement from a task that does not own the open transaction, and settles an
    /// open stream first.
    func checkOwnership() async throws {
        if let token = transactionToken, !TransactionContext.tokens.contains(token) {
            throw Self.sharedTransactionMisuse
        }
        try await settleStream()
    }
}

/// Which transactions the current task owns, so that another task sharing the connection
/// cannot slip statements into them.
enum TransactionContext {
    @TaskLocal static var tokens: Set<UInt64> = []
    private static let counter = Atomic<UInt64>(0)
    static func nextToken() -> UInt64 { counter.add(1, ordering: .relaxed).newValue }
}

/// How a transaction begins.
///
/// ```swift
/// try await connection.transaction(.init(isolation: .repeatableRead, readOnly: true)) { c in ... }
/// ```
public struct TransactionOptions: Sendable {
    /// Transaction isolation levels.
    ///
    /// ```swift
    /// try await connection.transaction(.init(isolation: .serializable)) { _ in }
    /// ```
    public enum IsolationLevel: String, Sendable {
        case readCommitted = "READ COMMITTED"
        case repeatableRead = "REPEATABLE READ"
        case serializable = "SERIALIZABLE"
    }

    /// `nil` uses the server default (`READ COMMITTED` unless configured otherwise).
    public var isolation: IsolationLevel?
    public var readOnly: Bool
    /// `READ WRITE` even where `default_transaction_read_only` is on.
    public var readWrite: Bool
    /// `DEFERRABLE` (only meaningful for serializable read-only transactions).
    public var deferrable: Bool

    public init(isolation: IsolationLevel? = nil, readOnly: Bool = false, readWrite: Bool = false, deferrable: Bool = false) {
        self.isolation = isolation
        self.readOnly = readOnly
        self.readWrite = readWrite && !readOnly
        self.deferrable = deferrable
    }

    var beginStatement: String {
        var text = "BEGIN"
        if let isolation { text += " ISOLATION LEVEL \(isolation.rawValue)" }
        text += readOnly ? " READ ONLY" : (readWrite ? " READ WRITE" : "")
        text += deferrable ? " DEFERRABLE" : ""
        return text
    }
}

extension RenderedSQL {
    /// A statement of ours with no parameters (BEGIN, COMMIT, SAVEPOINT bb_savepoint_3).
    init(controlText: String) {
        self.init(text: controlText, types: [], buffer: [0], offsets: [], lengths: [])
        cacheKey = StatementKey(text: controlText, types: [])
    }
}
