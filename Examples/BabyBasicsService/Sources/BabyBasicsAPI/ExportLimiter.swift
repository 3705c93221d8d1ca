import Foundation
import ServiceLifecycle

/// How many CSV exports run at once: at most `perUser` for one user and `total` in all (half
/// the pool's connections by default, so exports never crowd out the dashboards even though
/// they hold a connection only while reading a page). On graceful shutdown every running
/// export is ended, so a client that stopped reading cannot keep the process alive.
///
/// ```swift
/// let limiter = ExportLimiter(perUser: 2, total: 8)
/// ```
public actor ExportLimiter {
    public let perUser: Int
    public let total: Int
    private var byUser: [UUID: Int] = [:]
    private var running: [UInt64: (user: UUID, handoff: ChunkHandoff)] = [:]
    private var nextTicket: UInt64 = 0
    private var closed = false
    /// Who waits in `shutDown()` for the running exports to end, by wait id.
    private var drainWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]

    public init(perUser: Int = 2, total: Int = 8) {
        self.perUser = max(1, perUser)
        self.total = max(1, total)
    }

    /// Why an export could not start.
    enum Refusal: Error {
        /// The user runs `perUser` already (429).
        case tooManyForUser(Int)
        /// `total` run already, or the service is shutting down (503).
        case busy
    }

    /// Exports running now.
    public var count: Int { running.count }

    /// Admits an export of `user`, or says why not.
    func begin(_ user: UUID, _ handoff: ChunkHandoff) throws(Refusal) -> UInt64 {
        guard !closed, running.count < total else { throw .busy }
        guard byUser[user, default: 0] < perUser else { throw .tooManyForUser(perUser) }
        nextTicket += 1
        byUser[user, default: 0] += 1
        running[nextTicket] = (user, handoff)
        return nextTicket
    }

    /// The export of `ticket` ended, however it ended.
    func end(_ ticket: UInt64) {
        guard let entry = running.removeValue(forKey: ticket) else { return }
        byUser[entry.user, default: 1] -= 1
        if byUser[entry.user] == 0 { byUser[entry.user] = nil }
        if running.isEmpty {
            for waiter in drainWaiters.values { waiter.resume() }
            drainWaiters.removeAll()
        }
    }

    /// Refuses new exports, ends the running ones (their responses are cut off), and returns
    /// once each has stopped reading from the store, so the pool can close after it (or when
    /// the calling task is cancelled: the group's shutdown limit).
    public func shutDown() async {
        closed = true
        for entry in running.values { await entry.handoff.cancel(ExportEnded()) }
        guard !running.isEmpty else { return }
        nextTicket += 1
        let id = nextTicket
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if running.isEmpty || Task.isCancelled { continuation.resume() } else { drainWaiters[id] = continuation }
            }
        } onCancel: {
            Task { await self.stopWaiting(id) }
        }
    }

    private func stopWaiting(_ id: UInt64) {
        drainWaiters.removeValue(forKey: id)?.resume()
    }
}

/// The service is shutting down: the export was ended.
struct ExportEnded: Error, CustomStringConvertible {
    var description: String { "the service is shutting down; the export was ended" }
}

/// A service of the group that, when graceful shutdown begins, ends the running exports before
/// the HTTP server waits for its requests to finish (it runs last, so it stops first).
struct ExportDrain: Service {
    let limiter: ExportLimiter

    func run() async throws {
        try? await gracefulShutdown()
        await limiter.shutDown()
    }
}
