@testable import Postgres
import Foundation
import Synchronization
import Testing

/// A caller's answer is given at the end of the loop's batch: after the batch's writes, and
/// after its connection published its state, so the caller finds the connection as it is.
@Suite struct AnswerAfterBatchTests {
    /// A loop of the test's own (its thread is named `postgres-io-t…`).
    static let loop = EventLoop(index: 0, name: "postgres-io-t10")

    /// Within one batch: the work itself, then what waits for the batch's end (writes), then the
    /// answers; an answer or a write queued from there still runs before the loop waits again.
    @Test func answersComeAfterTheBatchAndItsWrites() async {
        let loop = Self.loop
        let order = Mutex<[String]>([])
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                loop.answerAfterBatch {
                    order.withLock { $0.append("answer 1") }
                    loop.afterThisBatch { order.withLock { $0.append("write queued by an answer") } }
                    loop.answerAfterBatch {
                        order.withLock { $0.append("answer queued by an answer") }
                        done.resume()
                    }
                }
                loop.afterThisBatch { order.withLock { $0.append("write") } }
                loop.answerAfterBatch { order.withLock { $0.append("answer 2") } }
                order.withLock { $0.append("work") }
            }
        }
        #expect(order.withLock { $0 } == ["work", "write", "answer 1", "answer 2", "write queued by an answer", "answer queued by an answer"])
    }

    /// A caller on the cooperative pool, answered, finds its connection idle at once: nothing
    /// pending, no transaction. (Answered before the connection published its state, a caller
    /// on another core could see its own request still pending.)
    @Test func anAnsweredCallerFindsItsConnectionIdle() async throws {
        let (connection, _) = try await freshConnection()
        let answeredBefore = connection.loop.answersAfterBatch.load(ordering: .relaxed)
        var busy = 0
        for step in 0..<300 {
            #expect(try await connection.fetchValue(Int.self, "SELECT \(step)::int8") == step)
            if !connection.pooledState.isIdle { busy += 1 }
        }
        #expect(busy == 0, "\(busy) of 300 answers came before their connection was idle")
        // A failing statement too.
        for _ in 0..<50 {
            await #expect(throws: PostgresError.self) { try await connection.execute("SELECT 1/0") }
            if !connection.pooledState.isIdle { busy += 1 }
        }
        #expect(busy == 0, "\(busy) of 50 errors came before their connection was idle")
        // Each answer, and each error, was given at the end of a batch.
        #expect(connection.loop.answersAfterBatch.load(ordering: .relaxed) - answeredBefore >= 350)
    }

    /// So the pool takes back each connection at once, clean: after each statement from one
    /// caller, none is still lent (a connection that looked busy would be lent until a reset).
    @Test func thePoolTakesEachConnectionBackAtOnce() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 2))
        var lent = 0
        for step in 0..<300 {
            #expect(try await pool.fetchValue(Int.self, "SELECT \(step)::int8") == step)
            if pool.statistics.inUse != 0 { lent += 1 }
        }
        #expect(lent == 0, "after \(lent) of 300 statements a connection was still lent")
        await pool.close()
    }
}
