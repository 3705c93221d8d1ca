import Foundation

/// Sizes and timeouts of a `PostgresPool`.
///
/// ```swift
/// let options = PoolOptions(minimumConnections: 2, maximumConnections: 8, acquireTimeout: .seconds(5))
/// ```
public struct PoolOptions: Sendable {
    /// Connections kept open even when idle.
    public var minimumConnections: Int
    /// The most connections open at once; further acquires wait.
    public var maximumConnections: Int
    /// How long an acquire waits before failing with `poolTimeout`.
    public var acquireTimeout: Duration
    /// An idle connection older than this is pinged before it is handed out.
    public var healthCheckAfterIdle: Duration

    public init(
        minimumConnections: Int = 0, maximumConnections: Int = 10,
        acquireTimeout: Duration = .seconds(10), healthCheckAfterIdle: Duration = .seconds(30)
    ) {
        self.minimumConnections = max(0, minimumConnections)
        self.maximumConnections = max(1, maximumConnections)
        self.acquireTimeout = acquireTimeout
        self.healthCheckAfterIdle = healthCheckAfterIdle
    }
}

/// A bounded set of connections shared by many tasks.
///
/// Each task gets a connection of its own for the length of a closure. Broken connections
/// (killed backends, restarts) are discarded and replaced; idle ones are health-checked before
/// reuse; `close()` waits for borrowed connections to come back.
///
/// ```swift
/// let pool = PostgresPool(configuration: PostgresConfiguration(url), options: PoolOptions(maximumConnections: 4))
/// let names = try await pool.withConnection { connection in
///     try await connection.query("SELECT name FROM children").decodeColumn(String.self)
/// }
/// try await pool.transaction { connection in
///     try await connection.execute("UPDATE ...")
/// }
/// await pool.close()
/// ```
public actor PostgresPool {
    private let configuration: PostgresConfiguration
    /// The pool's limits.
    public nonisolated let options: PoolOptions

    private var idle: [(connection: PostgresConnection, since: ContinuousClock.Instant)] = []
    private var total = 0
    private var leased = 0
    private var waiters: [(id: UInt64, continuation: CheckedContinuation<PostgresConnection, any Error>)] = []
    private var nextWaiterID: UInt64 = 0
    private var closed = false
    private var drainWaiters: [CheckedContinuation<Void, Never>] = []

    public init(configuration: PostgresConfiguration, options: PoolOptions = PoolOptions()) {
        self.configuration = configuration
        self.options = options
        if options.minimumConnections > 0 {
            Task { await self.replenish() }
        }
    }

    /// Counts for monitoring.
    public var statistics: (idle: Int, inUse: Int, open: Int, waiting: Int) {
        (idle.count, leased, total, waiters.count)
    }

    /// Lends a connection to `body` and takes it back afterwards, whatever happens.
    public nonisolated func withConnection<T: Sendable>(
        _ body: @Sendable (isolated PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await acquire()
        do {
            let value = try await body(connection)
            await release(connection)
            return value
        } catch {
            await release(connection)
            throw error
        }
    }

    /// Runs `body` in a transaction on a pooled connection.
    @discardableResult
    public nonisolated func transaction<T: Sendable>(
        _ options: TransactionOptions = TransactionOptions(),
        _ body: @Sendable (isolated PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            try await connection.transaction(options, body)
        }
    }

    /// One statement on a pooled connection.
    public nonisolated func query(_ sql: SQL) async throws -> PostgresRows {
        try await withConnection { try await $0.query(sql) }
    }

    /// One statement on a pooled connection; returns the affected row count.
    @discardableResult
    public nonisolated func execute(_ sql: SQL) async throws -> Int {
        try await withConnection { try await $0.execute(sql) }
    }

    // MARK: Acquire and release

    private func acquire() async throws -> PostgresConnection {
        guard !closed else { throw Self.closedError }
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before it got a connection")
        }
        while let entry = idle.popLast() {
            if entry.connection.isBroken {
                total -= 1
                continue
            }
            leased += 1
            if entry.since.duration(to: .now) > options.healthCheckAfterIdle {
                let healthy = await entry.connection.ping()
                if !healthy {
                    total -= 1
                    releaseLease()
                    await entry.connection.close()
                    serveWaiters()
                    continue
                }
            }
            return entry.connection
        }
        if total < options.maximumConnections {
            total += 1
            leased += 1
            do {
                return try await PostgresConnection.connect(configuration)
            } catch {
                total -= 1
                releaseLease()
                serveWaiters()
                throw error
            }
        }
        return try await waitForConnection()
    }

    private func waitForConnection() async throws -> PostgresConnection {
        nextWaiterID += 1
        let id = nextWaiterID
        let timeout = options.acquireTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiters.append((id, continuation))
                Task { [weak self] in
                    try? await Task.sleep(for: timeout)
                    await self?.failWaiter(id, with: PostgresError(
                        kind: .poolTimeout,
                        message: "no database connection became free within \(timeout); all \(self?.options.maximumConnections ?? 0) are in use. Raise maximumConnections or find the slow queries"))
                }
            }
        } onCancel: {
            Task { [weak self] in
                await self?.failWaiter(id, with: PostgresError(kind: .queryCanceled, message: "the task was cancelled while waiting for a connection"))
            }
        }
    }

    private func failWaiter(_ id: UInt64, with error: PostgresError) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume(throwing: error)
    }

    private func release(_ connection: PostgresConnection) async {
        // Drain an open stream and roll back a forgotten transaction, even if the task was
        // cancelled; the connection stays counted as borrowed until this is done.
        var usable = !closed && !connection.isBroken
        if usable { usable = await connection.resetForReuse() }
        if usable, !closed, !waiters.isEmpty {
            waiters.removeFirst().continuation.resume(returning: connection)
            return // handed over: still borrowed
        }
        if usable, !closed {
            idle.append((connection, .now))
        } else {
            total -= 1
            await connection.close()
            if !closed { Task { await self.replenish() } }
        }
        releaseLease()
        serveWaiters()
    }

    /// One borrowed connection less; wakes `close()` when the last one comes back.
    private func releaseLease() {
        leased -= 1
        if closed && leased == 0 {
            drainWaiters.forEach { $0.resume() }
            drainWaiters.removeAll()
        }
    }

    /// Opens connections for waiting tasks while there is room.
    private func serveWaiters() {
        while !waiters.isEmpty && total < options.maximumConnections && !closed {
            let waiter = waiters.removeFirst()
            total += 1
            leased += 1
            let configuration = self.configuration
            Task {
                do {
                    waiter.continuation.resume(returning: try await PostgresConnection.connect(configuration))
                } catch {
                    self.openFailed()
                    waiter.continuation.resume(throwing: error)
                }
            }
        }
    }

    private func openFailed() {
        total -= 1
        releaseLease()
        serveWaiters()
    }

    /// Tops the pool up to `minimumConnections`.
    private func replenish() async {
        while !closed && total < options.minimumConnections {
            total += 1
            do {
                let connection = try await PostgresConnection.connect(configuration)
                if closed {
                    total -= 1
                    await connection.close()
                } else if !waiters.isEmpty {
                    leased += 1
                    waiters.removeFirst().continuation.resume(returning: connection)
                } else {
                    idle.append((connection, .now))
                }
            } catch {
                total -= 1
                return // the next acquire reports the error
            }
        }
    }

    /// Stops lending: waiting tasks fail with `poolClosed`, idle connections close, and the
    /// call returns once every borrowed connection has come back and closed.
    public func close() async {
        closed = true
        for waiter in waiters { waiter.continuation.resume(throwing: Self.closedError) }
        waiters.removeAll()
        let closing = idle
        idle.removeAll()
        total -= closing.count
        for entry in closing { await entry.connection.close() }
        if leased > 0 {
            await withCheckedContinuation { drainWaiters.append($0) }
        }
    }

    private static let closedError = PostgresError(kind: .poolClosed, message: "the connection pool is closed (the service is shutting down)")
}
