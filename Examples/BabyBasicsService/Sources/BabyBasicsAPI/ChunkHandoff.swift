import NIOCore

/// Hands the export's chunks to the HTTP response one at a time: the export waits until the
/// client has taken the previous chunk, so a slow download holds one chunk in memory, not the
/// whole file (and no database connection: the store reads its pages between chunks). A client
/// that takes nothing for `stall` ends the export: the response is cut off and the connection
/// closed. When the response stops early (the client went away), the waiting export is
/// cancelled with it.
actor ChunkHandoff {
    private var pending: ByteBuffer?
    private var finished = false
    private var failure: (any Error)?
    private var cancelled = false
    private var producer: CheckedContinuation<Void, any Error>?
    private var consumer: CheckedContinuation<ByteBuffer?, any Error>?
    private var stallTimer: Task<Void, Never>?
    private var sent = 0
    let stall: Duration

    init(stall: Duration = .seconds(30)) {
        self.stall = stall
    }

    /// Called by the export for each chunk; returns once the response has taken it. Throws
    /// `ExportStalled` when the client took nothing for `stall`.
    func send(_ chunk: ByteBuffer) async throws {
        if cancelled { throw failure ?? CancellationError() }
        if let consumer {
            self.consumer = nil
            consumer.resume(returning: chunk)
            return
        }
        pending = chunk
        sent += 1
        let number = sent
        let stall = self.stall
        stallTimer = Task { [weak self] in
            guard (try? await Task.sleep(for: stall)) != nil else { return }
            await self?.giveUp(on: number)
        }
        try await withCheckedThrowingContinuation { producer = $0 }
    }

    /// The client took nothing for `stall` since chunk `number` waited: the export ends.
    private func giveUp(on number: Int) {
        guard number == sent, pending != nil, let producer else { return }
        self.producer = nil
        pending = nil
        cancelled = true
        producer.resume(throwing: ExportStalled(after: stall))
        finish(ExportStalled(after: stall))
    }

    /// The next chunk for the response; nil at the end. Throws the export's error.
    func next() async throws -> ByteBuffer? {
        if let chunk = pending {
            pending = nil
            stallTimer?.cancel()
            stallTimer = nil
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
        guard !finished else { return }
        finished = true
        failure = error
        if let consumer {
            self.consumer = nil
            if let error { consumer.resume(throwing: error) } else { consumer.resume(returning: nil) }
        }
    }

    /// Whether the export waits for the response to take a chunk (for tests).
    var hasWaitingProducer: Bool { producer != nil }

    /// The response will take nothing more (or the service is shutting down): a waiting export
    /// is cancelled, and a waiting response ends.
    func cancel(_ reason: (any Error)? = nil) {
        cancelled = true
        stallTimer?.cancel()
        stallTimer = nil
        producer?.resume(throwing: reason ?? CancellationError())
        producer = nil
        pending = nil
        finish(reason ?? CancellationError())
    }
}

/// The client took no data for a while: its export was ended (the response cut off).
struct ExportStalled: Error, CustomStringConvertible {
    var after: Duration
    var description: String { "the client took no data for \(after); the export was ended" }
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
