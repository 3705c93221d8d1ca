@testable import Postgres
import Dispatch
import PostgresTestKit
import Synchronization
import Testing

/// A task that hops onto a sleeping loop from a plain thread, having offered that thread, runs
/// its job there: its request leaves from the caller's thread and the loop's thread wakes only
/// for the answer. Nothing else ever runs on a caller's thread.
@Suite struct RunInPlaceTests {
    /// Loops of the tests' own, so that no other test's work keeps them awake. Their threads
    /// are named `postgres-io-t…` (ExecutorTests does not count them).
    static let quietLoop = EventLoop(index: 0, name: "postgres-io-t1")
    static let parkingLoop = EventLoop(index: 0, name: "postgres-io-t2")
    /// Sleeps an hour between events when nothing is due: a deadline started in place fires
    /// only if the job that started it woke the loop.
    static let drowsyLoop = EventLoop(index: 0, name: "postgres-io-t3", longestSleep: .seconds(3600))
    /// Sleeps a second at most while it watches a connection, as the shared loops do.
    static let tickingLoop = EventLoop(index: 0, name: "postgres-io-t4")
    static let choiceLoop = EventLoop(index: 0, name: "postgres-io-t6")
    static let busyLoop = EventLoop(index: 0, name: "postgres-io-t7")
    static let neighbourLoop = EventLoop(index: 0, name: "postgres-io-t8")
    static let awakeLoop = EventLoop(index: 0, name: "postgres-io-t9")
    static let closureLoop = EventLoop(index: 0, name: "postgres-io-t11")
    /// No timer of its own wakes it either: every hop onto it while it sleeps runs in place.
    static let poolLoops = EventLoopGroup(count: 1, named: "postgres-io-t5", longestSleep: .seconds(3600))

    /// An actor whose executor is a loop (no connection: the loop sleeps until asked).
    actor OnLoop {
        nonisolated let loop: EventLoop
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
        nonisolated let parked = Mutex<CheckedContinuation<Void, Never>?>(nil)

        init(loop: EventLoop) { self.loop = loop }

        /// The thread this actor's code runs on.
        func thread() -> UInt { currentThreadID() }

        /// Waits until someone resumes `parked`, then says which thread it continued on.
        func threadAfterParking() async -> UInt {
            await withCheckedContinuation { continuation in parked.withLock { $0 = continuation } }
            return currentThreadID()
        }
    }

    static func untilAsleep(_ loop: EventLoop) async {
        while !loop.isAsleep { await Task.yield() }
    }

    @Test func anOfferedHopOntoASleepingLoopRunsOnTheCallersThread() async {
        let loop = Self.quietLoop
        let actor = OnLoop(loop: loop)
        let loopThread = await actor.thread()

        await Self.untilAsleep(loop)
        let before = loop.jobsRunInPlace.load(ordering: .relaxed)
        let caller = currentThreadID()
        loop.offerCallingThread()
        let offered = await actor.thread()
        #expect(offered == caller, "the offered hop ran on another thread")
        #expect(offered != loopThread)
        #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == before + 1)

        // The same hop without the offer runs on the loop's thread.
        await Self.untilAsleep(loop)
        let plainCaller = currentThreadID()
        let plain = await actor.thread()
        #expect(plain == loopThread)
        #expect(plain != plainCaller)
        #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == before + 1)
    }

    @Test func aContinuationResumedFromAnOfferingThreadStillRunsOnTheLoop() async {
        let loop = Self.parkingLoop
        let actor = OnLoop(loop: loop)
        let loopThread = await actor.thread()
        let parkedTask = Task { await actor.threadAfterParking() }
        while actor.parked.withLock({ $0 == nil }) { await Task.yield() }

        await Self.untilAsleep(loop)
        let before = loop.jobsRunInPlace.load(ordering: .relaxed)
        // This task offers its thread, then resumes another task's continuation under a lock:
        // that task must not run here (it could need the lock, or be anything at all).
        let resumer = currentThreadID()
        loop.offerCallingThread()
        actor.parked.withLock { $0?.resume() }
        let resumedOn = await parkedTask.value
        #expect(resumedOn == loopThread)
        #expect(resumedOn != resumer)
        #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == before)
    }

    @Test func aLoopsOwnThreadNeverRunsAnotherLoopInPlace() async {
        let loop = Self.neighbourLoop
        let actor = OnLoop(loop: loop)
        let loopThread = await actor.thread()

        await Self.untilAsleep(loop)
        let before = loop.jobsRunInPlace.load(ordering: .relaxed)
        // A task that prefers another loop runs on that loop's thread, which has its own
        // connections to serve: it offers nothing.
        let ran = await Task(executorPreference: Self.busyLoop.taskExecutor) {
            loop.offerCallingThread()
            return await actor.thread()
        }.value
        #expect(ran == loopThread)
        #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == before)
    }

    /// An awake loop's thread holds the loop: an offered hop goes to its queue without trying
    /// to take it (a try that fails costs a system call on Linux).
    @Test func anOfferedHopOntoAnAwakeLoopTriesNothingAndQueues() async {
        let loop = Self.awakeLoop
        let actor = OnLoop(loop: loop)
        let loopThread = await actor.thread()

        // Keep the loop's thread busy (awake, holding the loop) until the hop waits in its queue.
        let gate = await holdBusy(loop)

        let triesBefore = loop.inPlaceTries.load(ordering: .relaxed)
        let inPlaceBefore = loop.jobsRunInPlace.load(ordering: .relaxed)
        let hop = Task {
            loop.offerCallingThread()
            return await actor.thread()
        }
        while loop.queuedWork == 0 { await Task.yield() }
        #expect(loop.inPlaceTries.load(ordering: .relaxed) == triesBefore, "the hop tried to take an awake loop")
        gate.signal()

        #expect(await hop.value == loopThread)
        #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == inPlaceBefore)
    }

    /// `runFromCaller`: on a sleeping loop the closure runs on the caller's thread, as the
    /// loop; on an awake one it waits its turn on the loop's thread; on the loop, it runs at once.
    @Test func aClosureFromACallerRunsInPlaceOnlyWhenTheLoopSleeps() async {
        let loop = Self.closureLoop
        let actor = OnLoop(loop: loop)
        let loopThread = await actor.thread()

        await Self.untilAsleep(loop)
        let caller = currentThreadID()
        let ranOn = Mutex<(thread: UInt, asLoop: Bool)?>(nil)
        loop.runFromCaller { ranOn.withLock { $0 = (currentThreadID(), loop.inLoop) } }
        let inPlace = ranOn.withLock { $0 }
        #expect(inPlace?.thread == caller, "the closure did not run before runFromCaller returned, on the caller's thread")
        #expect(inPlace?.asLoop == true)

        // Awake (busy with other work): queued, then run by the loop's thread.
        let gate = await holdBusy(loop)
        let queued = await withCheckedContinuation { (continuation: CheckedContinuation<UInt, Never>) in
            loop.runFromCaller { continuation.resume(returning: currentThreadID()) }
            #expect(loop.queuedWork == 1)
            gate.signal()
        }
        #expect(queued == loopThread)

        // From the loop's own thread: at once.
        let atOnce = await Task(executorPreference: loop.taskExecutor) { () -> Bool in
            let ran = Atomic<Bool>(false)
            loop.runFromCaller { ran.store(true, ordering: .relaxed) }
            return ran.load(ordering: .relaxed)
        }.value
        #expect(atOnce)
    }

    @Test(.timeLimit(.minutes(1))) func aDeadlineStartedInPlaceWakesTheSleepingLoop() async throws {
        try await expectDeadlineSentInPlace(on: Self.drowsyLoop, timeout: .milliseconds(200))
    }

    @Test func aDeadlineFurtherThanTheLoopsLongestSleepFiresToo() async throws {
        try await expectDeadlineSentInPlace(on: Self.tickingLoop, timeout: .milliseconds(1500))
    }

    /// A statement that sleeps 100 s, sent in place with `timeout`, ends with `.timeout`. (A
    /// loop that wakes each second may wake between the check and the hop: then the statement
    /// was queued, and it is tried again, ten times at most.)
    private func expectDeadlineSentInPlace(on loop: EventLoop, timeout: Duration) async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let connection = try await PostgresConnection.connect(database.configuration, deadline: .now + .seconds(60), on: loop)
        // Prepared now, so that the call below is one exchange, sent in place, and the server
        // says nothing until the sleep ends: only the deadline's timer can end the wait.
        _ = try await connection.query("SELECT pg_sleep(\(0.0))")

        var sentInPlace = false
        for _ in 0..<10 where !sentInPlace {
            await Self.untilAsleep(loop)
            let before = loop.jobsRunInPlace.load(ordering: .relaxed)
            await expectPostgresError(.timeout) {
                loop.offerCallingThread()
                _ = try await connection.query("SELECT pg_sleep(\(100.0))", timeout: timeout)
            }
            sentInPlace = loop.jobsRunInPlace.load(ordering: .relaxed) > before
        }
        #expect(sentInPlace, "the statement was never sent in place")
        // The connection stays usable, the answer of the next statement read by the loop.
        #expect(try await connection.query("SELECT 2").first?.decode(Int32.self, at: 0) == 2)
        await connection.close()
    }

    @Test func aPlainCallerOfThePoolSendsItsOwnStatementWhenTheLoopSleeps() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        // No timer of the pool's own falls due during the test (it would wake the loop).
        let options = PoolOptions(maximumConnections: 1, acquireTimeout: .seconds(3600), healthCheckAfterIdle: .seconds(3600))
        let pool = PostgresPool(configuration: database.configuration, options: options, loops: Self.poolLoops)
        let loop = Self.poolLoops.loops[0]
        let connection = try await pool.withConnection { $0 }
        #expect(connection.loop === loop)
        // Prepared first: then each call is one closure that queues it (queryFromCaller).
        #expect(try await pool.query("SELECT \(Int32(0))::int4").first?.decode(Int32.self, at: 0) == 0)
        for value in Int32(1)...3 {
            await Self.untilAsleep(loop)
            let before = loop.jobsRunInPlace.load(ordering: .relaxed)
            let queuedBefore = connection.core.mirror.queuedFromCaller.load(ordering: .relaxed)
            #expect(try await pool.query("SELECT \(value)::int4").first?.decode(Int32.self, at: 0) == value)
            #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == before + 1, "call \(value) did not run in place")
            #expect(connection.core.mirror.queuedFromCaller.load(ordering: .relaxed) == queuedBefore + 1)
            await Self.untilAsleep(loop)
            let transactionBefore = loop.jobsRunInPlace.load(ordering: .relaxed)
            let inTransaction = try await pool.transaction { connection in
                try await connection.query("SELECT \(value)::int4").first?.decode(Int32.self, at: 0)
            }
            #expect(inTransaction == value)
            #expect(loop.jobsRunInPlace.load(ordering: .relaxed) > transactionBefore, "the transaction's body did not run in place")
        }
        await pool.close()
    }

    /// A connection's code awaits its own methods many times per statement. Each `await` runs
    /// on at once when the job runs with the task executor its task prefers: none for a plain
    /// caller, the loop for a task that prefers the loop (which then asks once per hop, and is
    /// run again at once, never round the loop's queue).
    @Test func eachCallerRunsWithTheTaskExecutorItPrefers() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let loop = Self.choiceLoop
        let connection = try await PostgresConnection.connect(database.configuration, deadline: .now + .seconds(60), on: loop)
        _ = try await connection.query("SELECT \(Int32(0))::int4")

        let plainBefore = loop.jobsRunAgain.load(ordering: .relaxed)
        for value in Int32(1)...20 {
            #expect(try await connection.query("SELECT \(value)::int4").first?.decode(Int32.self, at: 0) == value)
        }
        #expect(loop.jobsRunAgain.load(ordering: .relaxed) == plainBefore, "a plain caller's job ran with a task executor it does not prefer")

        let preferringBefore = loop.jobsRunAgain.load(ordering: .relaxed)
        let values = try await Task(executorPreference: connection.taskExecutor) {
            var values: [Int32] = []
            for value in Int32(1)...20 {
                #expect(loop.inLoop)
                values.append(try await connection.query("SELECT \(value)::int4").first?.decode(Int32.self, at: 0) ?? -1)
            }
            return values
        }.value
        #expect(values == Array(1...20))
        let ranAgain = loop.jobsRunAgain.load(ordering: .relaxed) - preferringBefore
        #expect(ranAgain > 0 && ranAgain <= 20 * 4, "\(ranAgain) runs again for 20 statements")
        await connection.close()
    }
}
