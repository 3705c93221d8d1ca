/// A deadline for every database wait inside a piece of work: acquiring a connection,
/// connecting, each statement, the pause before a retry. Whatever the server does (answers
/// slowly, holds a lock, freezes, or the network goes silent), the work ends by then: with
/// `PostgresError.Kind.poolTimeout` while waiting for a connection, `.timeout` once a statement
/// ran (see the cancel protocol in ``PostgresConnection``).
///
/// Deadlines nest: inside one, a shorter one wins and a longer one changes nothing. A call's own
/// `timeout:` and the configuration's `queryTimeout` still apply when they are shorter.
///
/// ```swift
/// let dashboard = try await PostgresDeadline.within(.seconds(5)) {
///     try await pool.fetchAll(Row.self, "SELECT … FROM events WHERE child_id = \(id)")
/// }
/// ```
public enum PostgresDeadline {
    @TaskLocal static var current: ContinuousClock.Instant?

    /// Runs `body` with every database wait in it ending within `duration` from now (or
    /// earlier, when an enclosing deadline ends first).
    public static func within<T>(
        _ duration: Duration, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async rethrows -> T {
        try await at(.now + duration, body)
    }

    /// Runs `body` with every database wait in it ending by `instant` (or earlier, when an
    /// enclosing deadline ends first).
    public static func at<T>(
        _ instant: ContinuousClock.Instant, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async rethrows -> T {
        let deadline = current.map { min($0, instant) } ?? instant
        return try await $current.withValue(deadline, operation: body, isolation: isolation)
    }

    /// Runs `body` free of any enclosing deadline: the pool's own upkeep (a reset, a health
    /// check, connecting for the next waiter) must not inherit the deadline of the caller whose
    /// event happened to start it.
    static func none<T>(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async rethrows -> T {
        try await $current.withValue(nil, operation: body, isolation: isolation)
    }

    /// The current deadline, if any.
    public static var instant: ContinuousClock.Instant? { current }

    /// What is left of the current deadline (at least a millisecond, so a deadline that
    /// passed still ends the next wait at once); nil without one.
    static var remaining: Duration? {
        current.map { max(.milliseconds(1), ContinuousClock.now.duration(to: $0)) }
    }

    /// The earlier of `limit` and what is left of the current deadline.
    static func bounding(_ limit: Duration?) -> Duration? {
        guard let remaining else { return limit }
        guard let limit else { return remaining }
        return min(limit, remaining)
    }
}
