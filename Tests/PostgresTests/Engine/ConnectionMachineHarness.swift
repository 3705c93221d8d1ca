@testable import Postgres
import Testing

/// Drives a `ConnectionStateMachine` the way `ConnectionDriver` does, with a manual clock and
/// no server: it performs the machine's actions on a record (what was sent, kept, answered,
/// which timers run) that tests then assert on.
struct ConnectionMachineHarness {
    typealias Machine = ConnectionStateMachine
    typealias ID = Machine.RequestID

    var machine: Machine
    /// The manual clock: time since the harness started.
    var now: Duration = .zero
    /// Timers the machine started and has not stopped, with when they are due.
    var timers: [Machine.Timer: Duration] = [:]
    /// Every answer each caller got, in order (a correct machine gives exactly one).
    var answers: [ID: [Machine.Outcome]] = [:]
    /// Requests put on the wire, in order.
    var sent: [ID] = []
    /// Results kept for each request (`replacing` results keep only the last).
    var kept: [ID: Int] = [:]
    var rowsDelivered: [ID: Int] = [:]
    /// Cancel calls sent and not yet returned.
    var cancelsOut: [ID] = []
    var cancelsSent: [ID] = []
    var lostWith: [(ID, PostgresError)]?
    var resumeReadingAsked = 0
    var copiesAborted = 0
    /// Requests still being answered by the machine (submitted, not completed).
    var live: Set<ID> = []
    var transactionStatus = TransactionStatus.idle

    init(timings: Machine.CancelTimings = .init(), canCancel: Bool = true) {
        machine = Machine(timings: timings)
        apply(machine.startConnecting(timeout: .seconds(10), target: "test"))
        apply(machine.connected(canCancel: canCancel))
    }

    // MARK: Events

    mutating func submit(_ id: ID, _ mode: Machine.Mode, deadline: Duration? = nil, isCommit: Bool = false, changesNothing: Bool = false) {
        live.insert(id)
        apply(machine.submit(.init(id: id, mode: mode, isCommit: isCommit, changesNothing: changesNothing, deadline: deadline)))
    }

    /// Sends what may go now (the driver does this after every event).
    @discardableResult
    mutating func pump(serverEndedSession: Bool = false) -> [ID] {
        var now: [ID] = []
        while case .send(let id, _, _)? = machine.nextSend(transactionStatus: transactionStatus, serverEndedSession: serverEndedSession) {
            sent.append(id)
            now.append(id)
        }
        return now
    }

    /// One read: `events` in order, each only if the machine wants to read then. Returns how
    /// many were taken.
    @discardableResult
    mutating func read(_ events: [Machine.ResultEvent]) -> Int {
        var taken = 0
        for event in events {
            guard machine.readDecision() == .read else { break }
            apply(machine.received(event))
            taken += 1
        }
        return taken
    }

    mutating func interrupt(_ id: ID, _ reason: Machine.Interruption = .cancelled) {
        apply(machine.interrupt(id, reason))
    }

    mutating func cancelReturns(_ id: ID) {
        if let index = cancelsOut.firstIndex(of: id) { cancelsOut.remove(at: index) }
        apply(machine.cancelReturned(id))
    }

    /// Moves the clock forward, firing due timers in order (ties in a stable order).
    mutating func advance(by duration: Duration) {
        let target = now + duration
        while let next = timers.filter({ $0.value <= target }).min(by: { ($0.value, "\($0.key)") < ($1.value, "\($1.key)") }) {
            now = next.value
            timers[next.key] = nil
            apply(machine.timerFired(next.key))
        }
        now = target
    }

    mutating func lose(_ reason: String = "socket closed") {
        apply(machine.connectionLost(reason: reason))
    }

    mutating func streamHolds(_ id: ID, _ rows: Int) {
        apply(machine.streamBuffer(id, holds: rows))
    }

    mutating func apply(_ actions: Machine.Actions) {
        for action in actions { perform(action) }
    }

    private mutating func perform(_ action: Machine.Action) {
        switch action {
        case .keep(let id, let replacing):
            #expect(machine.head == id || live.contains(id), "a result was kept for \(id), which is not in flight")
            kept[id] = replacing ? 1 : (kept[id] ?? 0) + 1
        case .discard, .connected:
            break
        case .deliverRow(let id):
            rowsDelivered[id, default: 0] += 1
        case .dropRows:
            break
        case .abortCopy:
            copiesAborted += 1
        case .complete(let id, let outcome, let answerCaller):
            #expect(live.remove(id) != nil, "request \(id) completed twice")
            if answerCaller { answers[id, default: []].append(outcome) }
        case .answer(let id, let error):
            answers[id, default: []].append(.failure(error))
        case .sendCancel(let id):
            cancelsOut.append(id)
            cancelsSent.append(id)
        case .startTimer(let timer, let after):
            timers[timer] = now + after
        case .stopTimer(let timer):
            #expect(timers.removeValue(forKey: timer) != nil, "stopped \(timer), which was not running")
        case .resumeReading:
            resumeReadingAsked += 1
        case .lost(let failures):
            lostWith = failures
            for (id, error) in failures { answers[id, default: []].append(.failure(error)) }
            live.removeAll()
            timers.removeAll()
        case .connectFailed(let error):
            lostWith = []
            _ = error
        }
    }

    // MARK: Checks

    /// The one answer `id`'s caller got (and a test failure if it got none or several).
    func answer(_ id: ID, sourceLocation: SourceLocation = #_sourceLocation) -> Machine.Outcome? {
        let got = answers[id] ?? []
        #expect(got.count == 1, "request \(id) was answered \(got.count) times: \(got)", sourceLocation: sourceLocation)
        return got.first
    }

    func error(_ id: ID, sourceLocation: SourceLocation = #_sourceLocation) -> PostgresError? {
        guard case .failure(let error)? = answer(id, sourceLocation: sourceLocation) else {
            Issue.record("request \(id) did not fail", sourceLocation: sourceLocation)
            return nil
        }
        return error
    }

    /// The timers the harness runs are exactly those the machine believes it runs.
    func timersAgree(sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        Set(timers.keys) == machine.activeTimers
    }
}

extension ConnectionStateMachine.ResultEvent {
    /// A statement's result and the NULL after it.
    static let step: [Self] = [.result, .endOfStep]
    static func failed(_ state: String, _ kind: PostgresError.Kind = .otherServerError) -> Self {
        .error(PostgresError(kind: kind, message: "failed with \(state)", sqlState: state))
    }
}
