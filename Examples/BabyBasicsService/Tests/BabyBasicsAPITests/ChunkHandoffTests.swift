@testable import BabyBasicsAPI
import NIOCore
import Testing

/// The export's hand-over to the response: one chunk at a time, and a consumer that leaves
/// releases the producer (so the export gives its database connection back).
@Suite(.timeLimit(.minutes(1))) struct ChunkHandoffTests {
    @Test func theProducerWaitsUntilTheConsumerTakesTheChunk() async throws {
        let handoff = ChunkHandoff()
        let sent = Task {
            try await handoff.send(ByteBuffer(string: "a"))
            return true
        }
        // Nothing has taken the chunk: the export is still waiting.
        try await Task.sleep(for: .milliseconds(200))
        #expect(await handoff.hasWaitingProducer)
        #expect(try await handoff.next() == ByteBuffer(string: "a"))
        #expect(try await sent.value)
        await handoff.finish(nil)
        #expect(try await handoff.next() == nil)
    }

    @Test func aConsumerThatLeavesCancelsTheWaitingProducer() async throws {
        let handoff = ChunkHandoff()
        let sent = Task { try await handoff.send(ByteBuffer(string: "a")) }
        try await Task.sleep(for: .milliseconds(100))
        var iterator: HandoffChunks.AsyncIterator? = HandoffChunks(handoff: handoff).makeAsyncIterator()
        _ = iterator
        iterator = nil          // the response stopped before the end
        await #expect(throws: CancellationError.self) { try await sent.value }
        // Later sends fail at once.
        await #expect(throws: CancellationError.self) { try await handoff.send(ByteBuffer(string: "b")) }
    }

    @Test func anErrorOfTheExportReachesTheConsumer() async throws {
        struct Broken: Error {}
        let handoff = ChunkHandoff()
        await handoff.finish(Broken())
        await #expect(throws: Broken.self) { _ = try await handoff.next() }
    }
}
