import CEventLoop
import Foundation
import Synchronization

/// One I/O thread: it waits on the sockets of the connections it owns (epoll on Linux, kqueue on
/// macOS), drives their non-blocking libpq state, fires their timers (connect, query and acquire
/// deadlines), and runs the jobs of the actors that use it as their executor.
///
/// A connection actor's executor is its loop, so the actor's code and the loop's I/O handling
/// never run at the same time: libpq is only ever touched by whoever runs the loop. Many
/// connections share a loop; a process has a few loops (`EventLoopGroup.shared`), not a thread
/// per connection.
///
/// Whoever runs the loop holds `execution`. That is the loop's own thread, except while it
/// sleeps in the poller: then a task that hops onto the loop from a plain thread (the pool's
/// calls offer theirs, see `offerCallingThread`) may run its job on that thread instead of
/// waking the loop to run it, the way an uncontended actor runs on its caller's thread. The
/// job sends its request itself; the loop's thread wakes once, for the answer, instead of
/// twice (once to send, once for the answer).
final class EventLoop: SerialExecutor, @unchecked Sendable {
    /// What the loop runs: a job isolated to a connection (this loop as its actor's serial
    /// executor), a job of a task that prefers this loop (`taskExecutor`) outside any actor,
    /// or a closure posted from another thread.
    private enum Work {
        case job(UnownedJob)
        case taskJob(UnownedJob)
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
    /// The thread that runs the loop now: the loop's own, or a caller's running a job in its
    /// place (`runInPlace`).
    private let threadID = Atomic<UInt>(0)
    private let loopThreadID = Atomic<UInt>(0)
    /// Held by whoever runs the loop; the loop's thread lets go of it only to sleep.
    private let execution = Mutex(())
    /// True while the loop's thread waits in the poller: a hint read before trying `execution`
    /// (`runInPlace`). A try that fails is not free: Swift's `Mutex` on Linux asks the kernel
    /// before it gives up (`FUTEX_TRYLOCK_PI`), and the loop's thread holds `execution`
    /// whenever it is awake, which is most of the time under load.
    private let pollerWaiting = Atomic<Bool>(false)
    /// Jobs and closures (`runFromCaller`) run on a caller's thread in place of the loop's (for
    /// tests and the bench).
    let jobsRunInPlace = Atomic<Int>(0)
    /// Times an offered hop tried to take the loop from its thread (for tests).
    let inPlaceTries = Atomic<Int>(0)
    /// Jobs that asked to run again on this loop from their own run (an `await` that needed a
    /// switch of executor the loop can make at once), and were run again at once.
    let jobsRunAgain = Atomic<Int>(0)
    /// Callers answered at the end of a batch (`answerAfterBatch`; for tests).
    let answersAfterBatch = Atomic<Int>(0)
    /// Answers a caller's thread waited for itself, and got, after sending its request in place
    /// of the loop (`awaitAnswerInPlace`; for tests).
    let answersInPlace = Atomic<Int>(0)
    /// Such waits given up (the time ran out, or work came for the loop): the loop's thread
    /// took the answer (for tests).
    let answerWaitsGivenUp = Atomic<Int>(0)
    /// How long a caller's thread waits at most for its own answer (`awaitAnswerInPlace`).
    let answerWaitLimit: Duration
    /// This loop as a task executor: tasks that prefer it run their code on the loop.
    let taskExecutor = LoopTaskExecutor()

    // State of whoever runs the loop (under `execution`).
    private var handlers: [UInt64: Handler] = [:]
    private var nextToken: UInt64 = 1
    private var timers = TimerHeap()
    private var running: [Work] = []
    private var afterBatch: [() -> Void] = []
    /// Callers' answers, given at the end of the batch (`answerAfterBatch`).
    private var answers: [() -> Void] = []
    /// Requests sent or queued on this loop's connections and not complete (`ConnectionDriver`).
    var requestsInFlight = 0
    /// True while a caller's thread runs in place of the loop's (`runInPlace`).
    private var runningInPlace = false
    /// The request whose answer the caller running in place may wait for (`awaitAnswerInPlace`).
    private var answerToAwait: (driver: ConnectionDriver, id: UInt64)?
    /// The job being run, and what it enqueued on this loop during its own run (see `run(_:)`).
    private var runningJob: UnsafeRawPointer?
    private var runAgain: Work?
    /// When the sleeping loop's thread wakes on its own: a job run in its place that starts a
    /// timer due sooner wakes it.
    private var sleepsUntil: ContinuousClock.Instant?
    /// How long the loop's thread sleeps at most while it watches a connection, so that a
    /// deadline started by a job run in its place needs no wake-up when it is further away
    /// than this (one second; tests set others).
    let longestSleep: Duration

    /// `name`: its thread's (`postgres-io-<index>` unless given; tests name theirs
    /// `postgres-io-t…`). `answerWaitLimit`: see `awaitAnswerInPlace` (tests set others).
    init(index: Int, name: String? = nil, longestSleep: Duration = .seconds(1), answerWaitLimit: Duration = .microseconds(300)) {
        self.index = index
        self.longestSleep = longestSleep
        self.answerWaitLimit = answerWaitLimit
        poller = bb_poller_create()
        var writeEnd: Int32 = -1
        wakeRead = bb_wakeup_create(&writeEnd)
        wakeWrite = writeEnd
        taskExecutor.attach(self)
        if poller < 0 || wakeRead < 0 {
            // No descriptors left: the loop cannot run. Connections on it fail to open.
            return
        }
        _ = bb_poller_add(poller, wakeRead, Int32(BB_INTEREST_READ), 0)
        let threadName = name ?? "postgres-io-\(index)"
        let thread = Thread { [self] in
            // Named from the thread itself: that also names the system thread (ps, /proc).
            Thread.current.name = threadName
            run()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Whether the loop could be set up (it has its poller and wake-up descriptors).
    var isUsable: Bool { poller >= 0 && wakeRead >= 0 }

    /// Whether the loop's thread sleeps (or is about to) with no work waiting: a job offered
    /// now runs in place (for tests).
    var isAsleep: Bool {
        pollerWaiting.load(ordering: .relaxed) && inbox.withLock { $0.sleeping && $0.work.isEmpty }
            && execution.withLockIfAvailable { _ in true } != nil
    }

    /// How many jobs and closures wait for the loop's thread (for tests).
    var queuedWork: Int { inbox.withLock { $0.work.count } }

    /// Whether the caller runs the loop now: on its thread, or running a job in its place.
    var inLoop: Bool { threadID.load(ordering: .relaxed) == currentThreadID() }

    // MARK: Executors

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        // The offering task's own hop: its address matches, and no task runs on this thread
        // (a task switching executors is no longer current when it enqueues itself; one
        // resuming another task's continuation is).
        if Self.canTellJobs, bb_offer_take(Unmanaged.passUnretained(self).toOpaque(), Self.address(of: job)) != 0,
           withUnsafeCurrentTask(body: { $0 == nil }), runInPlace(.job(job)) {
            return
        }
        if askedToRunAgain(.job(job), job) { return }
        submit(.job(job))
    }

    /// A job of a task that prefers this loop, outside any actor (`LoopTaskExecutor`).
    fileprivate func enqueueTaskJob(_ job: UnownedJob) {
        if askedToRunAgain(.taskJob(job), job) { return }
        submit(.taskJob(job))
    }

    /// A job is enqueued by its own run when its task's next `await` needs another executor
    /// than the one it ran with: isolated to a connection, or not; with this loop as its task
    /// executor, or none. The task gives up the thread right after, so it runs again at once,
    /// the way it asked (`run(_:)`), instead of going round the queue. Without this, every
    /// `await` inside a connection's code went round the queue once.
    private func askedToRunAgain(_ work: Work, _ job: UnownedJob) -> Bool {
        guard Self.canTellJobs, inLoop, let running = runningJob, running == Self.address(of: job), runAgain == nil else { return false }
        runAgain = work
        return true
    }

    private static func address(of job: UnownedJob) -> UnsafeRawPointer {
        unsafeBitCast(job, to: UnsafeRawPointer.self)
    }

    /// Whether a job's address can be compared with a task's (each is one pointer, and a task
    /// is its own job); else no job runs in place.
    private static let canTellJobs = MemoryLayout<UnownedJob>.size == MemoryLayout<UnsafeRawPointer>.size
        && MemoryLayout<UnsafeCurrentTask>.size == MemoryLayout<UnsafeRawPointer>.size

    /// Call just before the current task hops onto this loop (an `await` on a connection that
    /// lives on it): if the loop sleeps when the hop comes, the task's job runs on this thread
    /// in place of the loop's (`runInPlace`). Only the task that offered runs in place, and only
    /// in that hop: a continuation resumed from this thread (under a lock, say) never does.
    ///
    /// ```swift
    /// connection.loop.offerCallingThread()
    /// let rows = try await connection.query(sql)
    /// ```
    func offerCallingThread() {
        // A loop's own thread (a task that prefers one) keeps to its loop's work.
        guard Self.canTellJobs, !inLoop, bb_is_loop_thread() == 0 else { return }
        withUnsafeCurrentTask { task in
            guard let task else { return }
            bb_offer_set(Unmanaged.passUnretained(self).toOpaque(), unsafeBitCast(task, to: UnsafeRawPointer.self))
        }
    }

    /// Runs `body` as the loop, from a caller's thread that does not run a loop: at once on
    /// this thread in place of the loop's when the loop sleeps with no work waiting (as
    /// `offerCallingThread` lets a hop do), else on the loop's thread soon (`execute`). From
    /// the loop itself, it runs at once.
    ///
    /// ```swift
    /// loop.runFromCaller { connection.assumeIsolated { $0.queueIfReady(…) } }
    /// ```
    func runFromCaller(_ body: @escaping @Sendable () -> Void) {
        if inLoop { return body() }
        if bb_is_loop_thread() == 0, runInPlace(.closure(body)) { return }
        submit(.closure(body))
    }

    /// Runs `work` on the calling thread as the loop, if the loop's thread sleeps and no work
    /// waits before it (else returns false, and the work is queued as usual).
    private func runInPlace(_ work: Work) -> Bool {
        // An awake loop holds `execution`: no try (see `pollerWaiting`). The hint may be a
        // moment late either way; `execution` decides.
        guard pollerWaiting.load(ordering: .relaxed) else { return false }
        inPlaceTries.add(1, ordering: .relaxed)
        let ran: Bool? = execution.withLockIfAvailable { _ -> Bool in
            guard inbox.withLock({ $0.work.isEmpty }) else { return false }
            threadID.store(currentThreadID(), ordering: .relaxed)
            runningInPlace = true
            defer {
                runningInPlace = false
                answerToAwait = nil
                threadID.store(loopThreadID.load(ordering: .relaxed), ordering: .relaxed)
            }
            jobsRunInPlace.add(1, ordering: .relaxed)
            run(work)
            // What it left for the end of the batch (the flush of its request) runs now. What
            // it queued for the loop (it did not wake the loop for it) is the loop's to run:
            // nothing but this work runs on the caller's thread.
            runAfterBatch()
            if let (driver, id) = answerToAwait, requestsInFlight == 1, inbox.withLock({ $0.work.isEmpty }) {
                answerToAwait = nil
                // Not past the loop's next timer (a deadline of this request, say): the loop's
                // thread fires it, woken below when it would sleep past it.
                let now = ContinuousClock.now
                let limit = timers.nextDeadline.map { min(answerWaitLimit, $0 - now) } ?? answerWaitLimit
                if limit > .zero {
                    switch driver.awaitAnswerInPlace(id, upTo: limit, wake: wakeRead) {
                    case true?: answersInPlace.add(1, ordering: .relaxed)
                    case false?: answerWaitsGivenUp.add(1, ordering: .relaxed)
                    case nil: break
                    }
                    runAfterBatch()
                }
            }
            if needsLoopThread { bb_wakeup_signal(wakeWrite) }
            return true
        }
        return ran ?? false
    }

    /// After a run in place: whether work waits for the loop's thread, or a timer is due
    /// before the sleeping thread wakes on its own. (Under `execution`.)
    private var needsLoopThread: Bool {
        let leftWork = !inbox.withLock { $0.work.isEmpty }
        let soonerTimer = timers.nextDeadline.map { deadline in sleepsUntil.map { deadline < $0 } ?? true } ?? false
        return leftWork || soonerTimer
    }

    /// Lets the caller whose thread runs in place of the loop's now wait there for request
    /// `id`'s answer, once its request is written (`runInPlace`): its thread is then woken once
    /// per statement (by the answer), not twice (the loop's thread by the answer, then the
    /// caller's by the loop). Called by a connection, under `execution`; nothing happens when no
    /// caller runs in place.
    ///
    /// The wait is short (`answerWaitLimit`, 300 µs unless a test sets another, and never past
    /// the loop's next timer), and only taken when the request is the only one in flight on this
    /// loop. It ends as soon as work is posted to the loop (a cancel, another caller's request),
    /// so a caller's thread never holds the loop from others: the loop's thread then takes the
    /// answer as before. The blocked thread is one of Swift's cooperative pool's, for that
    /// short while.
    ///
    /// ```swift
    /// core.submit(request, deadline: deadline)
    /// loop.awaitAnswerInPlace(core, request.id)
    /// ```
    func awaitAnswerInPlace(_ driver: ConnectionDriver, _ id: UInt64) {
        guard runningInPlace else { return }
        answerToAwait = (driver, id)
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
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
        // A job running in place of the loop wakes it once, as it lets go, for what it queued
        // (runInPlace).
        let runningInPlace = inLoop && currentThreadID() != loopThreadID.load(ordering: .relaxed)
        let wake = inbox.withLock { inbox -> Bool in
            inbox.work.append(work)
            guard inbox.sleeping, !runningInPlace else { return false }
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
        let me = currentThreadID()
        loopThreadID.store(me, ordering: .relaxed)
        bb_mark_loop_thread()
        var events = [bb_event](repeating: bb_event(), count: 64)
        var count: Int32 = 0
        let clock = ContinuousClock()
        while true {
            let timeout = execution.withLock { _ -> Int32 in
                threadID.store(me, ordering: .relaxed)
                sleepsUntil = nil
                dispatch(&events, count: count)
                fireTimers(clock.now)
                runAfterBatch()
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
                    if pending.isEmpty { break }
                    running = pending
                    runWork()
                    fireTimers(clock.now)
                    pollWithoutWaiting(&events)
                    runAfterBatch()
                }
                // The loop wakes for its next timer, and after `longestSleep` at most while it
                // watches a connection. `sleepsUntil` is that instant itself (the poller's
                // timeout is rounded up to whole milliseconds).
                let now = clock.now
                var wakeAt = timers.nextDeadline
                if !handlers.isEmpty { wakeAt = min(wakeAt ?? now + longestSleep, now + longestSleep) }
                sleepsUntil = wakeAt
                return wakeAt.map { TimerHeap.milliseconds(from: now, to: $0) } ?? -1
            }
            pollerWaiting.store(true, ordering: .relaxed)
            count = bb_poller_wait(poller, &events, Int32(events.count), timeout)
            pollerWaiting.store(false, ordering: .relaxed)
            inbox.withLock { $0.sleeping = false }
        }
    }

    /// Calls `body` on the loop thread once the current batch of work, I/O and timers is done,
    /// before the loop waits again (connections flush their queued requests there, so that the
    /// requests of one batch leave in one write).
    func afterThisBatch(_ body: @escaping () -> Void) {
        assert(inLoop, "after-batch work was queued off its loop's thread")
        afterBatch.append(body)
    }

    /// Runs what waits for the end of the batch: first its writes (`afterThisBatch`), then the
    /// callers' answers (`answerAfterBatch`), and again while either queued more.
    private func runAfterBatch() {
        while !afterBatch.isEmpty || !answers.isEmpty {
            while !afterBatch.isEmpty {
                let batch = afterBatch
                afterBatch.removeAll(keepingCapacity: true)
                for body in batch { body() }
            }
            let batch = answers
            answers.removeAll(keepingCapacity: true)
            answersAfterBatch.add(batch.count, ordering: .relaxed)
            for body in batch { body() }
        }
    }

    /// Calls `body`, which answers a caller (resumes its continuation), once the current batch
    /// of work, I/O and timers is done: after the batch's writes, and after each connection
    /// the batch touched published its state for other threads (`ConnectionMirror`).
    ///
    /// - A caller answered then finds its connection as it is: a pool that takes the connection
    ///   back sees it idle, not still busy with the request just answered (which would send it
    ///   to a needless reset).
    /// - The answers of one batch reach the cooperative pool together, rather than one at a
    ///   time between reads, so its threads are woken less often: measured at C = P = 16
    ///   (`SELECT $1`), 1.5 → 1.0 context switches and 48 → 39 µs of CPU per statement.
    ///
    /// ```swift
    /// loop.answerAfterBatch { request.finish(.success(request.results)) }
    /// ```
    func answerAfterBatch(_ body: @escaping () -> Void) {
        assert(inLoop, "an answer was queued off its loop's thread")
        answers.append(body)
    }

    private func runWork() {
        for work in running { run(work) }
        running.removeAll(keepingCapacity: true)
    }

    /// Runs one piece of work, and again at once each time the job enqueues itself on this loop
    /// during its run (`askedToRunAgain`), eight times at most before it waits its turn.
    ///
    /// Whether a job isolated to a connection runs with this loop as its task executor is what
    /// its task prefers, which the runtime does not tell an executor. A plain caller's task
    /// prefers none, so none is tried first; a task that came from this loop's task executor
    /// prefers it. When a connection's job asks to run again on the connection, the `await`
    /// that made it wanted the other choice, and it runs again with that one.
    private func run(_ first: Work) {
        var work = first
        var prefersThisLoop = false
        for _ in 0..<8 {
            runAgain = nil
            switch work {
            case .closure(let body):
                body()
                return
            case .taskJob(let job):
                prefersThisLoop = true
                runningJob = Self.address(of: job)
                job.runSynchronously(on: taskExecutor.asUnownedTaskExecutor())
            case .job(let job):
                runningJob = Self.address(of: job)
                if prefersThisLoop {
                    job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: taskExecutor.asUnownedTaskExecutor())
                } else {
                    job.runSynchronously(on: asUnownedSerialExecutor())
                }
            }
            runningJob = nil
            guard let next = runAgain else { return }
            runAgain = nil
            jobsRunAgain.add(1, ordering: .relaxed)
            if case .job = work, case .job = next { prefersThisLoop.toggle() }
            work = next
        }
        // Still asking: it waits its turn behind the rest.
        inbox.withLock { $0.work.append(work) }
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

/// A loop as a task executor: a task that prefers it runs its code, outside any actor, on the
/// loop, and calls to the loop's connections need no hop between threads.
///
/// ```swift
/// try await withTaskExecutorPreference(connection.taskExecutor) { try await connection.query("SELECT 1") }
/// ```
final class LoopTaskExecutor: TaskExecutor, Sendable {
    /// Its loop, attached by the loop's init before either is seen by anyone else.
    private let loop = AtomicLazyReference<EventLoop>()

    fileprivate func attach(_ loop: EventLoop) {
        _ = self.loop.storeIfNil(loop)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        guard let loop = loop.load() else {
            // Not reachable (the loop attaches itself as it is made); the job still runs.
            return job.runSynchronously(on: asUnownedTaskExecutor())
        }
        loop.enqueueTaskJob(job)
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
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

    /// `count` loops of a test's own: their threads are named `prefix` and their index, and
    /// they sleep `longestSleep` at most while they watch a connection.
    init(count: Int, named prefix: String, longestSleep: Duration, answerWaitLimit: Duration = .microseconds(300)) {
        loops = (0..<max(1, count)).map {
            EventLoop(index: $0, name: prefix + String($0), longestSleep: longestSleep, answerWaitLimit: answerWaitLimit)
        }
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

    /// When the next live timer is due, if any.
    var nextDeadline: ContinuousClock.Instant? {
        mutating get {
            while let first = heap.first, !isLive(first.id) { removeFirst() }
            return heap.first?.deadline
        }
    }

    /// Milliseconds until the next live timer (rounded up), or -1 when there is none.
    mutating func millisecondsUntilNext(from now: ContinuousClock.Instant) -> Int32 {
        nextDeadline.map { Self.milliseconds(from: now, to: $0) } ?? -1
    }

    /// Whole milliseconds from `now` to `deadline`, rounded up (0 when it is past).
    static func milliseconds(from now: ContinuousClock.Instant, to deadline: ContinuousClock.Instant) -> Int32 {
        let remaining = now.duration(to: deadline)
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

/// Runs `body` on a short-lived thread of its own, named `postgres-helper`: connecting (a host
/// name lookup blocks), sending a cancel request, a blocking COPY. The name tells these apart
/// from threads that stay (the loops' `postgres-io-…`).
///
/// ```swift
/// runOnHelperThread { _ = LibPQConnection.start(keywords: keywords, values: values) }
/// ```
func runOnHelperThread(_ body: @escaping @Sendable () -> Void) {
    Thread.detachNewThread {
        Thread.current.name = helperThreadName
        body()
    }
}

/// The name of `runOnHelperThread`'s threads (15 bytes at most: Linux's limit for a name).
let helperThreadName = "postgres-helper"

/// The calling thread, as a number.
func currentThreadID() -> UInt {
    #if os(Linux)
    UInt(pthread_self())
    #else
    UInt(bitPattern: pthread_self())
    #endif
}
