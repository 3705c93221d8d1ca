/// Who runs what again, in one place.
///
/// Two layers retry, and nothing else does:
///
/// 1. **The pool, for one statement** (`PostgresPool.query`, `execute`, `fetch…`): a statement
///    whose connection was already dead when it went out (a backend terminated while idle in
///    the pool, a server restart) ran nowhere, so it is sent again on another connection at
///    once. Each try drops one dead connection, so there are at most as many as the pool holds
///    (`maximumConnections`). Nothing else is retried here: an error from a live server comes
///    back as it is.
/// 2. **The caller, for a unit of work** (one statement or one transaction), with
///    ``run(deadline:isolation:_:)``: an error whose ``PostgresError/retry`` is `.safe` (a serialization failure,
///    a deadlock, a lock or statement timeout on the server, a connection lost before anything
///    was applied) runs the whole unit again, up to ``attempts`` in all, after a short, growing,
///    jittered pause. `.outcomeUnknown` (a connection lost after a COMMIT was sent) is never
///    retried: it may have been applied. The store runs every call this way; a read the replica
///    could not serve moves to the primary inside the same attempt.
///
/// No attempt starts after the caller's task was cancelled, or when its pause would end past
/// `deadline` (by default the task's ``PostgresDeadline``).
///
/// ```swift
/// let policy = RetryPolicy()
/// try await policy.run {
///     try await pool.transaction { try await $0.execute("UPDATE counters SET n = n + 1 WHERE id = \(id)") }
/// }
/// ```
public struct RetryPolicy: Sendable {
    /// Attempts in all, the first included (1: never retry).
    public var attempts: Int
    /// The pause before attempt `n` (2, 3…).
    public var backoff: @Sendable (_ attempt: Int) -> Duration
    /// Runs before each retry (before its pause), with the attempt about to run and the error
    /// that caused it: a log line, a metric, or in a test the step that makes the next attempt
    /// succeed (releasing the lock the first one timed out on).
    public var beforeRetry: (@Sendable (_ attempt: Int, _ error: PostgresError) async -> Void)?

    /// Three attempts, pausing 10–40 ms times the attempt number before each retry: callers
    /// that collided (a deadlock, a serialization failure) do not collide again.
    public init(attempts: Int = 3, backoff: @escaping @Sendable (Int) -> Duration = RetryPolicy.jitteredBackoff,
                beforeRetry: (@Sendable (Int, PostgresError) async -> Void)? = nil) {
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.beforeRetry = beforeRetry
    }

    /// 10–40 ms times (attempt − 1).
    public static let jitteredBackoff: @Sendable (Int) -> Duration = { attempt in
        .milliseconds(Int.random(in: 10...40) * max(1, attempt - 1))
    }

    /// Whether `error` on attempt `attempt` may run again under this policy.
    public func shouldRetry(_ error: PostgresError, attempt: Int) -> Bool {
        error.retry == .safe && attempt < attempts && !Task.isCancelled
    }

    /// Runs `body`, again after an error whose `retry` is `.safe`, up to `attempts` in all, and
    /// never past `deadline` (by default the task's ``PostgresDeadline``).
    public func run<T>(
        deadline: ContinuousClock.Instant? = nil, isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> T
    ) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error as PostgresError where shouldRetry(error, attempt: attempt) {
                attempt += 1
                let pause = backoff(attempt)
                if let end = deadline ?? PostgresDeadline.current, ContinuousClock.now + pause >= end { throw error }
                await beforeRetry?(attempt, error)
                try await Task.sleep(for: pause)
            }
        }
    }

    /// The pool's own rule (layer 1): the statement failed only because its connection was
    /// already gone when it was sent, so nothing of it ran and another connection may run it.
    static func isStaleConnection(_ error: PostgresError, connectionBroken: Bool) -> Bool {
        [.connectionFailure, .adminShutdown].contains(error.kind) && error.retry == .safe && connectionBroken && !Task.isCancelled
    }
}
