import Foundation
public import Logging
import Synchronization

/// What a pool does to a connection's session before lending it again.
///
/// ```swift
/// var options = PoolOptions()
/// options.reset = .always   // DISCARD ALL every time, if your SQL changes session state in ways the pool cannot see
/// ```
public enum SessionReset: Sendable {
    /// When the connection may have changed session state (a SET or RESET, LISTEN, a temporary
    /// table, a cursor, PREPARE, an advisory lock, a script): back to a fresh session of the
    /// same user with `SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *;
    /// pg_advisory_unlock_all(); CLOSE ALL; DISCARD TEMP` (and `DEALLOCATE ALL` after a
    /// PREPARE). The statement cache stays. Costs nothing when nothing changed, which is most
    /// of the time.
    case tracked
    /// `DISCARD ALL` on every return (and the statement cache starts over): for code that changes
    /// session state inside functions the pool cannot see.
    case always
    /// Nothing but rolling back an open transaction.
    case never
}

/// Sizes, timeouts and behaviour of a `PostgresPool`.
///
/// ```swift
/// let options = PoolOptions(minimumConnections: 2, maximumConnections: 8, acquireTimeout: .seconds(5))
/// ```
public struct PoolOptions: Sendable {
    /// Connections kept open even when idle.
    public var minimumConnections: Int
    /// The most connections open at once; further acquires wait.
    public var maximumConnections: Int
    /// How long an acquire may take in all: waiting for a free connection, connecting, and the
    /// health check. Past it the call fails with `poolTimeout`.
    public var acquireTimeout: Duration
    /// An idle connection older than this is pinged before it is handed out.
    public var healthCheckAfterIdle: Duration
    /// How many single statements (`query`, `execute`, `fetch…` on the pool) may share one
    /// connection, pipelined, before another is used; 1 gives each its own.
    public var maximumPipelineDepth: Int
    /// What is reset when a connection comes back (see `SessionReset`).
    public var reset: SessionReset
    /// Runs on every connection as it comes back, after the reset (and before it is lent
    /// again); a connection whose hook throws is closed.
    public var resetHook: (@Sendable (isolated PostgresConnection) async throws -> Void)?
    /// On graceful shutdown (see `run()`), how long lent connections may take to come back
    /// before they are closed under their borrowers.
    ///
    /// ```swift
    /// options.shutdownGracePeriod = .seconds(20)
    /// ```
    public var shutdownGracePeriod: Duration = .seconds(10)
    /// The pool's name in metrics (the `pool` dimension) and logs.
    ///
    /// ```swift
    /// options.name = "replica"
    /// ```
    public var name = "primary"

    public init(
        minimumConnections: Int = 0, maximumConnections: Int = 10,
        acquireTimeout: Duration = .seconds(10), healthCheckAfterIdle: Duration = .seconds(30),
        maximumPipelineDepth: Int = 8, reset: SessionReset = .tracked,
        resetHook: (@Sendable (isolated PostgresConnection) async throws -> Void)? = nil
    ) {
        self.minimumConnections = max(0, minimumConnections)
        self.maximumConnections = max(1, maximumConnections)
        self.acquireTimeout = acquireTimeout
        self.healthCheckAfterIdle = healthCheckAfterIdle
        self.maximumPipelineDepth = max(1, maximumPipelineDepth)
        self.reset = reset
        self.resetHook = resetHook
    }
}

/// A bounded set of connections shared by many tasks.
///
/// - `withConnection` and `transaction` lend a connection to one task for the length of a
///   closure (an exclusive lease): transactions, streams, COPY and session state need one.
/// - `query`, `execute` and the `fetch` calls run one autocommit statement, and may share a
///   connection with other such statements, pipelined (see `PoolOptions.maximumPipelineDepth`).
///
/// Every decision — who gets which connection in what order, when one is opened, checked,
/// reset or replaced — is made by `PoolStateMachine`, whose rules are documented there (first
/// come, first served: no waiter starves). The pool performs them: it opens and closes
/// connections, runs health checks and resets, arms one timer for the waiters' deadlines, and
/// resumes the waiting tasks. A connection that comes back idle and clean is ready again at
/// once, with no round trip and no hop to another thread; `close()` waits for borrowed
/// connections to come back.
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
public final class PostgresPool: Sendable {
    /// How each of the pool's connections connects.
    public let configuration: PostgresConfiguration
    /// The pool's limits.
    public let options: PoolOptions
    private typealias Machine = PoolStateMachine<PostgresConnection, ContinuousClock.Instant>
    private let state: Mutex<State>
    /// The I/O threads its connections run on (the process's, except in tests).
    private let loops: EventLoopGroup
    private let timerLoop: EventLoop
    /// Gauges, the acquire timer and the pool's own log records.
    private let observer: PoolObserver

    /// A waiting caller: its continuation once it is suspended, or its answer if that came
    /// before it could suspend.
    private enum Slot: Sendable {
        case pending
        case waiting(CheckedContinuation<PostgresConnection, any Error>)
        case answered(Result<PostgresConnection, any Error>)
    }

    private struct State: ~Copyable, Sendable {
        var machine: Machine
        var slots: [UInt64: Slot] = [:]
        var nextID: UInt64 = 0
        var drained = false
        var drainWaiters: [CheckedContinuation<Bool, Never>] = []
    }

    public convenience init(configuration: PostgresConfiguration, options: PoolOptions = PoolOptions()) {
        self.init(configuration: configuration, options: options, loops: .shared)
    }

    /// A pool whose connections run on `loops` (tests give it loops no other test uses).
    init(configuration: PostgresConfiguration, options: PoolOptions, loops: EventLoopGroup) {
        self.configuration = configuration
        self.options = options
        self.loops = loops
        timerLoop = loops.next()
        observer = PoolObserver(configuration: configuration, options: options)
        state = Mutex(State(machine: Machine(limits: .init(
            minimumConnections: options.minimumConnections, maximumConnections: options.maximumConnections,
            maximumPipelineDepth: options.maximumPipelineDepth, healthCheckAfterIdle: options.healthCheckAfterIdle))))
        if options.minimumConnections > 0 {
            perform(withMachine { $0.replenish() })
        }
    }

    /// One of the I/O threads the pool's connections run on, as a task executor. Tasks that
    /// prefer it run their own code on that thread; the pool then gives them connections of
    /// that thread, and a call needs no hop between threads (about twice the throughput of
    /// one caller, and a round trip close to C libpq's; see BENCHMARKS.md). Each call picks
    /// the next I/O thread in turn.
    ///
    /// ```swift
    /// let handler = Task(executorPreference: pool.taskExecutor) {
    ///     try await pool.fetchValue(Int.self, "SELECT count(*) FROM events WHERE child_id = \(id)")
    /// }
    /// ```
    public var taskExecutor: any TaskExecutor { loops.next().taskExecutor }

    /// Counts for monitoring (also published as metrics, see `PostgresMetricName`).
    public var statistics: (idle: Int, inUse: Int, open: Int, waiting: Int) {
        let counts = state.withLock { $0.machine.counts }
        return (counts.idle, counts.leased, counts.open, counts.waiting)
    }

    /// The logger of the pool's configuration, for code built on the pool (the store logs
    /// through it).
    ///
    /// ```swift
    /// pool.logger.info("dashboard served")
    /// ```
    public var logger: Logger { configuration.logger }

    /// Runs `body` under the lock, then publishes the pool's gauges when a metrics backend
    /// listens.
    private func withState<R>(_ body: (inout State) -> R) -> R {
        guard observer.publishesGauges else { return state.withLock { body(&$0) } }
        let (result, counts) = state.withLock { state in (body(&state), state.machine.counts) }
        observer.publish(.init(open: counts.open, idle: counts.idle, leased: counts.leased, waiting: counts.waiting))
        return result
    }

    /// Runs one event against the machine (see `withState`).
    private func withMachine<R>(_ event: (inout Machine) -> R) -> R {
        withState { event(&$0.machine) }
    }

    // MARK: Borrowing

    /// Lends a connection to `body` (for it alone) and takes it back afterwards, whatever happens.
    public func withConnection<T: Sendable>(
        _ body: @Sendable (isolated PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await acquire(shared: false)
        do {
            // The hop onto the connection's loop may run on this thread (EventLoop.offerCallingThread).
            connection.loop.offerCallingThread()
            let value = try await body(connection)
            await release(connection, shared: false)
            return value
        } catch {
            await release(connection, shared: false)
            throw error
        }
    }

    /// Runs `body` in a transaction on a pooled connection.
    @discardableResult
    public func transaction<T: Sendable>(
        _ options: TransactionOptions = TransactionOptions(),
        _ body: @Sendable (isolated PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            try await connection.transaction(options, body)
        }
    }

    /// One autocommit statement, on a connection it may share with other such statements;
    /// a statement that may change session state (`SET`, `LISTEN`, a temp table, an advisory
    /// lock) gets a connection of its own, which is reset before anyone else uses it.
    ///
    /// A statement that failed only because its connection had died (the server ended the
    /// session before it ran, or it was never sent) runs again on another connection: nothing
    /// of it was applied (see ``RetryPolicy``, layer 1). Any other error comes back as it is.
    public func query(_ sql: SQL, timeout: Duration? = nil) async throws -> PostgresRows {
        // The statement's shape is looked up once, for the session check and the render.
        let looked = sql.shapeLookup
        let shared = !SessionSettings.needsOwnSession(sql, looked: looked)
        var attempt = 1
        while true {
            let connection = try await acquire(shared: shared)
            do {
                let rows: PostgresRows
                if shared {
                    // Sent from this thread; the answer comes straight back to it (queryFromCaller).
                    rows = try await connection.queryFromCaller(sql, timeout: timeout, looked: looked)
                } else {
                    connection.loop.offerCallingThread()
                    rows = try await connection.query(sql, timeout: timeout, looked: looked)
                }
                await release(connection, shared: shared)
                return rows
            } catch let error as PostgresError where attempt <= options.maximumConnections
                && RetryPolicy.isStaleConnection(error, connectionBroken: connection.isBroken) {
                // Each dead connection found this way is dropped: at worst every one was dead.
                await release(connection, shared: shared)
                attempt += 1
            } catch {
                await release(connection, shared: shared)
                throw error
            }
        }
    }

    /// One autocommit statement; returns the affected row count.
    @discardableResult
    public func execute(_ sql: SQL, timeout: Duration? = nil) async throws -> Int {
        try await query(sql, timeout: timeout).affectedRows
    }

    /// Every row of one statement as a `Decodable` struct.
    public func fetchAll<T: Decodable & Sendable>(_ type: T.Type, _ sql: SQL, timeout: Duration? = nil) async throws -> [T] {
        try await query(sql, timeout: timeout).decode(as: type)
    }

    /// The first row of one statement as a `Decodable` struct, or nil.
    public func fetchOne<T: Decodable & Sendable>(_ type: T.Type, _ sql: SQL, timeout: Duration? = nil) async throws -> T? {
        try await query(sql, timeout: timeout).first?.decode(as: type)
    }

    /// The first column of the first row of one statement, or nil.
    public func fetchValue<T: PostgresDecodable & Sendable>(_ type: T.Type, _ sql: SQL, timeout: Duration? = nil) async throws -> T? {
        guard let row = try await query(sql, timeout: timeout).first else { return nil }
        return try row.decode(T?.self, at: 0)
    }

    // MARK: Acquiring and releasing

    private func acquire(shared: Bool) async throws -> PostgresConnection {
        if Task.isCancelled {
            var error = PostgresError(kind: .queryCanceled, message: "the task was cancelled before it got a connection", sqlState: "57014")
            error.lostConnectionOutcome = .safe
            throw error
        }
        let start = ContinuousClock.now
        // The pool's own limit, or the caller's deadline (PostgresDeadline) when it ends first.
        let deadline = min(start + options.acquireTimeout, PostgresDeadline.current ?? start + options.acquireTimeout)
        let affinity = loops.currentIndex
        let (id, acquisition) = withState { state -> (UInt64, Machine.Acquisition) in
            state.nextID += 1
            let id = state.nextID
            let acquisition = state.machine.acquire(id, shared: shared, deadline: deadline, affinity: affinity, now: start)
            if case .wait = acquisition { state.slots[id] = .pending }
            return (id, acquisition)
        }
        switch acquisition {
        case .lend(let connection, let actions):
            perform(actions)
            observer.acquired(after: start)
            return connection
        case .fail(let error):
            throw error
        case .wait(let actions):
            perform(actions)
            let connection = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let early = state.withLock { state -> Result<PostgresConnection, any Error>? in
                        if case .answered(let result)? = state.slots[id] {
                            state.slots[id] = nil
                            return result
                        }
                        state.slots[id] = .waiting(continuation)
                        return nil
                    }
                    if let early { continuation.resume(with: early) }
                }
            } onCancel: {
                perform(withMachine { $0.cancelWaiter(id) })
            }
            observer.acquired(after: start)
            return connection
        }
    }

    private func release(_ connection: PostgresConnection, shared: Bool) async {
        var pooled = connection.pooledState
        if pooled.isStreaming && !pooled.isBroken {
            // A stream carried out of its lease: cut off now, so that a later read throws
            // rather than racing the reset (and maybe ending as if it were complete).
            await connection.closeStream(reason: "its connection went back to the pool")
            pooled = connection.pooledState
        }
        let condition: Machine.ReturnCondition
        if pooled.isBroken {
            condition = .broken
        } else if pooled.isIdle && !pooled.isStreaming && options.reset != .always && options.resetHook == nil
                    && (options.reset == .never || !pooled.sessionDirty) {
            condition = .clean
        } else {
            condition = .needsReset
        }
        perform(withMachine { $0.release(connection, shared: shared, condition: condition, now: .now) })
    }

    // MARK: Performing the machine's actions

    private func perform(_ actions: [Machine.Action]) {
        for action in actions {
            switch action {
            case .lend(let id, let connection):
                answer(id, .success(connection))
            case .fail(let id, let error):
                answer(id, .failure(error))
            case .open(let waiter, let deadline, let affinity):
                open(forWaiter: waiter, deadline: deadline, affinity: affinity)
            case .healthCheck(let connection, let waiter, let deadline):
                Task {
                    let ok = await PostgresDeadline.none { await connection.ping(deadline: deadline) }
                    if !ok { observer.failedHealthCheck(connection) }
                    perform(withMachine { $0.healthChecked(connection, ok: ok, waiter: waiter, now: .now) })
                }
            case .reset(let connection):
                // The caller went on at once; the connection stays lent until its reset is
                // done (a statement still draining after a deadline may take a while).
                Task {
                    let ok = await PostgresDeadline.none { await connection.prepareForReuse(options.reset, hook: options.resetHook) }
                    perform(withMachine { $0.resetFinished(connection, ok: ok, now: .now) })
                }
            case .close(let connection, let reason):
                switch reason {
                case .broken: observer.replacingBroken(connection)
                case .resetFailed, .failedHealthCheck: observer.closingUnusable(connection)
                case .poolClosed, .forced: break
                }
                Task { await connection.close() }
            case .armTimer(let instant):
                let loop = timerLoop
                loop.execute { [self] in
                    loop.schedule(at: instant) { [self] in perform(withMachine { $0.timerFired(now: .now) }) }
                }
            case .reportExhausted(let counts):
                observer.exhausted(.init(open: counts.open, idle: counts.idle, leased: counts.leased, waiting: counts.waiting))
            case .reportTimedOut(let count):
                observer.timedOut(count)
            case .drained:
                let waiters = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
                    state.drained = true
                    defer { state.drainWaiters.removeAll() }
                    return state.drainWaiters
                }
                for waiter in waiters { waiter.resume(returning: true) }
            }
        }
    }

    /// Resumes waiter `id`, or keeps the answer for it if it has not suspended yet.
    private func answer(_ id: UInt64, _ result: Result<PostgresConnection, any Error>) {
        let continuation = state.withLock { state -> CheckedContinuation<PostgresConnection, any Error>? in
            switch state.slots[id] {
            case .waiting(let continuation)?:
                state.slots[id] = nil
                return continuation
            case .pending?:
                state.slots[id] = .answered(result)
                return nil
            case .answered?, nil:
                return nil
            }
        }
        continuation?.resume(with: result)
    }

    private func open(forWaiter waiter: UInt64?, deadline: ContinuousClock.Instant?, affinity: Int?) {
        let configuration = self.configuration
        Task {
            let loop = affinity.map { loops.loops[$0 % loops.loops.count] } ?? loops.next()
            do {
                let connection = try await PostgresDeadline.none {
                    try await PostgresConnection.connect(configuration, deadline: deadline ?? .now + .seconds(configuration.effectiveConnectTimeout), on: loop)
                }
                perform(withMachine { $0.connectionOpened(connection, affinity: loop.index, forWaiter: waiter, now: .now) })
            } catch let error as PostgresError {
                perform(withMachine { $0.connectionFailed(error, forWaiter: waiter, now: .now) })
            } catch {
                perform(withMachine { $0.connectionFailed(PostgresError(kind: .connectionFailure, message: "\(error)"), forWaiter: waiter, now: .now) })
            }
        }
    }

    // MARK: Closing

    /// Stops lending: waiting tasks fail with `poolClosed`, idle connections close, and the
    /// call returns once every borrowed connection has come back and closed.
    ///
    /// ```swift
    /// await pool.close()
    /// ```
    public func close() async {
        _ = await close(gracePeriod: nil)
    }

    /// Stops lending (waiting tasks fail with `poolClosed`, idle connections close), waits up
    /// to `gracePeriod` for borrowed connections to come back, then closes those still out:
    /// their statements fail with `connectionFailure`. Returns whether every connection came
    /// back in time. `nil` waits as long as it takes.
    ///
    /// ```swift
    /// let clean = await pool.close(gracePeriod: .seconds(5))
    /// ```
    @discardableResult
    public func close(gracePeriod: Duration?) async -> Bool {
        let (actions, counts) = withMachine { machine in (machine.close(), machine.counts) }
        observer.closing(.init(open: counts.open, idle: counts.idle, leased: counts.leased, waiting: counts.waiting), gracePeriod: gracePeriod)
        perform(actions)
        let drained = await waitForDrain(until: gracePeriod.map { ContinuousClock.now + $0 })
        if !drained {
            let out = withMachine { $0.forceClose() }
            observer.forcedClose(out.count { if case .close = $0 { true } else { false } })
            for case .close(let connection, _) in out { await connection.close() }
            perform(out.filter { if case .close = $0 { false } else { true } })
        }
        observer.closed()
        return drained
    }

    /// Returns true once nothing is lent or being opened, false at `deadline`.
    private func waitForDrain(until deadline: ContinuousClock.Instant?) async -> Bool {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.drained { return true }
                state.drainWaiters.append(continuation)
                return false
            }
            if done { return continuation.resume(returning: true) }
            guard let deadline else { return }
            let loop = timerLoop
            loop.execute { [self] in
                loop.schedule(at: deadline) { [self] in
                    let waiters = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
                        defer { state.drainWaiters.removeAll() }
                        return state.drainWaiters
                    }
                    for waiter in waiters { waiter.resume(returning: false) }
                }
            }
        }
    }
}
