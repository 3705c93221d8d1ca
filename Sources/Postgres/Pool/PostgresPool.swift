import Foundation
import Logging
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
/// A connection that comes back idle and clean is ready again at once, with no round trip and
/// no hop to another thread; one that comes back in a transaction is rolled back, and one whose
/// session state may have changed is reset (see `SessionReset`). Waiting tasks are served in
/// order, and one timer per pool (on an I/O thread) enforces their deadlines. Broken connections
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
public final class PostgresPool: Sendable {
    /// How each of the pool's connections connects.
    public let configuration: PostgresConfiguration
    /// The pool's limits.
    public let options: PoolOptions
    private let state = Mutex(State())
    private let timerLoop = EventLoopGroup.shared.next()
    /// Gauges, the acquire timer and the pool's own log records.
    private let observer: PoolObserver

    private struct Idle {
        let connection: PostgresConnection
        let since: ContinuousClock.Instant
    }

    private struct Waiter {
        let deadline: ContinuousClock.Instant
        let shared: Bool
        let continuation: CheckedContinuation<PostgresConnection, any Error>
    }

    private struct State {
        var idle: [Idle] = []
        /// Connections lent to single statements, with how many use each now.
        var shared: [ObjectIdentifier: (connection: PostgresConnection, users: Int)] = [:]
        /// Open or opening.
        var total = 0
        /// Lent to one caller (a lease, or a connection being reset before it is idle again).
        var lent: [ObjectIdentifier: PostgresConnection] = [:]
        var exclusive: Int { lent.count }
        /// Being opened by `replenish()` (counted in `total`, not yet lent or idle).
        var opening = 0
        var waiters: [UInt64: Waiter] = [:]
        var order: [UInt64] = []
        var orderHead = 0
        var nextWaiterID: UInt64 = 0
        var timerArmed: ContinuousClock.Instant?
        var closed = false
        var drainWaiters: [UInt64: CheckedContinuation<Bool, Never>] = [:]
        /// An exhausted pool was reported and no connection has been idle since.
        var exhaustionReported = false
        /// Broken idle connections dropped while planning (reported after the lock).
        var brokenDropped = 0

        var inUse: Int { exclusive + shared.count }

        var counts: PoolObserver.Counts {
            .init(open: total, idle: idle.count, leased: inUse, waiting: waiters.count)
        }

        mutating func lend(_ connection: PostgresConnection) { lent[ObjectIdentifier(connection)] = connection }
        mutating func unlend(_ connection: PostgresConnection) { lent[ObjectIdentifier(connection)] = nil }

        /// The first waiter still waiting, in arrival order.
        mutating func firstWaiter(where accept: (Waiter) -> Bool = { _ in true }) -> (UInt64, Waiter)? {
            while orderHead < order.count, waiters[order[orderHead]] == nil { orderHead += 1 }
            if orderHead > 1024, orderHead * 2 > order.count {
                order.removeFirst(orderHead)
                orderHead = 0
            }
            var index = orderHead
            while index < order.count {
                if let waiter = waiters[order[index]], accept(waiter) { return (order[index], waiter) }
                index += 1
            }
            return nil
        }
    }

    public init(configuration: PostgresConfiguration, options: PoolOptions = PoolOptions()) {
        self.configuration = configuration
        self.options = options
        observer = PoolObserver(configuration: configuration, options: options)
        if options.minimumConnections > 0 {
            Task { await self.replenish() }
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
    public var taskExecutor: any TaskExecutor { EventLoopGroup.shared.next() }

    /// Counts for monitoring (also published as metrics, see `PostgresMetricName`).
    public var statistics: (idle: Int, inUse: Int, open: Int, waiting: Int) {
        state.withLock { ($0.idle.count, $0.inUse, $0.total, $0.waiters.count) }
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
    private func withState<R: Sendable>(_ body: (inout State) -> R) -> R {
        guard observer.publishesGauges else { return state.withLock { body(&$0) } }
        let (result, counts) = state.withLock { state in (body(&state), state.counts) }
        observer.publish(counts)
        return result
    }

    // MARK: Borrowing

    /// Lends a connection to `body` (for it alone) and takes it back afterwards, whatever happens.
    public func withConnection<T: Sendable>(
        _ body: @Sendable (isolated PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await acquire(shared: false)
        do {
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
    /// of it was applied. Any other error comes back as it is.
    public func query(_ sql: SQL, timeout: Duration? = nil) async throws -> PostgresRows {
        let shared = !SessionSettings.needsOwnSession(sql)
        var attempt = 1
        while true {
            let connection = try await acquire(shared: shared)
            do {
                let rows = try await connection.query(sql, timeout: timeout)
                await release(connection, shared: shared)
                return rows
            } catch let error as PostgresError where attempt <= options.maximumConnections && Self.diedBeforeRunning(error, on: connection) {
                // Each dead connection found this way is dropped: at worst every one was dead.
                await release(connection, shared: shared)
                attempt += 1
            } catch {
                await release(connection, shared: shared)
                throw error
            }
        }
    }

    /// A connection that was already gone when the statement went out (a backend terminated
    /// while idle in the pool, a server restart): safe to run the statement elsewhere.
    static func diedBeforeRunning(_ error: PostgresError, on connection: PostgresConnection) -> Bool {
        [.connectionFailure, .adminShutdown].contains(error.kind) && error.retry == .safe && connection.isBroken && !Task.isCancelled
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

    // MARK: Acquire

    private enum Plan {
        case use(PostgresConnection, since: ContinuousClock.Instant?)
        case open
        case wait
        case closed
    }

    private func acquire(shared: Bool) async throws -> PostgresConnection {
        if Task.isCancelled {
            throw PostgresError(kind: .queryCanceled, message: "the task was cancelled before it got a connection", sqlState: "57014")
        }
        let start = ContinuousClock.now
        let deadline = start + options.acquireTimeout
        while true {
            let (next, dropped) = withState { state -> (Plan, Int) in
                let plan = self.plan(&state, shared: shared)
                defer { state.brokenDropped = 0 }
                return (plan, state.brokenDropped)
            }
            if dropped > 0 { observer.droppedBroken(dropped) }
            switch next {
            case .closed:
                throw Self.closedError
            case .use(let connection, let since):
                if let since, since.duration(to: ContinuousClock.now) > options.healthCheckAfterIdle, await !connection.ping(deadline: deadline) {
                    observer.failedHealthCheck(connection)
                    await discard(connection, shared: shared)
                    continue
                }
                observer.acquired(after: start)
                return connection
            case .open:
                let connection = try await open(shared: shared, deadline: deadline)
                observer.acquired(after: start)
                return connection
            case .wait:
                let connection = try await wait(shared: shared, deadline: deadline)
                observer.acquired(after: start)
                return connection
            }
        }
    }

    /// Decides, under the lock, where a connection comes from.
    private func plan(_ state: inout State, shared: Bool) -> Plan {
        guard !state.closed else { return .closed }
        // Idle connections first (most recently used: warm caches), then a new one, then (for a
        // single statement) a place in a shared connection's pipeline.
        // A caller running on an I/O thread gets a connection of that thread when there is one.
        if let local = state.idle.lastIndex(where: { $0.connection.loop.inLoop && !$0.connection.isBroken }) {
            let entry = state.idle.remove(at: local)
            take(entry.connection, into: &state, shared: shared)
            return .use(entry.connection, since: entry.since)
        }
        while let entry = state.idle.popLast() {
            if entry.connection.isBroken {
                state.total -= 1
                state.brokenDropped += 1
                continue
            }
            take(entry.connection, into: &state, shared: shared)
            return .use(entry.connection, since: entry.since)
        }
        if state.total < options.maximumConnections {
            state.total += 1
            return .open
        }
        // Joining a shared connection never jumps the queue: a caller waiting for a connection
        // of its own would otherwise wait while the shared ones never drain.
        if shared, state.waiters.isEmpty, let least = state.shared.values.filter({ $0.users < options.maximumPipelineDepth && !$0.connection.isBroken })
            .min(by: { ($0.connection.loop.inLoop ? 0 : 1, $0.users) < ($1.connection.loop.inLoop ? 0 : 1, $1.users) }) {
            state.shared[ObjectIdentifier(least.connection)]?.users += 1
            return .use(least.connection, since: nil)
        }
        return .wait
    }

    private func take(_ connection: PostgresConnection, into state: inout State, shared: Bool) {
        if shared {
            state.shared[ObjectIdentifier(connection), default: (connection, 0)].users += 1
        } else {
            state.lend(connection)
        }
    }

    private func open(shared: Bool, deadline: ContinuousClock.Instant) async throws -> PostgresConnection {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration, deadline: deadline)
        } catch {
            withState { $0.total -= 1 }
            serveWaiters()
            if var error = error as? PostgresError, error.message.contains("connect timeout"), ContinuousClock.now >= deadline {
                error.kind = .poolTimeout
                error.message = "no database connection within \(options.acquireTimeout): connecting took too long. " + error.message
                throw error
            }
            throw error
        }
        let accepted = withState { state -> Bool in
            guard !state.closed else { return false }
            take(connection, into: &state, shared: shared)
            return true
        }
        guard accepted else {
            await connection.close()
            withState { state in
                state.total -= 1
                signalDrain(&state)
            }
            throw Self.closedError
        }
        return connection
    }

    private func wait(shared: Bool, deadline: ContinuousClock.Instant) async throws -> PostgresConnection {
        let id = state.withLock { state -> UInt64 in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let (outcome, exhausted) = withState { state -> (Plan?, PoolObserver.Counts?) in
                    // Something may have come back since the plan was made.
                    let plan = self.plan(&state, shared: shared)
                    if case .wait = plan {
                        state.waiters[id] = Waiter(deadline: deadline, shared: shared, continuation: continuation)
                        state.order.append(id)
                        armTimer(&state, for: deadline)
                        guard !state.exhaustionReported else { return (nil, nil) }
                        state.exhaustionReported = true
                        return (nil, state.counts)
                    }
                    return (plan, nil)
                }
                if let exhausted { observer.exhausted(exhausted) }
                switch outcome {
                case nil: break
                case .use(let connection, _)?: continuation.resume(returning: connection)
                case .closed?: continuation.resume(throwing: Self.closedError)
                case .open?:
                    Task {
                        do { continuation.resume(returning: try await self.open(shared: shared, deadline: deadline)) } catch { continuation.resume(throwing: error) }
                    }
                case .wait?: break
                }
            }
        } onCancel: {
            let waiter = withState { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: PostgresError(kind: .queryCanceled, message: "the task was cancelled while waiting for a connection", sqlState: "57014"))
        }
    }

    /// One timer per pool, at the earliest waiter's deadline (waiters arrive in deadline order).
    private func armTimer(_ state: inout State, for deadline: ContinuousClock.Instant) {
        guard state.timerArmed == nil || deadline < state.timerArmed! else { return }
        state.timerArmed = deadline
        let loop = timerLoop
        loop.execute { [self] in
            loop.schedule(at: deadline) { [self] in expireWaiters() }
        }
    }

    private func expireWaiters() {
        let now = ContinuousClock.now
        let expired = withState { state -> [Waiter] in
            state.timerArmed = nil
            var expired: [Waiter] = []
            while let (id, waiter) = state.firstWaiter(), waiter.deadline <= now {
                state.waiters[id] = nil
                expired.append(waiter)
            }
            if let (_, next) = state.firstWaiter() { armTimer(&state, for: next.deadline) }
            return expired
        }
        if !expired.isEmpty { observer.timedOut(expired.count) }
        for waiter in expired {
            waiter.continuation.resume(throwing: PostgresError(
                kind: .poolTimeout,
                message: "no database connection became free within \(options.acquireTimeout); all \(options.maximumConnections) are in use. Raise maximumConnections or find the slow queries"))
        }
    }

    // MARK: Release

    private func release(_ connection: PostgresConnection, shared: Bool) async {
        if shared {
            let last = withState { state -> Bool in
                let key = ObjectIdentifier(connection)
                guard var entry = state.shared[key] else { return false }
                entry.users -= 1
                if entry.users > 0 {
                    state.shared[key] = entry
                    return false
                }
                state.shared[key] = nil
                state.lend(connection) // until it is handed back below
                return true
            }
            if !last {
                serveWaiters()
                return
            }
        }
        // Idle and clean: no round trip, no hop (the mirror is read without the actor).
        let usable = !connection.isBroken
        let mirror = connection.core.mirror
        let clean = mirror.isIdle && !mirror.streaming.load(ordering: .acquiring)
            && (options.reset == .never || !mirror.sessionDirty.load(ordering: .acquiring))
            && options.reset != .always && options.resetHook == nil
        guard usable else { return await discard(connection, shared: false) }
        if mirror.streaming.load(ordering: .acquiring) {
            // A stream carried out of its lease: cut off now, so that a later read throws
            // rather than racing the reset below (and maybe ending as if it were complete).
            await connection.closeStream(reason: "its connection went back to the pool")
        }
        guard clean else {
            // The caller goes on at once; the connection stays counted as lent until its
            // reset is done (a statement still draining after a deadline may take a while).
            Task { [self] in
                if await connection.prepareForReuse(options.reset, hook: options.resetHook) {
                    handBack(connection)
                } else {
                    await discard(connection, shared: false)
                }
            }
            return
        }
        handBack(connection)
    }

    /// An exclusively held connection goes to the first waiter, or back to the idle list.
    private func handBack(_ connection: PostgresConnection) {
        enum Next { case waiter(CheckedContinuation<PostgresConnection, any Error>, shared: Bool), close, done }
        let next = withState { state -> Next in
            state.unlend(connection)
            if state.closed {
                state.total -= 1
                signalDrain(&state)
                return .close
            }
            if let (id, waiter) = state.firstWaiter() {
                state.waiters[id] = nil
                take(connection, into: &state, shared: waiter.shared)
                return .waiter(waiter.continuation, shared: waiter.shared)
            }
            state.idle.append(Idle(connection: connection, since: .now))
            state.exhaustionReported = false
            return .done
        }
        switch next {
        case .waiter(let continuation, let shared):
            continuation.resume(returning: connection)
            // The single statements queued behind it may share the connection it now has.
            if shared { serveWaiters() }
        case .close: Task { await connection.close() }
        case .done: break
        }
    }

    private func discard(_ connection: PostgresConnection, shared: Bool) async {
        if connection.isBroken { observer.replacingBroken(connection) } else { observer.closingUnusable(connection) }
        withState { state in
            if shared {
                state.shared[ObjectIdentifier(connection)] = nil
            } else {
                state.unlend(connection)
            }
            state.total -= 1
            signalDrain(&state)
        }
        await connection.close()
        serveWaiters()
        if !state.withLock({ $0.closed }) { Task { await replenish() } }
    }

    /// Opens connections for waiting tasks while there is room, and gives waiting single
    /// statements room in shared connections.
    private func serveWaiters() {
        enum Action {
            case open(UInt64, Waiter)
            case share(Waiter, PostgresConnection)
        }
        let actions = withState { state -> [Action] in
            var actions: [Action] = []
            while !state.closed, state.total < options.maximumConnections, let (id, waiter) = state.firstWaiter() {
                state.waiters[id] = nil
                state.total += 1
                actions.append(.open(id, waiter))
            }
            // In order: shared waiters join shared connections only while they are at the head
            // of the queue (FIFO; a waiter for an exclusive lease is not overtaken).
            while let (id, waiter) = state.firstWaiter(), waiter.shared,
                  let least = state.shared.values.filter({ $0.users < options.maximumPipelineDepth && !$0.connection.isBroken }).min(by: { $0.users < $1.users }) {
                state.waiters[id] = nil
                state.shared[ObjectIdentifier(least.connection)]?.users += 1
                actions.append(.share(waiter, least.connection))
            }
            return actions
        }
        for action in actions {
            switch action {
            case .share(let waiter, let connection):
                waiter.continuation.resume(returning: connection)
            case .open(_, let waiter):
                Task {
                    do {
                        let connection = try await PostgresConnection.connect(configuration, deadline: waiter.deadline)
                        let accepted = withState { state -> Bool in
                            guard !state.closed else { return false }
                            take(connection, into: &state, shared: waiter.shared)
                            return true
                        }
                        if accepted {
                            waiter.continuation.resume(returning: connection)
                        } else {
                            await connection.close()
                            withState { state in
                                state.total -= 1
                                signalDrain(&state)
                            }
                            waiter.continuation.resume(throwing: Self.closedError)
                        }
                    } catch {
                        withState { $0.total -= 1 }
                        waiter.continuation.resume(throwing: error)
                    }
                }
            }
        }
    }

    /// Tops the pool up to `minimumConnections`. `close()` waits for a connection being
    /// opened here (and then closes it).
    private func replenish() async {
        while withState({ state -> Bool in
            guard !state.closed, state.total < options.minimumConnections else { return false }
            state.total += 1
            state.opening += 1
            return true
        }) {
            do {
                let connection = try await PostgresConnection.connect(configuration)
                withState { state in
                    state.opening -= 1
                    state.lend(connection)
                }
                handBack(connection)
            } catch {
                withState { state in
                    state.total -= 1
                    state.opening -= 1
                    signalDrain(&state)
                }
                return // the next acquire reports the error
            }
        }
    }

    private func signalDrain(_ state: inout State) {
        if state.closed && state.inUse == 0 && state.opening == 0 {
            for waiter in state.drainWaiters.values { waiter.resume(returning: true) }
            state.drainWaiters.removeAll()
        }
    }

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
        let (waiters, idle, counts) = withState { state -> ([Waiter], [Idle], PoolObserver.Counts) in
            state.closed = true
            let waiters = Array(state.waiters.values)
            state.waiters.removeAll()
            state.order.removeAll()
            state.orderHead = 0
            let idle = state.idle
            state.idle.removeAll()
            state.total -= idle.count
            return (waiters, idle, state.counts)
        }
        observer.closing(counts, gracePeriod: gracePeriod)
        for waiter in waiters { waiter.continuation.resume(throwing: Self.closedError) }
        for entry in idle { await entry.connection.close() }
        let drained = await waitForDrain(until: gracePeriod.map { ContinuousClock.now + $0 })
        if !drained {
            let stillOut = withState { state in Array(state.lent.values) + state.shared.values.map(\.connection) }
            observer.forcedClose(stillOut.count)
            for connection in stillOut { await connection.close() }
        }
        observer.closed()
        return drained
    }

    /// Returns true once nothing is lent or being opened, false at `deadline`.
    private func waitForDrain(until deadline: ContinuousClock.Instant?) async -> Bool {
        let id = withState { state -> UInt64 in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return await withCheckedContinuation { continuation in
            let done = withState { state -> Bool in
                if state.inUse == 0 && state.opening == 0 { return true }
                state.drainWaiters[id] = continuation
                return false
            }
            if done { return continuation.resume(returning: true) }
            guard let deadline else { return }
            let loop = timerLoop
            loop.execute { [self] in
                loop.schedule(at: deadline) { [self] in
                    let waiter = withState { $0.drainWaiters.removeValue(forKey: id) }
                    waiter?.resume(returning: false)
                }
            }
        }
    }

    private static let closedError = PostgresError(kind: .poolClosed, message: "the connection pool is closed (the service is shutting down)")
}

extension PostgresConnection {
    /// A reset that takes longer than this closes the connection instead.
    static let resetDeadline: Duration = .seconds(10)

    /// Gets a returned connection ready for the next borrower, ignoring task cancellation:
    /// ends an open stream (a later read throws), rolls back a transaction left open, resets
    /// session state as `reset` says, runs `hook`. `false` if the connection is unusable.

    func prepareForReuse(_ reset: SessionReset, hook: (@Sendable (isolated PostgresConnection) async throws -> Void)?) async -> Bool {
        guard !isBroken else { return false }
        await closeStream(reason: "its connection went back to the pool")
        await waitUntilIdle()
        transactionToken = nil
        do {
            if isInTransaction { try await runControl("ROLLBACK", ignoringCancellation: true) }
            let dirty = core.mirror.sessionDirty.load(ordering: .acquiring)
            // Behind a pooler the session is not ours: a reset would reach whichever server
            // session the pooler picks, and nothing was kept in ours.
            switch isBehindPooler ? .never : reset {
            case .always:
                // Alone: in a multi-statement string it would run in an implicit transaction
                // block, where DISCARD ALL is refused.
                _ = try await perform(.simple("DISCARD ALL"), text: "DISCARD ALL", timeout: Self.resetDeadline, ignoringCancellation: true)
                _ = try await perform(.simple(SessionSettings.pinSQL), text: "session settings", timeout: Self.resetDeadline, ignoringCancellation: true)
                statements.removeAll()
                pendingDeallocations.removeAll()
                userPrepared = false
            case .tracked where dirty:
                let deallocate = userPrepared ? "DEALLOCATE ALL; " : ""
                let script = "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); CLOSE ALL; DISCARD TEMP; "
                    + deallocate + SessionSettings.pinSQL
                _ = try await perform(.simple(script), text: "session reset", timeout: Self.resetDeadline, ignoringCancellation: true)
                if userPrepared {
                    statements.removeAll()
                    pendingDeallocations.removeAll()
                    userPrepared = false
                }
            default:
                break
            }
            core.notificationHandler = nil
            core.breakHandler = nil
            core.mirror.sessionDirty.store(false, ordering: .releasing)
            if let hook { try await hook(self) }
        } catch {
            return false
        }
        return !isBroken
    }

    /// A round trip (an empty statement) that ignores task cancellation: the pool's health check.
    func ping(deadline: ContinuousClock.Instant) async -> Bool {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { return false }
        do {
            _ = try await perform(.simple(""), text: "", timeout: remaining, ignoringCancellation: true)
            return !isBroken
        } catch {
            return false
        }
    }
}
