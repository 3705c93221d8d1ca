@testable import Postgres
import PropertyBased
import Testing

/// Random interleavings of callers (shared and exclusive), returns (clean, dirty, broken),
/// openings that succeed or fail, health checks, resets, deadlines, cancels and close, against
/// the pool's rules. Whatever the order:
///
/// - no connection is lent to two holders, or shared beyond the pipeline depth, or lent broken;
/// - no waiter is served while one that asked earlier still waits with nothing assigned
///   (first come, first served, so none can starve);
/// - never more connections than the maximum;
/// - every caller gets exactly one answer, and after close every connection is closed and the
///   pool reports drained exactly once.
@Suite struct PoolStateMachinePropertyTests {
    @Test func firstComeFirstServedAndNothingLentTwice() async {
        await propertyCheck(count: propertyRuns(300), input: Gen.int(in: 0...9_999).array(of: 10...250)) { script in
            var simulation = PoolSimulation(script: script)
            simulation.run()
        }
    }

    /// Found by the property above in a load run (seed ahklFy4tBSfcKlJbeRA+ld+0aXS+9yT/5iqMaN1gP4c=),
    /// shrunk by it to this script.
    @Test func counterexampleOfRun3() {
        var simulation = PoolSimulation(script: [190, 0, 0, 0, 0, 0, 0, 0, 5887, 3, 9485, 1, 0, 1035, 1, 0, 637, 128, 5907, 1151, 0, 0, 0, 0, 0, 0, 0, 0, 2226, 0, 1196, 1])
        simulation.run()
    }
}

private struct PoolSimulation {
    var h: PoolMachineHarness
    let script: [Int]
    var cursor = 0

    init(script: [Int]) {
        self.script = script
        let max = 1 + (script.first ?? 0) % 4
        h = PoolMachineHarness(.init(
            minimumConnections: (script.first ?? 0) % 2, maximumConnections: max,
            maximumPipelineDepth: 1 + (script.first ?? 0) % 3, healthCheckAfterIdle: .seconds(5)))
        h.apply(h.machine.replenish())
    }

    mutating func choose(_ count: Int) -> Int {
        guard cursor < script.count else { return 0 }
        defer { cursor += 1 }
        return script[cursor] % count
    }

    var holding: [UInt64] {
        h.arrivals.filter { id in h.connection(of: id).map { h.holders[ObjectIdentifier($0)]?.contains(id) == true } ?? false }
    }

    mutating func run() {
        while cursor < script.count {
            let waitingBefore = h.waiting
            let answeredBefore = Set(h.answers.keys)
            step()
            checkOrder(waitingBefore: waitingBefore, answeredBefore: answeredBefore)
            #expect(h.machine.total <= h.machine.limits.maximumConnections)
            #expect(h.machine.counts.open == h.alive.count + h.openings.count, "the pool's count of connections disagrees with what lives")
        }
        // Everyone lets go, everything completes, time passes, the pool closes.
        h.close()
        for _ in 0..<100 {
            if let id = holding.first { h.release(id, choose(3) == 0 ? .needsReset : .clean) }
            if !h.openings.isEmpty { h.finishOpening() }
            if !h.checks.isEmpty { h.finishCheck(ok: true) }
            if !h.resets.isEmpty { h.finishReset(ok: true) }
            h.advance(by: .seconds(1))
        }
        for id in h.arrivals { #expect(h.answers[id]?.count == 1, "waiter \(id) answered \(h.answers[id]?.count ?? 0) times") }
        #expect(h.drainedCount == 1)
        #expect(h.alive.isEmpty, "connections left open after close: \(h.alive.values)")
    }

    mutating func step() {
        switch choose(10) {
        case 0, 1, 2:
            h.acquire(shared: choose(2) == 0, affinity: choose(3) == 0 ? nil : choose(2), timeout: .seconds(1 + choose(8)))
        case 3, 4:
            let holders = holding
            guard !holders.isEmpty else { return }
            let condition: PoolMachineHarness.Machine.ReturnCondition = switch choose(5) {
            case 0: .needsReset
            case 1: .broken
            default: .clean
            }
            h.release(holders[choose(holders.count)], condition)
        case 5:
            if !h.openings.isEmpty {
                h.finishOpening(failing: choose(4) == 0 ? PostgresError(kind: .connectionFailure, message: "refused") : nil, affinity: choose(2))
            }
        case 6:
            if !h.checks.isEmpty { h.finishCheck(ok: choose(3) != 0) }
            if !h.resets.isEmpty { h.finishReset(ok: choose(4) != 0) }
        case 7:
            h.advance(by: .milliseconds(250 * (1 + choose(12))))
        case 8:
            let waiting = h.waiting
            if !waiting.isEmpty { h.cancel(waiting[choose(waiting.count)]) }
        default:
            // An idle connection breaks under the pool (a terminated backend).
            if choose(3) == 0, let victim = h.alive.values.filter({ c in h.holders[ObjectIdentifier(c)]?.isEmpty ?? true }).first {
                victim.isBroken = true
            }
        }
    }

    /// A waiter served in this step must not have had an earlier waiter still waiting, with
    /// nothing assigned, after the step.
    func checkOrder(waitingBefore: [UInt64], answeredBefore: Set<UInt64>) {
        let checking = Set(h.checks.map(\.1))
        let servedNow = h.arrivals.filter { id in
            !answeredBefore.contains(id) && h.connection(of: id) != nil
        }
        for served in servedNow {
            let earlierStillWaiting = h.waiting.filter { $0 < served && !checking.contains($0) }
            #expect(earlierStillWaiting.isEmpty, "waiter \(served) was served while \(earlierStillWaiting) (earlier) still wait")
        }
        _ = waitingBefore
    }
}
