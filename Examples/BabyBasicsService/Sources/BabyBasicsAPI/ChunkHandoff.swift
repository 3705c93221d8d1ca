import NIOCore

/// Hands the export's chunks to the HTTP response one at a time: the export waits until the
/// client has taken the previous chunk, so a slow download holds one chunk in memory, not the
/// whole file. When the response stops early (the client went away), the waiting export is
/// cancelled with it and gives its database connection back.
actor ChunkHandoff {
    private var pending: ByteBuffer?
    private var finished = false
    private var failure: (any Error)?
    private var cancelled = false
    private var producer: CheckedContinuation<Void, any Error>?
    private var consumer: CheckedContinuation<ByteBuffer?, any Error>?

    /// Called by the export for each chunk; returns once the response has taken it.
    func send(_ chunk: ByteBuffer) async throws {
        if cancelled { throw CancellationError() }
        if let consumer {
            self.consumer = nil
            consumer.resume(returning: chunk)
            return
        }
        pending = chunk
        try await withCheckedThrowingContinuation { producer = $0 }
    }

    /// The next chunk for the response; nil at the end. Throws the export's error.
    func next() async throws -> ByteBuffer? {
        if let chunk = pending {
            pending = nil
            producer?.resume()
            producer = nil
            return chunk
        }
        if finished {
            if let failure { throw failure }
            return nil
        }
        return try await withCheckedThrowingContinuation { consumer = $0 }
    }

    /// The export ended (`error` nil: completely).
    func finish(_ error: (any Error)?) {
        finished = true
        failure = error
        if let consumer {
            self.consumer = nil
            if let error { consumer.resume(throwing: error) } else { consumer.resume(returning: nil) }
        }
    }

    /// Whether the export waits for the response to take a chunk (for tests).
    var hasWaitingProducer: Bool { producer != nil }

    /// The response will take nothing more: a waiting export is cancelled.
    func cancel() {
        cancelled = true
        producer?.resume(throwing: CancellationError())
        producer = nil
    }
}

/// The chunks as an `AsyncSequence` for `ResponseBody(asyncSequence:)`. When the response
/// drops its iterator before the end, the export is cancelled.
struct HandoffChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let handoff: ChunkHandoff

    final class AsyncIterator: AsyncIteratorProtocol {
        let handoff: ChunkHandoff
        private var done = false
        init(handoff: ChunkHandoff) { self.handoff = handoff }

        func next() async throws -> ByteBuffer? {
            let chunk = try await handoff.next()
            if chunk == nil { done = true }
            return chunk
        }

        deinit {
            guard !done else { return }
            let handoff = self.handoff
            Task { await handoff.cancel() }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(handoff: handoff) }
}
