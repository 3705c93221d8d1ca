import CEventLoop
import Foundation
import Synchronization

/// One I/O thread: it waits on the sockets of the connections it owns (epoll on Linux, kqueue on
/// macOS), drives their non-blocking libpq state, fires their timers (connect, query and acquire
/// deadlines), and runs the jobs of the actors that use it as their executor.
///
/// A connection actor's executor is its loop, so the actor's code and the loop's I/O handling
/// never run at the same time: libpq is only ever touched from that one thread. Many
/// connections share a loop; a process has a few loops (`EventLoopGroup.shared`), not a thread
/// per connection.
final class EventLoop: SerialExecutor, TaskExecutor, @unchecked Sendable {
    /// What the loop runs: an actor or task job, or a closure posted from another thread.
    private enum Work {
        case job(UnownedJob)
        case closure(@Sendable () -> Void)
    }

    /// Receives readiness of a registered descriptor (called on the loop thread).
    protocol Handler: AnyObject {
        func ioReady(readable: Bool, writable: Bool, failed: Bool)
    }

    let index: Int
    private let poller: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32

    // Shared with other threads, under `inbox`.
    private struct Inbox {
        var work: [Work] = []
        var sleeping = false
    }
    private let inbox = Mutex(Inbox())
    private let threadID = Atomic<UInt>(0)

    // Loop-thread state.
    private var handlers: [UInt64: Handler] = [:]
    private var nextToken: UInt64 = 1
    private var timers = TimerHeap()
    private var running: [Work] = []
    private var afterBatch: [() -> Void] = []

    init(index: Int) {
        self.index = index
        poller = bb_poller_create()
        var writeEnd: Int32 = -1
        wakeRead = bb_wakeup_create(&writeEnd)
        wakeWrite = writeEnd
        if poller < 0 || wakeRead < 0 {
            // No descriptors left: the loop cannot run. Connections on it fail to open.
            return
        }
        _ = bb_poller_add(poller, wakeRead, Int32(BB_INTEREST_READ), 0)
        let thread = Thread { [self] in run() }
        thread.name = "postgres-io-\(index)"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Whether the loop could be set up (it has its poller and wake-up descriptors).
    var isUsable: Bool { poller >= 0 && wakeRead >= 0 }

    /// Whether the caller runs on this loop's thread.
    var inLoop: Bool { threadID.load(ordering: .relaxed) == currentThreadID() }

    // MARK: Executors

    func enqueue(_ job: consuming ExecutorJob) {
        submit(.job(UnownedJob(job)))
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    func isSameExclusiveExecutionContext(other: EventLoop) -> Bool { other === self }

    func checkIsolated() {
        if !inLoop { fatalError("code isolated to a Postgres event loop ran off its thread (a bug in the Postgres module)") }
    }

    /// Runs `body` on the loop thread soon (from any thread).
    func execute(_ body: @escaping @Sendable () -> Void) {
        submit(.closure(body))
    }

    private func submit(_ work: Work) {
        let wake = inbox.withLock { inbox -> Bool in
            inbox.work.append(work)
            guard inbox.sleeping else { return false }
            inbox.sleeping = false
            return true
        }
        if wake { bb_wakeup_signal(wakeWrite) }
    }

    // MARK: Descriptors (loop thread only)

    /// Watches `fd`; returns the token to modify or remove it with.
    func register(_ fd: Int32, interest: Int32, handler: Handler) -> UInt64? {
        let token = nextToken
        nextToken += 1
        guard bb_poller_add(poller, fd, interest, token) == 0 else { return nil }
        handlers[token] = handler
        return token
    }

    /// False when the descriptor is no longer registered (closed and reopened).
    func modify(_ fd: Int32, token: UInt64, interest: Int32) -> Bool {
        bb_poller_modify(poller, fd, interest, token) == 0
    }

    /// Drops a handler whose descriptor is already gone from the poller.
    func forget(_ token: UInt64) {
        handlers[token] = nil
    }

    func unregister(_ fd: Int32, token: UInt64) {
        _ = bb_poller_remove(poller, fd)
        handlers[token] = nil
    }

    // MARK: Timers (loop thread only)

    /// Calls `action` on the loop thread at `deadline`, unless cancelled first.
    @discardableResult
    func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping () -> Void) -> TimerHeap.ID {
        assert(inLoop, "a timer was scheduled off its loop's thread")
        return timers.insert(deadline, action)
    }

    func cancelTimer(_ id: TimerHeap.ID?) {
        assert(inLoop, "a timer was cancelled off its loop's thread")
        if let id { timers.cancel(id) }
    }

    // MARK: The loop

    private func run() {
        threadID.store(currentThreadID(), ordering: .relaxed)
        var events = [bb_event](repeating: bb_event(), count: 64)
        let clock = ContinuousClock()
        while true {
            // Work first; sleep only when there is none (the inbox flag makes posters wake us).
            let pending = inbox.withLock { inbox -> [Work] in
                if inbox.work.isEmpty {
                    inbox.sleeping = true
                    return []
                }
                var taken: [Work] = []
                swap(&taken, &inbox.work)
                return taken
            }
            if !pending.isEmpty {
                running = pending
                runWork()
                fireTimers(clock.now)
                pollWithoutWaiting(&events)
                runAfterBatch()
                continue
            }
            let timeout = timers.millisecondsUntilNext(from: clock.now)
            let count = bb_poller_wait(poller, &events, Int32(events.count), timeout)
            inbox.withLock { $0.sleeping = false }
            dispatch(&events, count: count)
            fireTimers(clock.now)
            runAfterBatch()
        }
    }

    /// Calls `body` on the loop thread once the current batch of work, I/O and timers is done,
    /// before the loop waits again (connections flush their queued requests there, so that the
    /// requests of one batch leave in one write).
    func afterThisBatch(_ body: @escaping () -> Void) {
        assert(inLoop, "after-batch work was queued off its loop's thread")
        afterBatch.append(body)
    }

    private func runAfterBatch() {
        while !afterBatch.isEmpty {
            let batch = afterBatch
            afterBatch.removeAll(keepingCapacity: true)
            for body in batch { body() }
        }
    }

    private func runWork() {
        for work in running {
            switch work {
            case .job(let job): job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            case .closure(let body): body()
            }
        }
        running.removeAll(keepingCapacity: true)
    }

    /// Between batches of work, sockets are still serviced (a busy loop never starves I/O).
    private func pollWithoutWaiting(_ events: inout [bb_event]) {
        let count = bb_poller_wait(poller, &events, Int32(events.count), 0)
        dispatch(&events, count: count)
    }

    private func dispatch(_ events: inout [bb_event], count: Int32) {
        guard count > 0 else { return }
        for index in 0..<Int(count) {
            let event = events[index]
            if event.token == 0 {
                bb_wakeup_drain(wakeRead)
                continue
            }
            handlers[event.token]?.ioReady(readable: event.readable != 0, writable: event.writable != 0, failed: event.failed != 0)
        }
    }

    private func fireTimers(_ now: ContinuousClock.Instant) {
        while let action = timers.popExpired(now) { action() }
    }
}

/// A group of loops; connections are spread over them in turn.
///
/// ```swift
/// let loop = EventLoopGroup.shared.next()
/// ```
final class EventLoopGroup: Sendable {
    let loops: [EventLoop]
    private let counter = Atomic<Int>(0)

    init(threads: Int) {
        loops = (0..<max(1, threads)).map { EventLoop(index: $0) }
    }

    /// The process's loops: one per two cores, at least one, at most four. The client's work is
    /// small next to the server's; more threads would only crowd the server's processes.
    static let shared = EventLoopGroup(threads: ProcessInfo.processInfo.environment["BB_POSTGRES_IO_THREADS"].flatMap(Int.init)
        ?? min(4, max(1, ProcessInfo.processInfo.activeProcessorCount / 2)))

    func next() -> EventLoop {
        loops[counter.add(1, ordering: .relaxed).oldValue % loops.count]
    }

    /// The loop whose thread the caller runs on (a task that prefers a loop as its executor),
    /// else the next one in turn: a connection opened there needs no hop for that caller.
    func currentOrNext() -> EventLoop {
        loops.first { $0.inLoop } ?? next()
    }

    /// The index of the loop whose thread the caller runs on, if any.
    var currentIndex: Int? { loops.firstIndex { $0.inLoop } }
}

/// Deadlines of one loop: a binary heap, with cancelled entries dropped when they surface.
///
/// Actions live in slots reused through a free list; an id is its slot and the slot's
/// generation, so a stale id (its timer fired or was cancelled, the slot reused) matches
/// nothing. Inserting and cancelling hash nothing: every statement with a deadline does both.
struct TimerHeap {
    typealias ID = UInt64

    private struct Slot {
        var generation: UInt32 = 0
        var action: (() -> Void)?
    }

    private var heap: [(deadline: ContinuousClock.Instant, id: ID)] = []
    private var slots: [Slot] = []
    private var free: [Int] = []
    private var live = 0

    mutating func insert(_ deadline: ContinuousClock.Instant, _ action: @escaping () -> Void) -> ID {
        let slot: Int
        if let reused = free.popLast() {
            slot = reused
        } else {
            slot = slots.count
            slots.append(Slot())
        }
        slots[slot].action = action
        live += 1
        let id = ID(slots[slot].generation) << 32 | ID(slot)
        heap.append((deadline, id))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
        return id
    }

    mutating func cancel(_ id: ID) {
        _ = take(id)
        // Keep the heap from growing with dead entries when timers are mostly cancelled.
        if heap.count > 64 && heap.count > live * 4 { rebuild() }
    }

    /// The action of timer `id`, its slot freed; nil when it fired or was cancelled already.
    private mutating func take(_ id: ID) -> (() -> Void)? {
        let slot = Int(id & 0xFFFF_FFFF)
        guard slot < slots.count, slots[slot].generation == UInt32(id >> 32), let action = slots[slot].action else { return nil }
        slots[slot].action = nil
        slots[slot].generation &+= 1
        free.append(slot)
        live -= 1
        return action
    }

    /// Entries the heap holds, cancelled ones not yet dropped included (for tests).
    var storedEntries: Int { heap.count }

    private func isLive(_ id: ID) -> Bool {
        let slot = Int(id & 0xFFFF_FFFF)
        return slot < slots.count && slots[slot].generation == UInt32(id >> 32) && slots[slot].action != nil
    }

    private mutating func rebuild() {
        heap = heap.filter { isLive($0.id) }.sorted { $0.deadline < $1.deadline }
    }

    /// The action of the earliest timer due by `now`, removed; nil when none is due.
    mutating func popExpired(_ now: ContinuousClock.Instant) -> (() -> Void)? {
        while let first = heap.first {
            if !isLive(first.id) {
                removeFirst()
                continue
            }
            guard first.deadline <= now else { return nil }
            removeFirst()
            return take(first.id)
        }
        return nil
    }

    /// Milliseconds until the next live timer (rounded up), or -1 when there is none.
    mutating func millisecondsUntilNext(from now: ContinuousClock.Instant) -> Int32 {
        while let first = heap.first, !isLive(first.id) { removeFirst() }
        guard let first = heap.first else { return -1 }
        let remaining = now.duration(to: first.deadline)
        guard remaining > .zero else { return 0 }
        let (seconds, attoseconds) = remaining.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: milliseconds)
    }

    private mutating func removeFirst() {
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count && heap[right].deadline < heap[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// The calling thread, as a number.
func currentThreadID() -> UInt {
    #if os(Linux)
    UInt(pthread_self())
    #else
    UInt(bitPattern: pthread_self())
    #endif
}
