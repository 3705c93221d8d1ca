@testable import Postgres
import Dispatch
import Synchronization

/// Keeps `loop`'s thread busy (awake, holding the loop) until the returned semaphore is
/// signalled: work offered meanwhile waits in its queue.
///
/// ```swift
/// let gate = await holdBusy(loop)
/// loop.runFromCaller { … }   // queued
/// gate.signal()
/// ```
func holdBusy(_ loop: EventLoop) async -> DispatchSemaphore {
    let started = Atomic<Bool>(false)
    let gate = DispatchSemaphore(value: 0)
    loop.execute {
        started.store(true, ordering: .releasing)
        gate.wait()
    }
    while !started.load(ordering: .acquiring) { await Task.yield() }
    return gate
}
