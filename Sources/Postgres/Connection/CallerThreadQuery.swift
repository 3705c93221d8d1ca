import Foundation
import Synchronization

/// A pool's shared statement, sent without moving the calling task onto the connection's I/O
/// thread.
///
/// A call isolated to the connection (`PostgresConnection.query`) switches the caller's task
/// onto the loop, runs there until the request is queued, and is resumed there with the
/// answer before it switches back to Swift's pool: two task switches and two jobs on the
/// loop's thread per statement. Here the caller stays where it is:
///
/// 1. It renders the statement on its own thread (its values bound, as always).
/// 2. It hands the loop one closure that finds the prepared statement and queues the request;
///    on a sleeping loop the closure runs on the caller's thread in place of the loop's
///    (`EventLoop.runFromCaller`).
/// 3. The answer resumes the caller's continuation straight onto Swift's pool. When the closure
///    ran on the caller's thread and the request is alone on the loop, that thread first waits
///    a moment for the answer itself (`EventLoop.awaitAnswerInPlace`): answered in time, the
///    task never suspends, and one thread wakes per statement instead of two.
///
/// It covers the common case only: an autocommit statement already prepared on the connection
/// (or the statement cache off, as behind PgBouncer), that cannot change the session, with no
/// open row stream or transaction on the connection. Anything else (the first use of a
/// statement on this connection, a quoted identifier, which libpq quotes on the loop) takes
/// the isolated path, which prepares, settles and checks as before. A statement the server
/// no longer knows is forgotten and run again, as there.
///
/// ```swift
/// // in PostgresPool.query, for a statement that may share its connection:
/// let rows = try await connection.queryFromCaller(sql, timeout: timeout, looked: looked)
/// ```
extension PostgresConnection {
    nonisolated func queryFromCaller(_ sql: SQL, timeout: Duration?, looked: SQL.ShapeLookup?) async throws -> PostgresRows {
        let rendered: RenderedSQL
        do {
            rendered = try sql.render(quoteIdentifier: { _ in throw TakeIsolatedPath() }, looked: looked)
        } catch is TakeIsolatedPath {
            return try await query(sql, timeout: timeout, looked: looked)
        }
        let deadline = Deadline(timeout ?? configuration.queryTimeout)
        let state = CallerRequestState()
        return try await observer.observe(ObservedStatement(text: rendered.text, parameterCount: rendered.types.count), server: server) {
            do {
                return try await sendFromCaller(rendered, state, timeout: deadline.remaining)
            } catch is TakeIsolatedPath {
                loop.offerCallingThread()
                return try await runIsolated(rendered, timeout: deadline.remaining)
            } catch let error as PostgresError where Self.isStalePlan(error) {
                // Only a named statement goes stale (an unnamed one is parsed each time).
                try await forgetStalePlan(rendered.cacheKey, error, idleBefore: state.idleAtSend.load(ordering: .acquiring))
                return try await runIsolated(rendered, timeout: deadline.remaining)
            }
        }
    }

    private nonisolated func sendFromCaller(_ rendered: RenderedSQL, _ state: CallerRequestState, timeout: Duration?) async throws -> PostgresRows {
        if Task.isCancelled { throw Self.cancelledBeforeSending }
        let deadline = PostgresDeadline.bounding(timeout)
        let id = Self.nextRequestID()
        let core = self.core, loop = self.loop
        let results = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[ResultStorage], any Error>) in
                loop.runFromCaller { [self] in
                    self.assumeIsolated { connection in
                        connection.queueIfReady(rendered, id: id, deadline: deadline, state: state, continuation: continuation)
                    }
                }
            }
        } onCancel: {
            // The loop may not have queued the request yet: its interrupt would then find
            // nothing, so the flag tells the loop not to send it (see `queueIfReady`).
            state.cancelled.store(true, ordering: .releasing)
            loop.execute { core.interrupt(id, .cancelled) }
        }
        guard let result = results.last else {
            throw PostgresError(kind: .protocolViolation, message: "the server sent no result for the statement")
        }
        if SessionSettings.changesSession(commandTag: result.commandTag) {
            // The text gave no sign of it (else it took the isolated path): the tag tells.
            core.mirror.sessionDirty.store(true, ordering: .releasing)
            if result.commandTag == "PREPARE" { await markUserPrepared() }
        }
        return PostgresRows(storage: result)
    }

    /// On the loop: queues `rendered` as request `id` when it can go without the isolated
    /// path's checks and preparation; else `continuation` hears `TakeIsolatedPath`.
    ///
    /// A cancel posts its interrupt after setting `state.cancelled`: if the interrupt ran first
    /// (and found no request), this sees the flag, and the request is never sent; else the
    /// interrupt runs after this, and finds the request.
    private func queueIfReady(
        _ rendered: RenderedSQL, id: UInt64, deadline: Duration?, state: CallerRequestState,
        continuation: CheckedContinuation<[ResultStorage], any Error>
    ) {
        if state.cancelled.load(ordering: .acquiring) { return continuation.resume(throwing: Self.cancelledBeforeSending) }
        guard transactionToken == nil, openStream == nil, !core.isBroken else {
            return continuation.resume(throwing: TakeIsolatedPath())
        }
        let step: Request.Step
        if configuration.statementCacheCapacity > 0 && !isBehindPooler {
            guard var cached = statements[rendered.cacheKey], !cached.touchesSession else {
                return continuation.resume(throwing: TakeIsolatedPath())
            }
            useCounter += 1
            cached.lastUse = useCounter
            statements[rendered.cacheKey] = cached
            step = .execute(name: cached.name, statement: rendered, resultFormat: cached.resultFormat)
        } else {
            guard !SessionSettings.mayChangeSession(rendered.text) else {
                return continuation.resume(throwing: TakeIsolatedPath())
            }
            step = .executeUnnamed(statement: rendered, resultFormat: .text)
        }
        let request = Request(id: id, kind: .extended([step]), text: rendered.text)
        request.continuation = continuation
        core.mirror.queuedFromCaller.add(1, ordering: .relaxed)
        state.idleAtSend.store(core.transactionStatus == .idle, ordering: .releasing)
        core.submit(request, deadline: deadline)
        // Run in place of a sleeping loop, this thread may wait for the answer itself.
        loop.awaitAnswerInPlace(core, id)
    }

    private func markUserPrepared() { userPrepared = true }

    /// The isolated path for a statement already rendered: its checks, then `run`, which
    /// prepares it when it must.
    private func runIsolated(_ rendered: RenderedSQL, timeout: Duration?) async throws -> PostgresRows {
        try await checkOwnership()
        return try await run(rendered, timeout: timeout)
    }

    /// The server dropped or invalidated a cached plan (DEALLOCATE, DISCARD, ALTER TABLE):
    /// it is forgotten. Sent outside a transaction (`idleBefore`), nothing of it ran, and the
    /// isolated path prepares and runs it again; inside one, the transaction is aborted, and
    /// the error goes to the caller (as from `run`).
    private func forgetStalePlan(_ key: StatementKey, _ error: PostgresError, idleBefore: Bool) throws {
        forgetStatement(key, stillExists: error.sqlState != "26000")
        guard idleBefore else { throw error }
    }
}

/// The statement needs the isolated path (`queryFromCaller`); never reaches a caller.
struct TakeIsolatedPath: Error {}

/// What the loop and the caller tell each other about one statement (`queryFromCaller`).
final class CallerRequestState: Sendable {
    /// The caller's task was cancelled.
    let cancelled = Atomic<Bool>(false)
    /// No transaction was open when the loop queued the statement.
    let idleAtSend = Atomic<Bool>(false)
}
