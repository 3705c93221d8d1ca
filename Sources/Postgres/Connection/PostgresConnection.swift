import Foundation
import Synchronization

/// One PostgreSQL session over libpq.
///
/// The connection is an actor whose executor is one of the library's I/O threads (an
/// `EventLoop`): libpq runs in non-blocking mode on that thread, which serves many connections,
/// so no thread is ever blocked on the network and no two threads ever touch one libpq
/// connection. Statements from different tasks on one connection are pipelined: each goes out
/// as soon as it is called, with its own sync point, and each caller gets exactly its own
/// results. Cancelling the task that awaits a statement cancels it on the server when that is
/// safe (see `ConnectionStateMachine.interrupt`), and every statement can have a deadline.
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
    nonisolated let loop: EventLoop
    nonisolated let core: ConnectionDriver
    /// The connection's I/O thread.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// The I/O thread this connection runs on, as a task executor. A task that prefers it
    /// runs its own code on that thread too, so each call into the connection needs no hop
    /// between threads (the fastest way to drive one connection from one task).
    ///
    /// ```swift
    /// try await withTaskExecutorPreference(connection.taskExecutor) {
    ///     for id in ids { _ = try await connection.query("SELECT * FROM events WHERE id = \(id)") }
    /// }
    /// ```
    public nonisolated var taskExecutor: any TaskExecutor { loop.taskExecutor }

    nonisolated let configuration: PostgresConfiguration
    /// Logs, metrics and spans (see QueryObserver).
    nonisolated let observer: QueryObserver
    /// Where the connection went, for spans (set once connected; read from any thread: a
    /// pool's shared statement is observed on its caller's, see `queryFromCaller`).
    nonisolated var server: ServerIdentity { identity.withLock { $0 } }
    private nonisolated let identity = Mutex(ServerIdentity(address: "", port: nil, database: ""))

    // Statement cache (see StatementCache.swift)
    var statements: [StatementKey: PreparedStatement] = [:]
    var statementCounter = 0
    var useCounter = 0
    var pendingDeallocations: [String] = []
    /// Someone ran PREPARE: a reset must DEALLOCATE ALL and forget the cache.
    var userPrepared = false

    // An open single-row stream (see RowStream.swift).
    var openStream: StreamHandle?

    // Transactions (see Transactions.swift)
    var transactionToken: UInt64?
    var savepointCounter = 0

    private static let connectionCounter = Atomic<Int>(0)
    private static let requestCounter = Atomic<UInt64>(0)
    /// A process-unique number for this connection, for logs.
    public nonisolated let id: Int

    private init(configuration: PostgresConfiguration, loop: EventLoop) {
        id = Self.connectionCounter.add(1, ordering: .relaxed).newValue
        self.loop = loop
        // The notice handler lives in the core only, which lets it go on close: what it
        // captured does not outlive the connection's use.
        var kept = configuration
        kept.noticeHandler = nil
        self.configuration = kept
        observer = QueryObserver(configuration: configuration, connectionID: id)
        core = ConnectionDriver(loop: loop, secrets: configuration.secrets)
        if let handler = configuration.noticeHandler { core.noticeBox = NoticeBox(handler: handler) }
    }

    deinit {
        let core = self.core
        loop.execute { core.close() }
    }

    // MARK: Opening

    /// Opens a connection.
    ///
    /// Fails with `PostgresError.Kind.connectionFailure` within the connect timeout (10 s unless
    /// configured) when the server cannot be reached or refuses the credentials; the message
    /// never holds the password.
    ///
    /// ```swift
    /// let connection = try await PostgresConnection.connect(.environment())   // PG* variables
    /// ```
    public static func connect(_ configuration: PostgresConfiguration) async throws -> PostgresConnection {
        try configuration.validate()
        let loop = EventLoopGroup.shared.next()
        guard loop.isUsable else {
            throw PostgresError(kind: .connectionFailure, message: "the I/O thread could not be set up (out of file descriptors?)")
        }
        let connection = PostgresConnection(configuration: configuration, loop: loop)
        try await connection.open(deadline: .now + .seconds(configuration.effectiveConnectTimeout))
        return connection
    }

    /// Opens a connection from a URL or conninfo string.
    public static func connect(_ connectionString: String, connectTimeout: Int? = nil) async throws -> PostgresConnection {
        var configuration = PostgresConfiguration(connectionString)
        configuration.connectTimeout = connectTimeout
        return try await connect(configuration)
    }

    /// Opens with a deadline of its own (a pool's acquire deadline may be shorter), on `loop`
    /// (by default the caller's own I/O thread, if it runs on one).
    static func connect(_ configuration: PostgresConfiguration, deadline: ContinuousClock.Instant, on loop: EventLoop? = nil) async throws -> PostgresConnection {
        try configuration.validate()
        let connection = PostgresConnection(configuration: configuration, loop: loop ?? EventLoopGroup.shared.currentOrNext())
        let own = ContinuousClock.now + .seconds(configuration.effectiveConnectTimeout)
        try await connection.open(deadline: min(deadline, own))
        return connection
    }

    private func open(deadline: ContinuousClock.Instant) async throws {
        let (keywords, values) = configuration.connectionParameters()
        let target = configuration.redactedTarget
        let start = ContinuousClock.now
        do {
            let core = self.core
            let timeout = ContinuousClock.now.duration(to: deadline)
            try await withCheckedThrowingContinuation { continuation in
                core.connect(keywords: keywords, values: values, timeout: timeout, description: target, continuation: continuation)
            }
            try await prepareSession(timeout: .seconds(configuration.effectiveConnectTimeout))
        } catch {
            core.close()
            observer.connectFailed(target: target, error: error)
            throw error
        }
        let reached = core.serverIdentity
        identity.withLock { $0 = reached }
        observer.connected(server, backendPID: core.backendPID, serverVersion: core.serverVersion, duration: start.duration(to: .now))
    }

    // MARK: State

    /// Whether the connection is closed or lost. A broken connection never recovers; open a new one.
    public nonisolated var isBroken: Bool { core.mirror.broken.load(ordering: .acquiring) }

    /// The server process id (`pg_backend_pid()`), for `pg_cancel_backend` and logs.
    public var backendPID: Int32 { core.backendPID }

    /// The server version as an integer: 150018 for 15.18.
    public var serverVersion: Int { core.serverVersion }

    /// A setting the server reports to the client (`ParameterStatus`): `server_version`,
    /// `standard_conforming_strings`, `TimeZone`, `DateStyle`, `IntervalStyle`,
    /// `client_encoding`, `application_name`, `is_superuser`, `session_authorization`, … `nil`
    /// if not reported.
    ///
    /// ```swift
    /// let strings = await connection.parameterStatus("standard_conforming_strings")   // "on"
    /// ```
    public func parameterStatus(_ name: String) -> String? { core.parameterStatus(name) }

    /// Whether a connection pooler sits between this client and the server (told by
    /// ``PostgresConfiguration/pooler``, or found when the connection opened). Behind one the
    /// connection keeps nothing in the session: no prepared statements, no `SET`, no `LISTEN`.
    ///
    /// ```swift
    /// if await connection.isBehindPooler { print("through PgBouncer") }
    /// ```
    public internal(set) var isBehindPooler = false

    /// Whether a transaction is open on the server (including an aborted one).
    public var isInTransaction: Bool {
        core.transactionStatus.isInTransaction
    }

    /// Closes the connection; statements in flight fail. Later calls fail with `connectionFailure`.
    public func close() {
        if !core.isClosedForGood { observer.closed(backendPID: core.backendPID) }
        core.close()
        statements.removeAll()
        openStream?.closed(reason: "its connection was closed")
        openStream = nil
    }

    // MARK: Sending

    static func nextRequestID() -> UInt64 { requestCounter.add(1, ordering: .relaxed).newValue }

    /// The caller's task was cancelled before its statement left: nothing of it ran.
    static var cancelledBeforeSending: PostgresError {
        var error = PostgresError(kind: .queryCanceled, message: "the task was cancelled before the statement was sent", sqlState: "57014")
        error.lostConnectionOutcome = .safe
        return error
    }

    /// Sends one request and waits for its results. Cancelling the task interrupts it (see
    /// `ConnectionStateMachine.interrupt`); `timeout` (else the configuration's `queryTimeout`),
    /// or what is left of the task's `PostgresDeadline` when that is shorter, is its deadline.
    /// `ignoringCancellation`: for clean-up (ROLLBACK, reset) that must run even in a cancelled
    /// task, or one past its deadline.
    func perform(_ kind: Request.Kind, text: String, timeout: Duration?, ignoringCancellation: Bool = false) async throws -> [ResultStorage] {
        let request = Request(id: Self.nextRequestID(), kind: kind, text: text)
        let core = self.core
        if ignoringCancellation {
            return try await submitAndWait(request, deadline: timeout ?? configuration.queryTimeout)
        }
        let deadline = PostgresDeadline.bounding(timeout ?? configuration.queryTimeout)
        if Task.isCancelled { throw Self.cancelledBeforeSending }
        let id = request.id
        let loop = self.loop
        // The operation uses `self`, so it stays isolated to this actor, on its I/O thread
        // (a closure that did not would run on the global pool).
        return try await withTaskCancellationHandler { [self] in
            try await self.submitAndWait(request, deadline: deadline)
        } onCancel: {
            loop.execute { core.interrupt(id, .cancelled) }
        }
    }

    private func submitAndWait(_ request: Request, deadline: Duration?) async throws -> [ResultStorage] {
        try await withCheckedThrowingContinuation { continuation in
            request.continuation = continuation
            core.submit(request, deadline: deadline)
        }
    }

    /// Returns when request `id` has completed (at once if it has).
    func waitUntilComplete(_ id: UInt64) async {
        let core = self.core
        await withCheckedContinuation { core.whenComplete(id, $0) }
    }

    /// Returns once every request sent or queued so far has completed.
    func waitUntilIdle() async {
        while let last = core.lastPendingID { await waitUntilComplete(last) }
    }

    /// Whether the caller runs on this connection's I/O thread (for tests).
    func onLoopThread() -> Bool { loop.inLoop }
}

extension PostgresConnection {
    /// One round trip when the connection opens (the simple protocol, so nothing is prepared
    /// on a server session that may be shared): the server's process id and the settings text
    /// results are read with.
    ///
    /// - Whether a pooler sits in between (``PostgresConfiguration/Pooler/detect``): a pooler
    ///   hands out cancel keys of its own, so the pid libpq was given differs from the
    ///   server's `pg_backend_pid()`.
    /// - Directly, settings that differ from the pinned ones are pinned
    ///   (`SessionSettings.pinSQL`); most servers need nothing.
    /// - Behind a pooler nothing can be `SET` for the session (it would reach other clients'
    ///   sessions, or be lost), so wrong settings are refused by name. `DateStyle` is the
    ///   exception: PgBouncer keeps it per client, like `client_encoding`.
    func prepareSession(timeout: Duration) async throws {
        let sql = "SELECT pg_backend_pid(), current_setting('DateStyle'), current_setting('IntervalStyle'), current_setting('bytea_output'), current_setting('extra_float_digits')"
        let results = try await perform(.simple(sql), text: sql, timeout: timeout)
        guard let result = results.first, result.rowCount == 1, result.columns.count == 5 else {
            throw PostgresError(kind: .protocolViolation, message: "the server did not report its process id and output settings: is this a PostgreSQL server?")
        }
        let values = (0..<5).map { column in result.cell(row: 0, column: column).bytes.map { String(decoding: $0, as: UTF8.self) } ?? "" }
        switch configuration.pooler {
        case .none: isBehindPooler = false
        case .transaction: isBehindPooler = true
        case .detect:
            guard let pid = Int32(values[0]) else {
                throw PostgresError(kind: .protocolViolation, message: "pg_backend_pid() did not answer with a process id: is this a PostgreSQL server?")
            }
            isBehindPooler = pid != core.backendPID
        }
        // Floats read back exactly with extra_float_digits 1 or more from PostgreSQL 12 on
        // (shortest exact output); before, only at 3.
        let floatDigits = Int(values[4]) ?? 0
        var wrong: [String] = []
        if values[2] != "postgres" { wrong.append("IntervalStyle = \(values[2]) (needs postgres)") }
        if values[3] != "hex" { wrong.append("bytea_output = \(values[3]) (needs hex)") }
        if serverVersion >= 120000 ? floatDigits < 1 : floatDigits < 3 { wrong.append("extra_float_digits = \(values[4]) (needs \(serverVersion >= 120000 ? 1 : 3) or more)") }
        let isoDates = values[1].hasPrefix("ISO")
        if !isBehindPooler {
            if !wrong.isEmpty || !isoDates {
                _ = try await perform(.simple(SessionSettings.pinSQL), text: SessionSettings.pinSQL, timeout: timeout)
            }
            return
        }
        guard wrong.isEmpty else {
            throw PostgresError(
                kind: .invalidConfiguration,
                message: "behind a connection pooler this client cannot pin the output settings it reads text results with, and the server has \(wrong.joined(separator: ", ")). Set them for the role (ALTER ROLE app SET IntervalStyle = postgres; …), or connect to PostgreSQL directly")
        }
        if !isoDates {
            _ = try await perform(.simple("SET DateStyle TO ISO"), text: "SET DateStyle TO ISO", timeout: timeout)
        }
    }
}

/// Settings text results depend on, set at connect and after every reset, so decoding never
/// depends on how a server is configured.
enum SessionSettings {
    static let pinSQL = "SET DateStyle TO ISO; SET IntervalStyle TO postgres; SET bytea_output TO hex; SET extra_float_digits TO 3"
}
