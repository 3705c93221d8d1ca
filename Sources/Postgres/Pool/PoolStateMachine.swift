/// A connection as the pool's rules see it: an identity, and whether it broke while idle.
protocol PooledConnection: AnyObject {
    /// The connection is closed or lost; it is dropped instead of lent.
    var isBroken: Bool { get }
}

/// Every rule of a connection pool, as data: who gets which connection in what order, when
/// one is opened, checked, reset, replaced or closed, when a waiter gives up, and when the
/// pool has drained.
///
/// The machine is pure and generic over the connection and the clock's instant: it never
/// opens a socket, sleeps, or resumes a task. Events go in (acquire, release, opened, failed,
/// checked, reset, timer, close) and actions come out, which `PostgresPool` performs. Tests
/// drive it with stand-in connections and a manual clock (see PoolStateMachineTests).
///
/// The rules:
/// - **First come, first served.** Waiters are served strictly in arrival order: a waiter
///   that cannot be served yet (it needs a connection of its own and none is free) holds back
///   every waiter behind it, even those a shared connection could take. No waiter can starve.
/// - A caller that finds nobody waiting gets an idle connection (the most recently used, one
///   of its own I/O thread if there is one), else a connection opened for it while the pool
///   has room, else (for single statements) a place in a shared connection's pipeline (the one
///   of its own thread, then the least busy), else it waits.
/// - Connections are opened only for waiters not already covered by an opening in flight; a
///   failed opening fails the waiter it was started for, with the error.
/// - An idle connection older than `healthCheckAfterIdle` is checked before it is lent.
/// - A connection that comes back dirty is reset before anyone else gets it; one that comes
///   back broken (or fails its reset or check) is closed and replaced as demand requires.
///
/// ```swift
/// var pool = PoolStateMachine<MyConnection, ContinuousClock.Instant>(limits: .init(maximumConnections: 2))
/// let first = pool.acquire(1, shared: false, deadline: .now + .seconds(5), affinity: nil, now: .now)
/// // .waiting([.open(forWaiter: 1, ...)]): open one, then report it with connectionOpened
/// ```
struct PoolStateMachine<Connection: PooledConnection, Instant: InstantProtocol> {
    typealias WaiterID = UInt64

    struct Limits {
        var minimumConnections = 0
        var maximumConnections = 10
        /// How many single statements may share one connection.
        var maximumPipelineDepth = 8
        /// An idle connection older than this is checked before it is lent.
        var healthCheckAfterIdle: Instant.Duration?
    }

    /// How a lent connection came back.
    enum ReturnCondition: Equatable {
        /// Idle, no transaction, nothing to reset: ready for the next borrower as it is.
        case clean
        /// Something must be reset (a transaction left open, session state, a stream).
        case needsReset
        /// Closed or lost.
        case broken
    }

    /// Why the pool closes a connection.
    enum CloseReason: Equatable {
        /// It broke (found broken while idle, or came back broken).
        case broken
        /// Its reset failed.
        case resetFailed
        /// It failed its health check.
        case failedHealthCheck
        /// The pool is closed.
        case poolClosed
        /// The pool's grace period ended with it still lent.
        case forced
    }

    /// What `acquire` decided.
    enum Acquisition {
        /// Here is a connection, at once (and `actions` to perform beside: broken idle
        /// connections found on the way are closed).
        case lend(Connection, [Action])
        /// The caller waits; its connection (or error) comes as a `.lend`/`.fail` action.
        case wait([Action])
        case fail(PostgresError)
    }

    enum Action {
        /// Resume waiter `id` with `connection`.
        case lend(WaiterID, Connection)
        /// Resume waiter `id` with `error`.
        case fail(WaiterID, PostgresError)
        /// Open a connection (for waiter `id`, or to keep the minimum) within `deadline`, on
        /// the I/O thread `affinity` when given; report `connectionOpened` or
        /// `connectionFailed`.
        case open(forWaiter: WaiterID?, deadline: Instant?, affinity: Int?)
        /// Check `connection` (a round trip) for waiter `id` within `deadline`; report
        /// `healthChecked`.
        case healthCheck(Connection, WaiterID, deadline: Instant)
        /// Reset `connection`'s session; report `resetFinished`.
        case reset(Connection)
        case close(Connection, CloseReason)
        /// Fire `timerFired` at `instant` (the earliest waiter's deadline).
        case armTimer(Instant)
        /// Every connection is in use and a caller waits (reported once until one is idle).
        case reportExhausted(Counts)
        /// `count` waiters gave up (their deadline passed).
        case reportTimedOut(Int)
        /// The pool is closed and nothing is lent or being opened: `close()` can return.
        case drained
    }

    struct Counts: Equatable {
        var open: Int
        var idle: Int
        var leased: Int
        var waiting: Int
        var opening: Int
    }

    fileprivate struct Idle {
        let connection: Connection
        let since: Instant
        let affinity: Int?
    }

    fileprivate struct Shared {
        let connection: Connection
        var users: Int
        let affinity: Int?
    }

    fileprivate struct Waiter {
        let id: WaiterID
        let shared: Bool
        let deadline: Instant
        let affinity: Int?
        /// An idle connection is being checked for it.
        var checking = false
    }

    let limits: Limits
    private var idle: [Idle] = []
    private var shared: [Shared] = []
    private var lent: [ObjectIdentifier: Connection] = [:]
    private var affinities: [ObjectIdentifier: Int] = [:]
    private var opening = 0
    /// The waiters openings in flight were started for (nil entries: to keep the minimum).
    private var openingFor: [WaiterID?] = []
    private var waiters = WaiterQueue<Waiter>()
    private var timerArmed: Instant?
    private var exhaustionReported = false
    private var closed = false
    private var drainReported = false
    /// Replenishing failed; it is tried again when a connection opens or comes back.
    private var replenishPaused = false

    init(limits: Limits) {
        var limits = limits
        limits.maximumConnections = max(1, limits.maximumConnections)
        limits.minimumConnections = min(max(0, limits.minimumConnections), limits.maximumConnections)
        limits.maximumPipelineDepth = max(1, limits.maximumPipelineDepth)
        self.limits = limits
    }

    // MARK: What others may ask

    var total: Int { idle.count + shared.count + lent.count + opening }

    var counts: Counts {
        Counts(open: total, idle: idle.count, leased: lent.count + shared.count, waiting: waiters.count, opening: opening)
    }

    var isClosed: Bool { closed }

    /// Connections lent or shared now (a forced close closes these).
    var connectionsOut: [Connection] { Array(lent.values) + shared.map(\.connection) }

    /// Waiters in the order they will be served (for tests).
    var waitingOrder: [WaiterID] { waiters.elements.map(\.id) }

    // MARK: Acquiring

    /// A caller wants a connection: of its own (`shared: false`) or a place in a shared one's
    /// pipeline for one statement; `affinity`: the I/O thread it runs on, if any.
    mutating func acquire(_ id: WaiterID, shared wantsShared: Bool, deadline: Instant, affinity: Int?, now: Instant) -> Acquisition {
        guard !closed else { return .fail(Self.closedError) }
        let waiter = Waiter(id: id, shared: wantsShared, deadline: deadline, affinity: affinity)
        var actions: [Action] = []
        if waiters.isEmpty {
            switch take(for: waiter, now: now, into: &actions) {
            case .lent(let connection)?:
                return .lend(connection, actions)
            case .checking(let check)?:
                waiters.append(check)
                return .wait(actions + armTimer(for: deadline))
            case nil:
                break
            }
        }
        waiters.append(waiter)
        actions += armTimer(for: deadline)
        actions += serve(now: now)
        if !exhaustionReported, total >= limits.maximumConnections, waiters.firstIndex(where: { $0.id == id }) != nil {
            exhaustionReported = true
            actions.append(.reportExhausted(counts))
        }
        return .wait(actions)
    }

    /// Waiter `id`'s task was cancelled.
    mutating func cancelWaiter(_ id: WaiterID) -> [Action] {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return [] }
        waiters.remove(at: index)
        var error = PostgresError(kind: .queryCanceled, message: "the task was cancelled while waiting for a connection", sqlState: "57014")
        error.lostConnectionOutcome = .safe
        return [.fail(id, error)]
    }

    /// The timer armed for the earliest deadline fired: waiters whose deadline passed give up.
    mutating func timerFired(now: Instant) -> [Action] {
        timerArmed = nil
        let expired = waiters.elements.filter { $0.deadline <= now }
        if !expired.isEmpty { waiters.removeAll { $0.deadline <= now } }
        var actions: [Action] = expired.map { .fail($0.id, timeoutError) }
        if !expired.isEmpty { actions.append(.reportTimedOut(expired.count)) }
        if let earliest = waiters.elements.lazy.map(\.deadline).min() { actions += armTimer(for: earliest) }
        return actions
    }

    // MARK: Connections coming and going

    /// A connection opened (for waiter `forWaiter`, or to keep the minimum). It goes to the
    /// first waiter, whoever that is now.
    mutating func connectionOpened(_ connection: Connection, affinity: Int?, forWaiter: WaiterID?, now: Instant) -> [Action] {
        finishOpening(forWaiter)
        affinities[ObjectIdentifier(connection)] = affinity
        replenishPaused = false
        guard !closed else { return [closing(connection, .poolClosed)] + drainedIfDone() }
        var actions: [Action] = []
        makeAvailable(connection, now: now)
        actions += serve(now: now)
        actions += replenish()
        return actions
    }

    /// An opening failed. The waiter it was started for (if still waiting) gets the error;
    /// a connect timeout that outlasted its deadline is reported as the pool's timeout.
    mutating func connectionFailed(_ error: PostgresError, forWaiter: WaiterID?, now: Instant) -> [Action] {
        finishOpening(forWaiter)
        if forWaiter == nil { replenishPaused = true }
        var actions: [Action] = []
        if let forWaiter, let index = waiters.firstIndex(where: { $0.id == forWaiter && !$0.checking }) {
            let waiter = waiters.remove(at: index)
            var error = error
            if error.message.contains("connect timeout"), now >= waiter.deadline {
                error.kind = .poolTimeout
                error.message = "no database connection in time: connecting took too long. " + error.message
            }
            actions.append(.fail(waiter.id, error))
        }
        if closed { return actions + drainedIfDone() }
        return actions + serve(now: now)
    }

    /// A lent connection came back (`shared`: from a single statement).
    mutating func release(_ connection: Connection, shared wasShared: Bool, condition: ReturnCondition, now: Instant) -> [Action] {
        let key = ObjectIdentifier(connection)
        if wasShared {
            guard let index = shared.firstIndex(where: { $0.connection === connection }) else { return [] }
            shared[index].users -= 1
            if shared[index].users > 0 {
                // Still in use; a shared waiter at the head may take the freed place.
                return waiters.isEmpty ? [] : serve(now: now)
            }
            shared.remove(at: index)
        } else {
            guard lent.removeValue(forKey: key) != nil else { return [] }
        }
        return returned(connection, condition: condition, now: now)
    }

    /// A reset ended: the connection is ready again, or closed.
    mutating func resetFinished(_ connection: Connection, ok: Bool, now: Instant) -> [Action] {
        guard lent.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return [] }
        return returned(connection, condition: ok ? .clean : .broken, now: now, closeReason: .resetFailed)
    }

    /// A health check for waiter `id` ended. A connection that passed goes to the first
    /// waiter, whoever that is now, as an opened one does: not necessarily to `id`. An earlier
    /// waiter whose own check failed meanwhile has nothing assigned and comes first.
    mutating func healthChecked(_ connection: Connection, ok: Bool, waiter id: WaiterID, now: Instant) -> [Action] {
        guard lent.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return [] }
        if let index = waiters.firstIndex(where: { $0.id == id }) { waiters[index].checking = false }
        // A connection that broke since its check answered is as good as one that failed it.
        guard ok, !closed, !connection.isBroken else {
            return returned(connection, condition: .broken, now: now, closeReason: .failedHealthCheck)
        }
        // Checked just now: idle since now, so nobody checks it again before lending it.
        return returned(connection, condition: .clean, now: now)
    }

    /// Opens connections up to the minimum (at start, and after one was closed).
    mutating func replenish() -> [Action] {
        guard !closed, !replenishPaused else { return [] }
        var actions: [Action] = []
        while total < limits.minimumConnections {
            opening += 1
            openingFor.append(nil)
            actions.append(.open(forWaiter: nil, deadline: nil, affinity: nil))
        }
        return actions
    }

    // MARK: Closing

    /// Stops lending: waiters fail, idle connections close; `.drained` comes once nothing is
    /// lent or being opened.
    mutating func close() -> [Action] {
        guard !closed else { return drainedIfDone() }
        closed = true
        var actions: [Action] = waiters.elements.map { .fail($0.id, Self.closedError) }
        waiters.removeAll()
        for entry in idle { actions.append(closing(entry.connection, .poolClosed)) }
        idle.removeAll()
        return actions + drainedIfDone()
    }

    /// The grace period ended: what is still lent is closed under its borrowers.
    mutating func forceClose() -> [Action] {
        let out = connectionsOut
        lent.removeAll()
        shared.removeAll()
        return out.map { closing($0, .forced) } + drainedIfDone()
    }

    // MARK: The rules

    private enum Taken {
        case lent(Connection)
        case checking(Waiter)
    }

    /// Serves waiters in arrival order; stops at the first that cannot be served, then opens
    /// connections for the waiters no opening covers yet.
    private mutating func serve(now: Instant) -> [Action] {
        guard !closed else { return [] }
        var actions: [Action] = []
        var index = 0
        while index < waiters.count {
            let waiter = waiters[index]
            if waiter.checking {
                index += 1
                continue
            }
            switch take(for: waiter, now: now, into: &actions) {
            case .lent(let connection)?:
                waiters.remove(at: index)
                actions.append(.lend(waiter.id, connection))
            case .checking(let check)?:
                waiters[index] = check
                index += 1
            case nil:
                index = waiters.count // first come, first served: nobody overtakes this one
                actions += openForUncoveredWaiters()
            }
        }
        return actions
    }

    /// A connection for `waiter` from what the pool holds, if it has one for it now.
    private mutating func take(for waiter: Waiter, now: Instant, into actions: inout [Action]) -> Taken? {
        while let position = idle.lastIndex(where: { waiter.affinity != nil && $0.affinity == waiter.affinity }) ?? idle.indices.last {
            let entry = idle.remove(at: position)
            if entry.connection.isBroken {
                actions.append(closing(entry.connection, .broken))
                continue
            }
            if let limit = limits.healthCheckAfterIdle, entry.since.duration(to: now) > limit {
                lent[ObjectIdentifier(entry.connection)] = entry.connection
                var checking = waiter
                checking.checking = true
                actions.append(.healthCheck(entry.connection, waiter.id, deadline: waiter.deadline))
                return .checking(checking)
            }
            lendTo(waiter, entry.connection)
            return .lent(entry.connection)
        }
        // A connection of its own is opened while there is room (the server runs statements
        // of separate connections in parallel); only a full pool shares pipelines.
        guard waiter.shared, total >= limits.maximumConnections else { return nil }
        // The one place a shared connection is picked: the caller's own I/O thread first, then
        // the fewest users.
        var best: Int?
        var bestRank = (0, 0)
        for (position, entry) in shared.enumerated() where entry.users < limits.maximumPipelineDepth && !entry.connection.isBroken {
            let rank = (waiter.affinity != nil && entry.affinity == waiter.affinity ? 0 : 1, entry.users)
            if best == nil || rank < bestRank {
                best = position
                bestRank = rank
            }
        }
        guard let best else { return nil }
        shared[best].users += 1
        return .lent(shared[best].connection)
    }

    /// Opens connections while there is room and fewer openings are in flight than waiters
    /// (each attributed to the first waiter no opening was started for).
    private mutating func openForUncoveredWaiters() -> [Action] {
        // A full pool opens nothing (the common case under load: no need to count the line).
        guard total < limits.maximumConnections else { return [] }
        let demand = waiters.elements.count { !$0.checking }
        var actions: [Action] = []
        for waiter in waiters.elements where !waiter.checking && !openingFor.contains(waiter.id) {
            guard total < limits.maximumConnections, opening < demand else { break }
            opening += 1
            openingFor.append(waiter.id)
            actions.append(.open(forWaiter: waiter.id, deadline: waiter.deadline, affinity: waiter.affinity))
        }
        return actions
    }

    private mutating func closing(_ connection: Connection, _ reason: CloseReason) -> Action {
        affinities[ObjectIdentifier(connection)] = nil
        return .close(connection, reason)
    }

    private mutating func finishOpening(_ waiter: WaiterID?) {
        opening = max(0, opening - 1)
        if let index = openingFor.firstIndex(of: waiter) { openingFor.remove(at: index) }
    }

    private mutating func lendTo(_ waiter: Waiter, _ connection: Connection) {
        let key = ObjectIdentifier(connection)
        if waiter.shared {
            shared.append(Shared(connection: connection, users: 1, affinity: affinities[key]))
        } else {
            lent[key] = connection
        }
    }

    /// A connection is back in the pool's hands (no longer lent or shared).
    private mutating func returned(_ connection: Connection, condition: ReturnCondition, now: Instant, closeReason: CloseReason = .broken) -> [Action] {
        if closed { return [closing(connection, .poolClosed)] + drainedIfDone() }
        switch condition {
        case .clean:
            makeAvailable(connection, now: now)
            return serve(now: now)
        case .needsReset:
            lent[ObjectIdentifier(connection)] = connection
            return [.reset(connection)]
        case .broken:
            return [closing(connection, closeReason)] + serve(now: now) + replenish()
        }
    }

    private mutating func makeAvailable(_ connection: Connection, now: Instant) {
        idle.append(Idle(connection: connection, since: now, affinity: affinities[ObjectIdentifier(connection)]))
        exhaustionReported = false
    }

    private mutating func armTimer(for deadline: Instant) -> [Action] {
        if let armed = timerArmed, armed <= deadline { return [] }
        timerArmed = deadline
        return [.armTimer(deadline)]
    }

    private mutating func drainedIfDone() -> [Action] {
        guard closed, !drainReported, lent.isEmpty, shared.isEmpty, opening == 0 else { return [] }
        drainReported = true
        return [.drained]
    }

    private var timeoutError: PostgresError {
        PostgresError(
            kind: .poolTimeout,
            message: "no database connection became free in time; all \(limits.maximumConnections) are in use. Raise maximumConnections or find the slow queries")
    }

    static var closedError: PostgresError {
        PostgresError(kind: .poolClosed, message: "the connection pool is closed (the service is shutting down)")
    }
}

extension PoolStateMachine: Sendable where Connection: Sendable, Instant: Sendable {}
extension PoolStateMachine.Idle: Sendable where Connection: Sendable, Instant: Sendable {}
extension PoolStateMachine.Shared: Sendable where Connection: Sendable, Instant: Sendable {}
extension PoolStateMachine.Waiter: Sendable where Connection: Sendable, Instant: Sendable {}
