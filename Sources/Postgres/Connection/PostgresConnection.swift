import CLibPQ
import Foundation
import Synchronization

/// One PostgreSQL session over libpq.
///
/// The connection is an actor that runs on its own thread: libpq's blocking calls never occupy
/// Swift's cooperative pool, and no two tasks ever use the libpq connection at once. Cancelling
/// the task that awaits a query cancels the query on the server.
///
/// Statements are prepared once per connection and cached by SQL text; results come back in
/// binary format.
///
/// ```swift
/// let connection = try await PostgresConnection.connect(PostgresConfiguration("postgresql://localhost/babybasics"))
/// let rows = try await connection.query("SELECT id, name FROM children WHERE name = \(name)")
/// for row in rows {
///     let (id, name) = try row.decode((UUID, String).self)
/// }
/// await connection.close()
/// ```
public actor PostgresConnection {
    private let executor: ConnectionExecutor
    /// The connection's dedicated thread.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    private let configuration: PostgresConfiguration
    private var handle: ConnectionHandle?
    private var secrets: [String]
    let cancelHandle = CancelHandle()
    let brokenFlag = Atomic<Bool>(false)

    // Statement cache
    private var statements: [String: PreparedStatement] = [:]
    private var statementCounter = 0
    var useCounter = 0

    // An open single-row stream (see RowStream.swift), and its statement's cache key.
    var openStream: StreamHandle?

    // Transactions
    private var transactionToken: UInt64?
    private var savepointCounter = 0

    private static let connectionCounter = Atomic<Int>(0)
    /// A process-unique number for this connection, for logs.
    public nonisolated let id: Int

    private init(configuration: PostgresConfiguration) {
        id = Self.connectionCounter.add(1, ordering: .relaxed).newValue
        executor = ConnectionExecutor(name: "postgres-\(id)")
        self.configuration = configuration
        secrets = configuration.secrets
    }

    deinit {
        cancelHandle.invalidate()
        executor.shutdown()
    }

    /// Opens a connection.
    ///
    /// Fails with `PostgresError.Kind.connectionFailure` within the connect timeout when the
    /// server cannot be reached or refuses the credentials; the message never holds the password.
    ///
    /// ```swift
    /// let connection = try await PostgresConnection.connect(.environment())   // PG* variables
    /// ```
    public static func connect(_ configuration: PostgresConfiguration) async throws -> PostgresConnection {
        try configuration.validate()
        let connection = PostgresConnection(configuration: configuration)
        try await connection.open()
        return connection
    }

    /// Opens a connection from a URL or conninfo string.
    public static func connect(_ connectionString: String, connectTimeout: Int? = nil) async throws -> PostgresConnection {
        var configuration = PostgresConfiguration(connectionString)
        configuration.connectTimeout = connectTimeout
        return try await connect(configuration)
    }

    private func open() throws {
        var keywords: [String] = []
        var values: [String] = []
        if let string = configuration.connectionString, !string.isEmpty {
            keywords.append("dbname")
            values.append(string)
        }
        if let timeout = configuration.connectTimeout {
            keywords.append("connect_timeout")
            values.append(String(max(timeout, 1)))
        }
        if let name = configuration.applicationName {
            keywords.append("application_name")
            values.append(name)
        }
        if let database = configuration.database {
            // Only the first dbname is expanded as a URL/conninfo; this one is a plain name.
            keywords.append("dbname")
            values.append(database)
        }
        keywords.append("fallback_application_name")
        values.append("babybasics")
        keywords.append("client_encoding")
        values.append("UTF8")
        if let options = configuration.startupOptions {
            keywords.append("options")
            values.append(options)
        }

        let connection = withCStringArray(keywords) { keywordPointers in
            withCStringArray(values) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let connection else {
            throw PostgresError(kind: .connectionFailure, message: "libpq could not allocate a connection (out of memory)")
        }
        if let password = PQpass(connection).map({ String(cString: $0) }), !password.isEmpty {
            secrets.append(password)
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Redaction.redact(String(cString: PQerrorMessage(connection)), secrets: secrets)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(connection)
            var error = PostgresError(
                kind: .connectionFailure,
                message: "could not connect to PostgreSQL: \(message)")
            error.hint = "check the host, port, user and password (URL, conninfo or PG* variables), and that the server is running"
            throw error
        }
        let handle = ConnectionHandle(connection: connection, noticeHandler: configuration.noticeHandler)
        self.handle = handle
        cancelHandle.attach(connection)
    }

    // MARK: State

    /// Whether the connection is closed or lost. A broken connection never recovers; open a new one.
    public nonisolated var isBroken: Bool { brokenFlag.load(ordering: .acquiring) }

    /// The server process id (`pg_backend_pid()`), for `pg_cancel_backend` and logs.
    public var backendPID: Int32 { handle.map { PQbackendPID($0.connection) } ?? 0 }

    /// The server version as an integer: 150018 for 15.18.
    public var serverVersion: Int { handle.map { Int(PQserverVersion($0.connection)) } ?? 0 }

    /// A setting the server reports to the client (`ParameterStatus`): `server_version`,
    /// `standard_conforming_strings`, `TimeZone`, `DateStyle`, `client_encoding`,
    /// `application_name`, `is_superuser`, `session_authorization`, … `nil` if not reported.
    ///
    /// ```swift
    /// let strings = await connection.parameterStatus("standard_conforming_strings")   // "on"
    /// ```
    public func parameterStatus(_ name: String) -> String? {
        guard let handle, let value = PQparameterStatus(handle.connection, name) else { return nil }
        return String(cString: value)
    }

    /// Whether a transaction is open on the server (including an aborted one).
    public var isInTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle.connection)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    /// Closes the connection. Later calls fail with `connectionFailure`.
    public func close() {
        cancelHandle.invalidate()
        handle = nil
        statements.removeAll()
        brokenFlag.store(true, ordering: .releasing)
    }

    func liveConnection() throws(PostgresError) -> OpaquePointer {
        guard let handle, !isBroken else {
            throw PostgresError(kind: .connectionFailure, message: "the connection is closed; open a new one (a pool does this for you)")
        }
        return handle.connection
    }

    // MARK: Queries

    /// Runs a statement and returns its rows.
    ///
    /// ```swift
    /// let rows = try await connection.query("SELECT id FROM users WHERE email = \(email)")
    /// ```
    public func query(_ sql: SQL) async throws -> PostgresRows {
        try checkOwnership()
        let rendered = try sql.render(quoteIdentifier: escapeIdentifier)
        return try await runCancellable { try self.runPrepared(rendered) }
    }

    /// Runs a statement and returns the number of rows it affected.
    ///
    /// ```swift
    /// let changed = try await connection.execute("UPDATE users SET display_name = \(name) WHERE id = \(id)")
    /// ```
    @discardableResult
    public func execute(_ sql: SQL) async throws -> Int {
        try await query(sql).affectedRows
    }

    /// Every row as a `Decodable` struct.
    ///
    /// ```swift
    /// let users = try await connection.fetchAll(User.self, "SELECT * FROM users ORDER BY email")
    /// ```
    public func fetchAll<T: Decodable & Sendable>(_ type: T.Type, _ sql: SQL) async throws -> [T] {
        try await query(sql).decode(as: type)
    }

    /// The first row as a `Decodable` struct, or `nil` when there is none.
    ///
    /// ```swift
    /// let user = try await connection.fetchOne(User.self, "SELECT * FROM users WHERE id = \(id)")
    /// ```
    public func fetchOne<T: Decodable & Sendable>(_ type: T.Type, _ sql: SQL) async throws -> T? {
        try await query(sql).first?.decode(as: type)
    }

    /// The first column of the first row, or `nil` when there is no row (or it is NULL).
    ///
    /// ```swift
    /// let count = try await connection.fetchValue(Int.self, "SELECT count(*) FROM events") ?? 0
    /// ```
    public func fetchValue<T: PostgresDecodable & Sendable>(_ type: T.Type, _ sql: SQL) async throws -> T? {
        guard let row = try await query(sql).first else { return nil }
        return try row.decode(T?.self, at: 0)
    }

    /// Runs SQL text exactly as given, through the simple query protocol: several statements
    /// separated by semicolons, no parameters. For migration files and other trusted scripts
    /// only; never pass it text built from user input.
    ///
    /// ```swift
    /// try await connection.executeUnsafeRawSQL(try String(contentsOfFile: "Migrations/0001_users.sql"))
    /// ```
    @discardableResult
    public func executeUnsafeRawSQL(_ text: String) async throws -> String {
        try checkOwnership()
        return try await runCancellable {
            let connection = try self.liveConnection()
            return try self.check(PQexec(connection, text), query: text).commandTag
        }
    }

    /// Quotes a name with libpq's `PQescapeIdentifier` (used by `\(identifier:)`).
    func escapeIdentifier(_ name: String) throws -> String {
        let connection = try liveConnection()
        let utf8 = Array(name.utf8)
        guard !utf8.contains(0) else {
            throw PostgresError(kind: .invalidParameter, message: "an identifier contains a NUL character")
        }
        guard let escaped = PQescapeIdentifier(connection, name, utf8.count) else {
            throw PostgresError(kind: .invalidParameter, message: "cannot quote identifier: " + lastErrorMessage(connection))
        }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    // MARK: Execution

    struct PreparedStatement {
        let name: String
        let resultFormat: PostgresFormat
        var lastUse: Int
        /// The cache is off: the statement is sent with its text each time (PQexecParams).
        var isUnnamed: Bool { name.isEmpty }
    }

    func runCancellable<T>(_ body: () throws -> T) async throws -> T {
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before the statement was sent")
        }
        let handle = cancelHandle
        let ticket = handle.begin()
        defer { handle.end(ticket) }
        // The operation captures the isolated `self`, so it is isolated to this actor and runs
        // on the connection's thread, holding the actor for its whole duration. (A closure that
        // captured only `body` would be nonisolated: it would run on the global pool while other
        // tasks used this libpq connection.)
        return try await withTaskCancellationHandler { [self] in
            try self.runIsolated(body)
        } onCancel: {
            handle.cancel(ticket)
        }
    }

    /// Runs `body` synchronously on the connection's thread.
    private func runIsolated<T>(_ body: () throws -> T) throws -> T {
        executor.preconditionOnThread()
        return try body()
    }

    /// Whether the caller runs on this connection's dedicated thread (for tests).
    func onDedicatedThread() -> Bool { executor.isCurrent }

    /// Whether a `runCancellable` body runs on the dedicated thread (for tests).
    func bodyOnDedicatedThread() async throws -> Bool {
        let executor = self.executor
        return try await runCancellable { executor.isCurrent }
    }

    private func runPrepared(_ rendered: RenderedSQL) throws -> PostgresRows {
        let connection = try liveConnection()
        let idleBefore = PQtransactionStatus(connection) == PQTRANS_IDLE
        var statement = try preparedStatement(for: rendered)
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before the statement ran")
        }
        do {
            return try executePrepared(statement, rendered)
        } catch let error as PostgresError where Self.isStalePlan(error) {
            // The server dropped or invalidated the plan (DEALLOCATE, DISCARD, ALTER TABLE).
            statements[rendered.cacheKey] = nil
            guard idleBefore else { throw error } // the transaction is aborted: let the caller retry it
            statement = try preparedStatement(for: rendered)
            return try executePrepared(statement, rendered)
        }
    }

    /// Forgets a cached statement the server no longer accepts.
    func dropCachedStatement(_ key: String) { statements[key] = nil }

    static func isStalePlan(_ error: PostgresError) -> Bool {
        error.sqlState == "26000" || (error.sqlState == "0A000" && error.sourceFunction == "RevalidateCachedQuery")
    }

    /// The prepared statement for `rendered`, from the cache or prepared now. Entries used at
    /// or after `keepingFrom` (a `useCounter` value) are never evicted to make room: a pipeline
    /// passes its batch's start so that it cannot evict its own statements.
    func preparedStatement(for rendered: RenderedSQL, keepingFrom floor: Int = 0) throws -> PreparedStatement {
        useCounter += 1
        let key = rendered.cacheKey
        if var cached = statements[key] {
            cached.lastUse = useCounter
            statements[key] = cached
            return cached
        }
        let capacity = configuration.statementCacheCapacity
        // Without a cache, nothing is prepared ahead: each statement goes out as one
        // Parse/Bind/Describe/Execute/Sync exchange (PQexecParams), which a transaction pooler
        // such as PgBouncer cannot split between two server connections. The result types are
        // unknown when the result format must be chosen, so results come back as text, which
        // every decoder reads.
        if capacity <= 0 { return PreparedStatement(name: "", resultFormat: .text, lastUse: useCounter) }
        let connection = try liveConnection()
        if statements.count >= capacity { evictLeastRecentlyUsed(connection, keepingFrom: floor) }
        statementCounter += 1
        let name = "bb_\(statementCounter)"
        let prepared = rendered.types.withUnsafeBufferPointer { types in
            PQprepare(connection, name, rendered.text, Int32(types.count), types.baseAddress)
        }
        _ = try check(prepared, query: rendered.text)
        let described = try check(PQdescribePrepared(connection, name), query: rendered.text)
        let binary = described.columns.allSatisfy { PostgresType.binaryDecodable.contains($0.type) }
        let statement = PreparedStatement(name: name, resultFormat: binary ? .binary : .text, lastUse: useCounter)
        statements[key] = statement
        return statement
    }

    private func evictLeastRecentlyUsed(_ connection: OpaquePointer, keepingFrom floor: Int) {
        guard PQtransactionStatus(connection) != PQTRANS_INERROR,
              let oldest = statements.filter({ floor == 0 || $0.value.lastUse < floor })
                .min(by: { $0.value.lastUse < $1.value.lastUse }) else { return }
        statements[oldest.key] = nil
        if let result = PQexec(connection, "DEALLOCATE \(oldest.value.name)") { PQclear(result) }
    }

    private func executePrepared(_ statement: PreparedStatement, _ rendered: RenderedSQL) throws -> PostgresRows {
        let connection = try liveConnection()
        let result = rendered.withParameters { count, values, lengths, formats -> OpaquePointer? in
            guard !statement.isUnnamed else {
                return rendered.types.withUnsafeBufferPointer { types in
                    PQexecParams(connection, rendered.text, count, types.baseAddress, values, lengths, formats, statement.resultFormat.rawValue)
                }
            }
            return PQexecPrepared(connection, statement.name, count, values, lengths, formats, statement.resultFormat.rawValue)
        } ?? nil
        return PostgresRows(storage: try check(result, query: rendered.text))
    }

    /// Turns a libpq result into rows or a typed error. Never ignores a status.
    func check(_ result: OpaquePointer?, query: String) throws -> ResultStorage {
        guard let connection = handle?.connection else {
            if let result { PQclear(result) }
            throw PostgresError(kind: .connectionFailure, message: "the connection is closed")
        }
        guard let result else {
            throw connectionError(connection, query: query)
        }
        let status = PQresultStatus(result)
        switch status {
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY, PGRES_SINGLE_TUPLE:
            return ResultStorage(result: result)
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            PQclear(result)
            abandonCopy(connection)
            var error = PostgresError(kind: .misuse, message: "COPY cannot run through query(); the COPY was aborted")
            error.query = query
            throw error
        default:
            let error = makeError(result, connection: connection, query: query)
            PQclear(result)
            if PQstatus(connection) == CONNECTION_BAD { brokenFlag.store(true, ordering: .releasing) }
            throw error
        }
    }

    /// Leaves COPY state so the connection stays usable.
    func abandonCopy(_ connection: OpaquePointer) {
        _ = PQputCopyEnd(connection, "COPY is not supported through query()")
        var buffer: UnsafeMutablePointer<CChar>?
        while PQgetCopyData(connection, &buffer, 0) > 0 {
            if let buffer { PQfreemem(buffer) }
            buffer = nil
        }
        while let pending = PQgetResult(connection) { PQclear(pending) }
    }

    func lastErrorMessage(_ connection: OpaquePointer) -> String {
        Redaction.redact(String(cString: PQerrorMessage(connection)), secrets: secrets)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func connectionError(_ connection: OpaquePointer, query: String) -> PostgresError {
        let bad = PQstatus(connection) == CONNECTION_BAD
        if bad { brokenFlag.store(true, ordering: .releasing) }
        var error = PostgresError(
            kind: bad ? .connectionFailure : .protocolViolation,
            message: bad ? "the connection to the server was lost: \(lastErrorMessage(connection))" : lastErrorMessage(connection))
        error.query = query
        if bad { error.hint = "the session is gone; run the transaction again on a new connection (a pool does this for you)" }
        return error
    }

    func makeError(_ result: OpaquePointer, connection: OpaquePointer, query: String) -> PostgresError {
        func field(_ code: Character) -> String? {
            guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return nil }
            return String(cString: value)
        }
        let sqlState = field("C")
        let lost = PQstatus(connection) == CONNECTION_BAD
        var kind = sqlState.map(PostgresError.kind(forSQLState:)) ?? (lost ? .connectionFailure : .protocolViolation)
        if lost && kind == .otherServerError { kind = .connectionFailure }
        var message = field("M") ?? String(cString: PQresultErrorMessage(result))
        message = Redaction.redact(message.trimmingCharacters(in: .whitespacesAndNewlines), secrets: secrets)
        if lost && !message.contains("connection") {
            message += " (the connection to the server was lost)"
        }
        var error = PostgresError(kind: kind, message: message, sqlState: sqlState)
        error.severity = field("V") ?? field("S")
        error.detail = field("D")
        error.hint = field("H")
        error.position = field("P").flatMap { Int($0) }
        error.internalPosition = field("p").flatMap { Int($0) }
        error.internalQuery = field("q")
        error.context = field("W")
        error.schema = field("s")
        error.table = field("t")
        error.column = field("c")
        error.dataType = field("d")
        error.constraint = field("n")
        error.sourceFile = field("F")
        error.sourceLine = field("L").flatMap { Int($0) }
        error.sourceFunction = field("R")
        error.query = query
        return error
    }

    /// Gets a returned connection ready for the next borrower, ignoring task cancellation:
    /// drains an open stream, rolls back a transaction left open. `false` if it is unusable.
    func resetForReuse() -> Bool {
        guard !isBroken else { return false }
        closeStream()
        if isInTransaction { return (try? runControl("ROLLBACK")) != nil && !isBroken }
        return !isBroken
    }

    /// A round trip that ignores task cancellation (the pool's health check).
    func ping() -> Bool { (try? runControl("")) != nil && !isBroken }

    /// Runs a transaction-control statement. Not cancellable, so a ROLLBACK after a
    /// cancellation still goes through.
    @discardableResult
    func runControl(_ text: String) throws -> String {
        let connection = try liveConnection()
        return try check(PQexec(connection, text), query: text).commandTag
    }

    // MARK: Transactions

    /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it throws (or the
    /// task is cancelled). Called inside another `transaction`, it opens a savepoint instead, so
    /// an inner failure rolls back only the inner work.
    ///
    /// `body` runs on the connection's thread, so its statements need no hop.
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
        try settleStream()
        if let token = transactionToken {
            guard TransactionContext.tokens.contains(token) else { throw Self.sharedTransactionMisuse }
            savepointCounter += 1
            let savepoint = "bb_savepoint_\(savepointCounter)"
            try runControl("SAVEPOINT \(savepoint)")
            do {
                let value = try await body(self)
                try runControl("RELEASE SAVEPOINT \(savepoint)")
                return value
            } catch {
                if !isBroken, isInTransaction {
                    _ = try? runControl("ROLLBACK TO SAVEPOINT \(savepoint)")
                    _ = try? runControl("RELEASE SAVEPOINT \(savepoint)")
                }
                throw error
            }
        }
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before the transaction began")
        }
        let token = TransactionContext.nextToken()
        try runControl(options.beginStatement)
        transactionToken = token
        defer { transactionToken = nil }
        do {
            let value = try await TransactionContext.$tokens.withValue(TransactionContext.tokens.union([token])) {
                try await body(self)
            }
            let tag = try runControl("COMMIT")
            if tag == "ROLLBACK" {
                throw PostgresError(
                    kind: .inFailedTransaction,
                    message: "the transaction was rolled back at COMMIT: a statement inside it failed and its error was caught; nothing was saved",
                    sqlState: "25P02")
            }
            return value
        } catch {
            if !isBroken, isInTransaction { _ = try? runControl("ROLLBACK") }
            throw error
        }
    }

    private static let sharedTransactionMisuse = PostgresError(
        kind: .misuse,
        message: "this connection is inside a transaction owned by another task; give each task its own connection (use PostgresPool)")

    func checkOwnership() throws(PostgresError) {
        if let token = transactionToken, !TransactionContext.tokens.contains(token) {
            throw Self.sharedTransactionMisuse
        }
        try settleStream()
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

/// Owns the libpq `PGconn` and its notice receiver; `PQfinish` on deinit.
final class ConnectionHandle: @unchecked Sendable {
    let connection: OpaquePointer
    private let noticeBox: NoticeBox?

    init(connection: OpaquePointer, noticeHandler: (@Sendable (PostgresNotice) -> Void)?) {
        self.connection = connection
        if let noticeHandler {
            let box = NoticeBox(handler: noticeHandler)
            noticeBox = box
            PQsetNoticeReceiver(connection, { context, result in
                guard let context, let result else { return }
                let box = Unmanaged<NoticeBox>.fromOpaque(context).takeUnretainedValue()
                func field(_ code: Character) -> String {
                    guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return "" }
                    return String(cString: value)
                }
                box.handler(PostgresNotice(severity: field("V"), sqlState: field("C"), message: field("M")))
            }, Unmanaged.passUnretained(box).toOpaque())
        } else {
            noticeBox = nil
            // libpq prints notices to stderr by default; a library must not.
            PQsetNoticeReceiver(connection, { _, _ in }, nil)
        }
    }

    deinit { PQfinish(connection) }
}

final class NoticeBox: Sendable {
    let handler: @Sendable (PostgresNotice) -> Void
    init(handler: @escaping @Sendable (PostgresNotice) -> Void) { self.handler = handler }
}

/// Calls `body` with a NULL-terminated array of C strings.
func withCStringArray<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    return body(duplicates.map { $0.map { UnsafePointer($0) } } + [nil])
}
