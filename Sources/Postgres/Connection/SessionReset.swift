import Foundation

/// What the pool reads about a connection it takes back, without hopping onto its thread.
struct PooledState: Equatable {
    var isBroken: Bool
    /// No transaction open and nothing in flight.
    var isIdle: Bool
    var isStreaming: Bool
    /// Something may have changed session state (SET, LISTEN, a temporary table…).
    var sessionDirty: Bool
}

extension PostgresConnection: PooledConnection {
    /// The connection's state as the pool sees it when it comes back.
    nonisolated var pooledState: PooledState {
        let mirror = core.mirror
        return PooledState(
            isBroken: mirror.broken.load(ordering: .acquiring), isIdle: mirror.isIdle,
            isStreaming: mirror.streaming.load(ordering: .acquiring), sessionDirty: mirror.sessionDirty.load(ordering: .acquiring))
    }

    /// A reset that takes longer than this closes the connection instead.
    static let resetDeadline: Duration = .seconds(10)

    /// Gets a returned connection ready for the next borrower, ignoring task cancellation:
    /// ends an open stream (a later read throws), rolls back a transaction left open, resets
    /// session state as `reset` says, runs `hook`. `false` if the connection is unusable.
    func prepareForReuse(_ reset: SessionReset, hook: (@Sendable (isolated PostgresConnection) async throws -> Void)?) async -> Bool {
        guard !isBroken else { return false }
        await closeStream(reason: "its connection went back to the pool")
        await waitUntilIdle()
        transactionToken = nil
        do {
            if isInTransaction { try await runControl("ROLLBACK", ignoringCancellation: true) }
            let dirty = core.mirror.sessionDirty.load(ordering: .acquiring)
            // Behind a pooler the session is not ours: a reset would reach whichever server
            // session the pooler picks, and nothing was kept in ours.
            switch isBehindPooler ? .never : reset {
            case .always:
                // Alone: in a multi-statement string it would run in an implicit transaction
                // block, where DISCARD ALL is refused.
                _ = try await perform(.simple("DISCARD ALL"), text: "DISCARD ALL", timeout: Self.resetDeadline, ignoringCancellation: true)
                _ = try await perform(.simple(SessionSettings.pinSQL), text: "session settings", timeout: Self.resetDeadline, ignoringCancellation: true)
                statements.removeAll()
                pendingDeallocations.removeAll()
                userPrepared = false
            case .tracked where dirty:
                let deallocate = userPrepared ? "DEALLOCATE ALL; " : ""
                let script = "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); CLOSE ALL; DISCARD TEMP; "
                    + deallocate + SessionSettings.pinSQL
                _ = try await perform(.simple(script), text: "session reset", timeout: Self.resetDeadline, ignoringCancellation: true)
                if userPrepared {
                    statements.removeAll()
                    pendingDeallocations.removeAll()
                    userPrepared = false
                }
            default:
                break
            }
            core.notificationHandler = nil
            core.breakHandler = nil
            core.mirror.sessionDirty.store(false, ordering: .releasing)
            if let hook { try await hook(self) }
        } catch {
            return false
        }
        return !isBroken
    }

    /// A round trip (an empty statement) that ignores task cancellation: the pool's health check.
    func ping(deadline: ContinuousClock.Instant) async -> Bool {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { return false }
        do {
            _ = try await perform(.simple(""), text: "", timeout: remaining, ignoringCancellation: true)
            return !isBroken
        } catch {
            return false
        }
    }
}
