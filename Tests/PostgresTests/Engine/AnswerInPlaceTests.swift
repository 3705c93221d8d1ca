@testable import Postgres
import PostgresTestKit
import Synchronization
import Testing

/// A caller's thread that sent its statement in place of a sleeping loop waits there a moment
/// for the answer itself (`EventLoop.awaitAnswerInPlace`): one thread wakes per statement, not
/// two. The wait is given up when the time runs out, when work comes for the loop (a cancel,
/// another caller), and at the loop's next timer; it is not taken when another statement is in
/// flight on the loop, or after recent waits ran out. Either way the answer is the same.
///
/// Serialized: a test here may hold one of Swift's two cooperative threads in a wait of up to a
/// minute (its loop's limit, not the 300 µs of the shared loops) until a cancel or another
/// caller ends it; two such waits at once would leave no thread to end them.
@Suite(.serialized) struct AnswerInPlaceTests {
    /// Waits up to a minute: a quick statement's answer always comes in time, however busy the
    /// machine is. Each test has its own loop: no other test's work wakes it.
    static let patientQuick = EventLoopGroup(count: 1, named: "postgres-io-t12", longestSleep: .seconds(1), answerWaitLimit: .seconds(60))
    static let patientCancel = EventLoopGroup(count: 1, named: "postgres-io-t13", longestSleep: .seconds(1), answerWaitLimit: .seconds(60))
    static let patientDeadline = EventLoopGroup(count: 1, named: "postgres-io-t14", longestSleep: .seconds(1), answerWaitLimit: .seconds(60))
    static let patientShared = EventLoopGroup(count: 1, named: "postgres-io-t15", longestSleep: .seconds(1), answerWaitLimit: .seconds(60))
    /// Waits 20 ms: a statement that sleeps a second on the server always runs out.
    static let hasty = EventLoopGroup(count: 1, named: "postgres-io-t16", longestSleep: .seconds(1), answerWaitLimit: .milliseconds(20))
    static let hastyShared = EventLoopGroup(count: 1, named: "postgres-io-t17", longestSleep: .seconds(1), answerWaitLimit: .milliseconds(20))

    private func pool(on loops: EventLoopGroup, connections: Int = 1, _ configure: (inout PostgresConfiguration) -> Void = { _ in }) async throws -> (PostgresPool, TestDatabase) {
        let database = try await TestPostgres.shared.makeDatabase()
        var configuration = database.configuration
        configuration.queryTimeout = .seconds(120)
        configure(&configuration)
        let options = PoolOptions(maximumConnections: connections, acquireTimeout: .seconds(120))
        return (PostgresPool(configuration: configuration, options: options, loops: loops), database)
    }

    private struct Counts: Equatable {
        var answered: Int
        var givenUp: Int
        init(_ loop: EventLoop) {
            answered = loop.answersInPlace.load(ordering: .relaxed)
            givenUp = loop.answerWaitsGivenUp.load(ordering: .relaxed)
        }
        init(answered: Int, givenUp: Int) {
            self.answered = answered
            self.givenUp = givenUp
        }
        func adding(answered: Int = 0, givenUp: Int = 0) -> Counts {
            Counts(answered: self.answered + answered, givenUp: self.givenUp + givenUp)
        }
    }

    /// Waits until `pid`'s statement runs on the server.
    private func untilRunning(_ pid: Int32, _ database: TestDatabase) async throws {
        let observer = try await database.connect()
        while try await observer.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND state = 'active'") != 1 {
            try await Task.sleep(for: .milliseconds(5))
        }
        await observer.close()
    }

    @Test(arguments: [true, false]) func aQuickAnswerIsReadByTheCallersOwnThread(statementCache: Bool) async throws {
        let (pool, _) = try await pool(on: Self.patientQuick) { if !statementCache { $0.statementCacheCapacity = 0 } }
        let loop = Self.patientQuick.loops[0]
        _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(0))::int4") // prepared on the isolated path
        for value in Int32(1)...5 {
            await RunInPlaceTests.untilAsleep(loop)
            let before = Counts(loop)
            #expect(try await pool.fetchValue(Int32.self, "SELECT \(value)::int4") == value)
            #expect(Counts(loop) == before.adding(answered: 1))
        }
        await pool.close()
    }

    /// The loop's thread takes an answer that comes after the wait's limit; the connection then
    /// lets its next chance go by, and waits again on the one after.
    @Test func aSlowAnswerIsLeftToTheLoopAndTheNextChanceIsLetGo() async throws {
        let (pool, _) = try await pool(on: Self.hasty)
        let loop = Self.hasty.loops[0]
        let slow: SQL = "SELECT \(Int32(7))::int4 FROM pg_sleep(\(1.0))"
        let quick: SQL = "SELECT \(Int32(8))::int4"
        _ = try await pool.fetchValue(Int32.self, quick)
        _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(7))::int4 FROM pg_sleep(\(0.0))")

        await RunInPlaceTests.untilAsleep(loop)
        var before = Counts(loop)
        #expect(try await pool.fetchValue(Int32.self, slow) == 7)
        #expect(Counts(loop) == before.adding(givenUp: 1))

        await RunInPlaceTests.untilAsleep(loop)
        before = Counts(loop)
        #expect(try await pool.fetchValue(Int32.self, quick) == 8)
        #expect(Counts(loop) == before, "the chance after a wait that ran out was not let go")

        await RunInPlaceTests.untilAsleep(loop)
        before = Counts(loop)
        #expect(try await pool.fetchValue(Int32.self, quick) == 8)
        let after = Counts(loop)
        #expect(after == before.adding(answered: 1) || after == before.adding(givenUp: 1), "the connection did not wait again")
        await pool.close()
    }

    /// A cancel posts work to the loop: the caller's wait ends at once, and the loop sends the
    /// server's cancel as always.
    @Test(.timeLimit(.minutes(2))) func aCancelEndsTheWait() async throws {
        let (pool, database) = try await pool(on: Self.patientCancel)
        let loop = Self.patientCancel.loops[0]
        _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(0.0))")
        let pid = try await pool.withConnection { $0.backendPID }
        await RunInPlaceTests.untilAsleep(loop)
        let before = Counts(loop)
        let task = Task { try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(60.0))") }
        try await untilRunning(pid, database)
        task.cancel()
        guard case .failure(let error as PostgresError) = await task.result else {
            Issue.record("expected a cancellation error")
            return
        }
        #expect(error.kind == .queryCanceled && error.sqlState == "57014")
        #expect(Counts(loop) == before.adding(givenUp: 1))
        #expect(try await pool.fetchValue(Int32.self, "SELECT \(Int32(2))::int4") == 2)
        await pool.close()
    }

    /// The wait never runs past the loop's next timer: here the statement's own deadline.
    @Test(.timeLimit(.minutes(2))) func aDeadlineEndsTheWait() async throws {
        let (pool, _) = try await pool(on: Self.patientDeadline)
        let loop = Self.patientDeadline.loops[0]
        _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(0.0))")
        await RunInPlaceTests.untilAsleep(loop)
        let before = Counts(loop)
        await expectPostgresError(.timeout) {
            _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(60.0))", timeout: .milliseconds(300))
        }
        #expect(Counts(loop) == before.adding(givenUp: 1))
        #expect(try await pool.fetchValue(Int32.self, "SELECT \(Int32(3))::int4") == 3)
        await pool.close()
    }

    /// Another caller's statement posted to the loop ends a wait; and a statement sent while
    /// another is in flight on the loop is not waited for: the loop's thread reads both.
    @Test(.timeLimit(.minutes(2))) func anotherCallerEndsTheWait() async throws {
        let (pool, database) = try await pool(on: Self.patientShared, connections: 2)
        let loop = Self.patientShared.loops[0]
        _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(0.0))")
        let pid = try await pool.withConnection { $0.backendPID }
        await RunInPlaceTests.untilAsleep(loop)
        let before = Counts(loop)
        let waiting = Task { try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(60.0))") }
        try await untilRunning(pid, database)
        // The other connection: its first statement is prepared on the isolated path, a job
        // posted to the loop.
        #expect(try await pool.fetchValue(Int32.self, "SELECT \(Int32(2))::int4") == 2)
        #expect(Counts(loop) == before.adding(givenUp: 1))
        waiting.cancel()
        await expectPostgresError(.queryCanceled) { _ = try await waiting.value }
        await pool.close()
    }

    @Test(.timeLimit(.minutes(2))) func aStatementNotAloneOnTheLoopIsNotWaitedFor() async throws {
        let (pool, database) = try await pool(on: Self.hastyShared, connections: 2)
        let loop = Self.hastyShared.loops[0]
        _ = try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(0.0))")
        let pid = try await pool.withConnection { $0.backendPID }
        let slow = Task { try await pool.fetchValue(Int32.self, "SELECT \(Int32(1))::int4 FROM pg_sleep(\(60.0))") }
        try await untilRunning(pid, database)
        let quick: SQL = "SELECT \(Int32(4))::int4"
        #expect(try await pool.fetchValue(Int32.self, quick) == 4) // prepared on the other connection
        for _ in 0..<3 {
            await RunInPlaceTests.untilAsleep(loop)
            let before = Counts(loop)
            let ranInPlace = loop.jobsRunInPlace.load(ordering: .relaxed)
            #expect(try await pool.fetchValue(Int32.self, quick) == 4)
            #expect(loop.jobsRunInPlace.load(ordering: .relaxed) == ranInPlace + 1, "the statement did not go from the caller's thread")
            #expect(Counts(loop) == before)
        }
        slow.cancel()
        await expectPostgresError(.queryCanceled) { _ = try await slow.value }
        await pool.close()
    }

    @Test func thePolicyLetsDoublingRunsOfChancesGoAfterWaitsThatRanOut() {
        var policy = AnswerWaitPolicy()
        let first = policy.mayWait()
        #expect(first)
        policy.record(answered: true)
        let afterAnswer = policy.mayWait()
        #expect(afterAnswer)
        var letGo: [Int] = []
        for _ in 0..<8 {
            policy.record(answered: false)
            var count = 0
            while !policy.mayWait() { count += 1 }
            letGo.append(count)
        }
        #expect(letGo == [1, 3, 7, 15, 31, 63, 63, 63])
        policy.record(answered: true)
        #expect(policy == AnswerWaitPolicy())
        let afterAnotherAnswer = policy.mayWait()
        #expect(afterAnotherAnswer)
    }
}
