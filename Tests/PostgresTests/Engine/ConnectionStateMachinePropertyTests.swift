@testable import Postgres
import PropertyBased
import Testing

/// Random event sequences against the connection's rules: requests of every kind, results
/// split across reads at random points, deadlines, cancels that hit or miss, a server that goes
/// silent, readers that fall behind or leave, a socket lost at any moment. Whatever the order:
///
/// - every caller is answered exactly once;
/// - results go to the request at the head of the line, in the order requests were sent;
/// - a script or stream is only sent with nothing else in flight, and a cancel only with one;
/// - nothing is sent while a cancel call is out;
/// - the timers the driver runs are always the ones the machine believes run, and none is left
///   when nothing is pending.
@Suite struct ConnectionStateMachinePropertyTests {
    @Test func everyCallerIsAnsweredOnceAndNoTimerIsLeftBehind() async {
        await propertyCheck(count: propertyRuns(400), input: Gen.int(in: 0...9_999).array(of: 10...300)) { script in
            var simulation = Simulation(script: script)
            simulation.run()
        }
    }
}

private struct Simulation {
    typealias Machine = ConnectionStateMachine
    typealias Event = Machine.ResultEvent

    var h = ConnectionMachineHarness(timings: .init(grace: .seconds(3), answerWait: .milliseconds(700), retry: .milliseconds(400)))
    let script: [Int]
    var cursor = 0
    var nextID: UInt64 = 1
    var submitted: [UInt64] = []
    var modes: [UInt64: Machine.Mode] = [:]
    /// What the server will still send for each request on the wire, in order.
    var planned: [UInt64: [Event]] = [:]
    /// Requests on the wire, in the order they were sent (the order results come back in).
    var wire: [UInt64] = []
    var buffered: [UInt64: Int] = [:]
    var silent = false

    init(script: [Int]) { self.script = script }

    /// The next choice among `count`, from the script (0 once it is used up).
    mutating func choose(_ count: Int) -> Int {
        guard cursor < script.count else { return 0 }
        defer { cursor += 1 }
        return script[cursor] % count
    }

    mutating func run() {
        while cursor < script.count, !h.machine.isClosed {
            step()
            check()
        }
        settleEverything()
        for id in submitted {
            #expect(h.answers[id]?.count == 1, "request \(id) (\(String(describing: modes[id]))) was answered \(h.answers[id]?.count ?? 0) times")
        }
        #expect(h.machine.activeTimers.isEmpty, "timers left behind: \(h.machine.activeTimers)")
        #expect(h.timers.isEmpty)
        #expect(h.machine.pendingCount == 0)
    }

    mutating func step() {
        switch choose(12) {
        case 0, 1, 2: submit()
        case 3, 4: pump()
        case 5, 6: read(upTo: 1 + choose(6))
        case 7: h.advance(by: .milliseconds(50 * (1 + choose(40))))
        case 8:
            let candidates = submitted.filter { h.live.contains($0) }
            if !candidates.isEmpty { h.interrupt(candidates[choose(candidates.count)]) }
        case 9:
            if let id = h.cancelsOut.first { h.cancelReturns(id) }
        case 10:
            switch choose(10) {
            case 0: h.lose()
            case 1: h.apply(h.machine.close())
            case 2, 3, 4: silent.toggle()
            default: takeRows()
            }
        default:
            if let stream = wire.first(where: { modes[$0] == .stream }), choose(3) == 0 {
                h.apply(h.machine.abandonStream(stream))
                buffered[stream] = 0
            } else {
                takeRows()
            }
        }
        forgetFinished()
    }

    mutating func submit() {
        let id = nextID
        nextID += 1
        let mode: Machine.Mode = switch choose(5) {
        case 0: .simple
        case 1: .stream
        default: .pipelined(steps: 1 + choose(3))
        }
        modes[id] = mode
        submitted.append(id)
        let deadline: Duration? = choose(3) == 0 ? .milliseconds(100 * (1 + choose(30))) : nil
        h.submit(id, mode, deadline: deadline, isCommit: choose(8) == 0)
    }

    mutating func pump() {
        let wireBefore = wire.filter { h.live.contains($0) }
        let outBefore = h.cancelsOut
        let sent = h.pump()
        if !sent.isEmpty {
            #expect(outBefore.isEmpty, "sent \(sent) while a cancel call was out")
        }
        var inFlight = wireBefore
        for id in sent {
            if modes[id] != nil, case .pipelined = modes[id]! {
                #expect(inFlight.allSatisfy { if case .pipelined = modes[$0]! { true } else { false } }, "pipelined \(id) joined a script or stream")
            } else {
                #expect(inFlight.isEmpty, "\(String(describing: modes[id])) \(id) sent with \(inFlight) in flight")
            }
            inFlight.append(id)
            wire.append(id)
            planned[id] = plan(for: modes[id]!)
        }
    }

    /// What a server and libpq hand back for a request of `mode`.
    mutating func plan(for mode: Machine.Mode) -> [Event] {
        let fails = choose(4) == 0
        switch mode {
        case .pipelined(let steps):
            let failing = fails ? choose(steps + 1) : -1 // == steps: a deferred error at the Sync
            var events: [Event] = []
            for step in 0..<steps {
                if step < failing || failing < 0 {
                    events += Event.step
                } else if step == failing {
                    events += [.failed("23505", .uniqueViolation), .endOfStep]
                } else {
                    events += [.aborted, .endOfStep]
                }
            }
            if failing == steps { events += [.failed("23503", .foreignKeyViolation), .endOfStep] }
            return events + [.sync]
        case .simple:
            return fails ? [.result, .failed("42601", .syntaxError), .endOfStep] : [.result, .result, .endOfStep]
        case .stream:
            let rows = [Event](repeating: .row, count: choose(6))
            return rows + (fails ? [.failed("22012", .divisionByZero)] : [.result]) + [.endOfStep, .sync]
        }
    }

    mutating func read(upTo count: Int) {
        guard !silent else { return }
        var taken = 0
        while taken < count, let head = wire.first, var events = planned[head], !events.isEmpty {
            #expect(h.machine.head == head, "the machine reads for \(String(describing: h.machine.head)), the server answers \(head)")
            guard h.machine.readDecision() == .read else { return }
            let event = events.removeFirst()
            planned[head] = events
            let rowsBefore = h.rowsDelivered[head] ?? 0
            h.apply(h.machine.received(event))
            if (h.rowsDelivered[head] ?? 0) > rowsBefore {
                buffered[head, default: 0] += 1
                h.streamHolds(head, buffered[head]!)
            }
            taken += 1
            forgetFinished()
        }
    }

    mutating func takeRows() {
        guard let stream = wire.first(where: { modes[$0] == .stream }), let rows = buffered[stream], rows > 0 else { return }
        buffered[stream] = rows - 1 - min(rows - 1, choose(300))
        h.streamHolds(stream, buffered[stream]!)
    }

    /// A request the machine completed (or lost) leaves the wire.
    mutating func forgetFinished() {
        wire.removeAll { !h.live.contains($0) }
        if h.machine.isBroken { wire.removeAll() }
        // A cancel that hits: the server ends the statement with 57014 once it reads it.
        for id in h.cancelsSent where wire.first == id {
            guard var events = planned[id], !events.isEmpty, choose(2) == 0 else { continue }
            if events.last == .sync, events.count == 1 { continue }
            events = [.failed("57014", .queryCanceled), .endOfStep] + (events.last == .sync ? [.sync] : [])
            planned[id] = events
        }
        h.cancelsSent.removeAll()
    }

    func check() {
        #expect(h.timersAgree(), "the driver runs \(h.timers.keys.sorted { "\($0)" < "\($1)" }), the machine believes \(h.machine.activeTimers)")
        for (id, answers) in h.answers { #expect(answers.count <= 1, "request \(id) answered \(answers.count) times") }
        if h.machine.pendingCount == 0 {
            #expect(h.machine.activeTimers.isEmpty, "nothing is pending, yet timers run: \(h.machine.activeTimers)")
        }
    }

    /// Let everything finish: the server speaks, cancels return, time passes.
    mutating func settleEverything() {
        silent = false
        for _ in 0..<200 {
            if !h.live.isEmpty || !h.cancelsOut.isEmpty || !h.timers.isEmpty {
                while let id = h.cancelsOut.first { h.cancelReturns(id) }
                pump()
                for stream in wire where modes[stream] == .stream {
                    buffered[stream] = 0
                    h.streamHolds(stream, 0)
                }
                read(upTo: 1_000)
                h.advance(by: .seconds(1))
                forgetFinished()
            } else {
                return
            }
        }
    }
}
