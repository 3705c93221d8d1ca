@testable import Postgres
import Testing

/// An instant of a clock the test moves by hand.
struct ManualInstant: InstantProtocol {
    var offset: Duration
    func advanced(by duration: Duration) -> ManualInstant { ManualInstant(offset: offset + duration) }
    func duration(to other: ManualInstant) -> Duration { other.offset - offset }
    static func < (lhs: ManualInstant, rhs: ManualInstant) -> Bool { lhs.offset < rhs.offset }
}

/// A stand-in for a connection: an identity and a switch that breaks it.
final class StandInConnection: PooledConnection, CustomStringConvertible {
    let number: Int
    var isBroken = false
    init(_ number: Int) { self.number = number }
    var description: String { "c\(number)" }
}

/// Drives a `PoolStateMachine` as `PostgresPool` does, with stand-in connections and a manual
/// clock, keeping a record of what each waiter got and which connections live.
struct PoolMachineHarness {
    typealias Machine = PoolStateMachine<StandInConnection, ManualInstant>
    typealias ID = Machine.WaiterID

    var machine: Machine
    var now = ManualInstant(offset: .zero)
    var timeout: Duration
    var nextID: ID = 1
    var nextConnection = 1
    /// What each waiter got, in order (a correct machine gives exactly one answer).
    var answers: [ID: [Result<StandInConnection, PostgresError>]] = [:]
    /// Waiters in the order they asked.
    var arrivals: [ID] = []
    var sharedWaiters: Set<ID> = []
    /// Who holds which connection now: exclusive holders and shared users.
    var holders: [ObjectIdentifier: [ID]] = [:]
    /// Openings asked for and not yet reported, in order.
    var openings: [(waiter: ID?, deadline: ManualInstant?, affinity: Int?)] = []
    var checks: [(StandInConnection, ID)] = []
    var resets: [StandInConnection] = []
    var closed: [StandInConnection] = []
    var alive: [ObjectIdentifier: StandInConnection] = [:]
    var timers: [ManualInstant] = []
    var drainedCount = 0
    var exhaustedReports = 0
    var timedOut = 0

    init(_ limits: Machine.Limits, timeout: Duration = .seconds(10)) {
        machine = Machine(limits: limits)
        self.timeout = timeout
    }

    // MARK: Events

    /// A caller asks; returns its waiter id.
    @discardableResult
    mutating func acquire(shared: Bool = false, affinity: Int? = nil, timeout: Duration? = nil) -> ID {
        let id = nextID
        nextID += 1
        arrivals.append(id)
        if shared { sharedWaiters.insert(id) }
        switch machine.acquire(id, shared: shared, deadline: now.advanced(by: timeout ?? self.timeout), affinity: affinity, now: now) {
        case .lend(let connection, let actions):
            apply(actions)
            got(id, .success(connection))
        case .wait(let actions):
            apply(actions)
        case .fail(let error):
            got(id, .failure(error))
        }
        return id
    }

    /// The connection waiter `id` holds.
    func connection(of id: ID) -> StandInConnection? {
        guard case .success(let connection)? = answers[id]?.first else { return nil }
        return connection
    }

    mutating func release(_ id: ID, _ condition: Machine.ReturnCondition = .clean) {
        guard let connection = connection(of: id) else {
            Issue.record("waiter \(id) holds nothing")
            return
        }
        holders[ObjectIdentifier(connection)]?.removeAll { $0 == id }
        if condition == .broken { connection.isBroken = true }
        apply(machine.release(connection, shared: sharedWaiters.contains(id), condition: condition, now: now))
    }

    /// The oldest opening asked for succeeds (or fails with `error`).
    mutating func finishOpening(failing error: PostgresError? = nil, affinity: Int? = nil) {
        guard !openings.isEmpty else {
            Issue.record("no opening in flight")
            return
        }
        let opening = openings.removeFirst()
        if let error {
            apply(machine.connectionFailed(error, forWaiter: opening.waiter, now: now))
        } else {
            let connection = StandInConnection(nextConnection)
            nextConnection += 1
            alive[ObjectIdentifier(connection)] = connection
            apply(machine.connectionOpened(connection, affinity: affinity ?? opening.affinity, forWaiter: opening.waiter, now: now))
        }
    }

    mutating func finishCheck(ok: Bool) {
        guard !checks.isEmpty else {
            Issue.record("no health check in flight")
            return
        }
        let (connection, waiter) = checks.removeFirst()
        apply(machine.healthChecked(connection, ok: ok, waiter: waiter, now: now))
    }

    mutating func finishReset(ok: Bool) {
        guard !resets.isEmpty else {
            Issue.record("no reset in flight")
            return
        }
        apply(machine.resetFinished(resets.removeFirst(), ok: ok, now: now))
    }

    mutating func cancel(_ id: ID) { apply(machine.cancelWaiter(id)) }

    /// Moves the clock, firing the armed timers that come due.
    mutating func advance(by duration: Duration) {
        now = now.advanced(by: duration)
        let due = timers.filter { $0 <= now }
        timers.removeAll { $0 <= now }
        for _ in due { apply(machine.timerFired(now: now)) }
    }

    mutating func close() { apply(machine.close()) }

    mutating func apply(_ actions: [Machine.Action]) {
        for action in actions {
            switch action {
            case .lend(let id, let connection): got(id, .success(connection))
            case .fail(let id, let error): got(id, .failure(error))
            case .open(let waiter, let deadline, let affinity): openings.append((waiter, deadline, affinity))
            case .healthCheck(let connection, let waiter, _): checks.append((connection, waiter))
            case .reset(let connection): resets.append(connection)
            case .close(let connection, _):
                closed.append(connection)
                alive[ObjectIdentifier(connection)] = nil
            case .armTimer(let instant): timers.append(instant)
            case .reportExhausted: exhaustedReports += 1
            case .reportTimedOut(let count): timedOut += count
            case .drained: drainedCount += 1
            }
        }
    }

    private mutating func got(_ id: ID, _ result: Result<StandInConnection, PostgresError>) {
        answers[id, default: []].append(result)
        #expect(answers[id]!.count == 1, "waiter \(id) was answered \(answers[id]!.count) times")
        guard case .success(let connection) = result else { return }
        let key = ObjectIdentifier(connection)
        let current = holders[key] ?? []
        if sharedWaiters.contains(id) {
            #expect(current.allSatisfy { sharedWaiters.contains($0) }, "\(connection) joined by \(id) while held by \(current) alone")
            #expect(current.count < machine.limits.maximumPipelineDepth, "\(connection) shared by more than the pipeline depth")
        } else {
            #expect(current.isEmpty, "\(connection) lent to \(id) while held by \(current)")
        }
        #expect(!connection.isBroken, "a broken connection was lent")
        holders[key, default: []].append(id)
    }

    // MARK: Checks

    /// Waiters still waiting (asked, not answered), in arrival order.
    var waiting: [ID] { arrivals.filter { answers[$0] == nil } }

    func error(_ id: ID, sourceLocation: SourceLocation = #_sourceLocation) -> PostgresError? {
        guard case .failure(let error)? = answers[id]?.first else {
            Issue.record("waiter \(id) did not fail: \(String(describing: answers[id]))", sourceLocation: sourceLocation)
            return nil
        }
        return error
    }
}
