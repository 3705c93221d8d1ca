@testable import Postgres
import Testing

/// The loop's timers, with a fixed `now` (no clock, no loop).
@Suite struct TimerHeapTests {
    let start = ContinuousClock.now

    /// Fires what is due at `now`, returning the tags of the actions run, in order.
    func fire(_ heap: inout TimerHeap, at now: ContinuousClock.Instant, _ log: Log) -> [Int] {
        let before = log.tags.count
        while let action = heap.popExpired(now) { action() }
        return Array(log.tags[before...])
    }

    final class Log { var tags: [Int] = [] }

    @Test func dueTimersFireInDeadlineOrderAndOnlyOnce() {
        var heap = TimerHeap()
        let log = Log()
        for (tag, ms) in [(3, 30), (1, 10), (2, 20), (4, 40)] {
            _ = heap.insert(start + .milliseconds(ms)) { log.tags.append(tag) }
        }
        #expect(fire(&heap, at: start + .milliseconds(5), log) == [])
        #expect(fire(&heap, at: start + .milliseconds(25), log) == [1, 2])
        #expect(fire(&heap, at: start + .milliseconds(25), log) == [])
        #expect(fire(&heap, at: start + .milliseconds(100), log) == [3, 4])
        #expect(heap.millisecondsUntilNext(from: start) == -1)
    }

    @Test func aCancelledTimerNeverFires() {
        var heap = TimerHeap()
        let log = Log()
        let first = heap.insert(start + .milliseconds(10)) { log.tags.append(1) }
        _ = heap.insert(start + .milliseconds(20)) { log.tags.append(2) }
        heap.cancel(first)
        #expect(heap.millisecondsUntilNext(from: start) == 20)
        #expect(fire(&heap, at: start + .milliseconds(30), log) == [2])
    }

    /// Slots are reused: the id of a timer that fired or was cancelled must not reach the
    /// timer that now holds its slot (a request's late stop would cancel another's deadline).
    @Test func aStaleIDDoesNotCancelTheTimerThatReusedItsSlot() {
        var heap = TimerHeap()
        let log = Log()
        let old = heap.insert(start + .milliseconds(10)) { log.tags.append(1) }
        heap.cancel(old)
        let reused = heap.insert(start + .milliseconds(10)) { log.tags.append(2) }
        #expect(reused & 0xFFFF_FFFF == old & 0xFFFF_FFFF, "the slot was reused")
        #expect(reused != old)
        heap.cancel(old) // late, and again
        #expect(fire(&heap, at: start + .milliseconds(10), log) == [2])

        let fired = heap.insert(start + .milliseconds(20)) { log.tags.append(3) }
        #expect(fire(&heap, at: start + .milliseconds(20), log) == [3])
        _ = heap.insert(start + .milliseconds(30)) { log.tags.append(4) }
        heap.cancel(fired) // the timer fired already: its id is stale
        #expect(fire(&heap, at: start + .milliseconds(30), log) == [4])
    }

    /// Mostly cancelled timers (every statement's deadline) do not pile up in the heap.
    @Test func cancelledTimersDoNotAccumulate() {
        var heap = TimerHeap()
        let log = Log()
        for round in 0..<10_000 {
            let id = heap.insert(start + .seconds(30)) { log.tags.append(round) }
            heap.cancel(id)
        }
        #expect(heap.storedEntries <= 64, "\(heap.storedEntries) dead entries kept")
        let kept = heap.insert(start + .seconds(1)) { log.tags.append(-1) }
        #expect(heap.millisecondsUntilNext(from: start) == 1000)
        #expect(fire(&heap, at: start + .seconds(60), log) == [-1])
        heap.cancel(kept)
        #expect(heap.millisecondsUntilNext(from: start) == -1)
    }
}
