import Foundation

/// Notifications of the channels a connection listens to, as they arrive.
///
/// The connection's I/O thread reads the socket whenever it is readable, so a notification
/// arrives as soon as the server sends it (at the sender's COMMIT), not when the next statement
/// runs. The sequence ends when the task is cancelled; if the connection is lost it throws, and
/// the notifications sent meanwhile are lost (LISTEN again on a new connection, then re-read
/// what you were notified about). `PostgresListener` does that for you.
///
/// ```swift
/// for try await notification in try await connection.listen("child_changed") {
///     print(notification.payload)
/// }
/// ```
public struct PostgresNotificationSequence: AsyncSequence, Sendable {
    public typealias Element = PostgresNotification
    let stream: AsyncThrowingStream<PostgresNotification, any Error>

    public func makeAsyncIterator() -> AsyncThrowingStream<PostgresNotification, any Error>.Iterator {
        stream.makeAsyncIterator()
    }
}

extension PostgresConnection {
    /// `LISTEN channel`, and the notifications of that channel from now on. One sequence per
    /// connection; a dedicated connection is best (not a pooled one: a pool's reset UNLISTENs).
    public func listen(_ channel: String) async throws -> PostgresNotificationSequence {
        try await checkOwnership()
        let (stream, continuation) = AsyncThrowingStream<PostgresNotification, any Error>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let core = self.core
        core.notificationHandler = { notification in
            if notification.channel == channel { continuation.yield(notification) }
        }
        core.breakHandler = {
            var error = PostgresError(kind: .connectionFailure, message: "the listening connection was lost; notifications sent meanwhile are lost: listen again on a new connection and re-read what changed")
            error.lostConnectionOutcome = .safe
            continuation.finish(throwing: error)
        }
        let loop = self.loop
        continuation.onTermination = { _ in
            loop.execute {
                core.notificationHandler = nil
                core.breakHandler = nil
            }
        }
        core.mirror.sessionDirty.store(true, ordering: .releasing)
        try await execute("LISTEN \(identifier: channel)")
        return PostgresNotificationSequence(stream: stream)
    }

    /// `NOTIFY channel, payload` (with `pg_notify`, so both are parameters). Delivered at COMMIT.
    public func notify(_ channel: String, payload: String = "") async throws {
        try await execute("SELECT pg_notify(\(channel), \(payload))")
    }
}
