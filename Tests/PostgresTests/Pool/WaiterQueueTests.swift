@testable import Postgres
import Testing

/// The pool's line of waiters: first in, first out, whatever is removed from where, and across
/// the compaction of what was served.
@Suite struct WaiterQueueTests {
    @Test func staysInArrivalOrderAcrossRemovalsAndCompaction() {
        var queue = WaiterQueue<Int>()
        var model: [Int] = []
        var next = 0
        // Serve from the front, let some leave from the middle, keep arriving: 10,000 steps.
        for step in 0..<10_000 {
            switch step % 7 {
            case 0, 1, 2, 3:
                queue.append(next)
                model.append(next)
                next += 1
            case 4, 5:
                if !model.isEmpty { #expect(queue.remove(at: 0) == model.removeFirst()) }
            default:
                if model.count > 2 {
                    let middle = model.count / 2
                    #expect(queue.remove(at: middle) == model.remove(at: middle))
                }
            }
            #expect(queue.count == model.count && queue.isEmpty == model.isEmpty)
        }
        #expect(Array(queue.elements) == model)
        #expect(queue.firstIndex { $0 == model[3] } == 3)
        queue[0] = -1
        #expect(queue.elements.first == -1)
        queue.removeAll { $0 % 2 == 0 }
        #expect(Array(queue.elements) == ([-1] + model.dropFirst()).filter { $0 % 2 != 0 })
        while !queue.isEmpty { queue.remove(at: 0) }
        queue.append(7)
        #expect(Array(queue.elements) == [7])
    }
}
