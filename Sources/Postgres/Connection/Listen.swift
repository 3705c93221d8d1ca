import Synchronization
import Foundation

/// Notifications of the channels a connection listens to, as they arrive.
///
/// The connection's I/O thread reads the socket whenever it is readable, so a notification
/// arrives as soon as the server sends it (at the sender's COMMIT), not when the next statement
/// runs. The sequence ends when the task is cancelled; if the connection is lost it throws, and
/// the notifications sent meanwhile are lost (LISTEN again on a new connection, then re-read
/// what you were notified about). `PostgresListener` does that for you. A consumer that falls
/// more than 10,000 notifications behind is not silently skipped past: the sequence delivers
/// what it holds, then throws (`PostgresError.Kind.misuse`), and you re-read as after a loss.
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
    ///
    /// Behind a connection pooler (``isBehindPooler``) it throws `.misuse`: under transaction
    /// pooling the `LISTEN` stays on a server session that other clients then use, and the
    /// notifications never reach this one.
    public func listen(_ channel: String) async throws -> PostgresNotificationSequence {
        try await checkOwnership()
        if isBehindPooler {
            throw PostgresError(
                kind: .misuse,
                message: "LISTEN \(channel) through a connection pooler: under transaction pooling the notifications go to whichever client holds the server session, never reliably to this one. Listen on a connection to PostgreSQL itself (a URL without the pooler); behind a pooler in session mode, set PostgresConfiguration.pooler = .none")
        }
        let (stream, continuation) = AsyncThrowingStream<PostgresNotification, any Error>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let core = self.core
        core.notificationHandler = { notification in
            guard notification.channel == channel else { return }
            if case .dropped = continuation.yield(notification) {
                var error = PostgresError(kind: .misuse, message: "the consumer of LISTEN \(channel) fell more than 10,000 notifications behind, so some were dropped: re-read what you follow, then listen again")
                error.lostConnectionOutcome = .safe
                continuation.finish(throwing: error)
            }
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

/// Notifications of one channel on a dedicated connection that outlives connection loss.
///
/// It connects, runs `LISTEN`, and yields `.listening`; then every notification. When the
/// connection is lost (the backend was terminated, the server restarted, or the network went
/// silent: a `SELECT 1` sent after `healthCheckInterval` of quiet got no answer within the
/// same interval, nor its cancel request within a second) it connects again, listens again
/// and yields `.reconnected`: notifications sent in between may be lost, so re-read what you
/// were following. It stops when the consuming task is cancelled (or the stream is
/// dropped), and closes its connection.
///
/// ```swift
/// let listener = PostgresListener(configuration: configuration, channel: "child_changed")
/// for await event in listener.events() {
///     switch event {
///     case .listening, .reconnected: await refreshEveryone()
///     case .notification(let notification): await refresh(child: notification.payload)
///     }
/// }
/// ```
public struct PostgresListener: Sendable {
    /// What the listener reports.
    public enum Event: Sendable, Hashable {
        /// Listening for the first time: every notification sent from now on arrives.
        case listening
        /// Listening again after the connection was lost: some notifications may be missing.
        case reconnected
        /// The consumer fell more than 10,000 events behind: later notifications were dropped
        /// until there was room again, so some are missing. Re-read what you follow.
        case overflowed
        /// A notification of the channel.
        case notification(PostgresNotification)
        /// Listening cannot work with this configuration (through a connection pooler): the
        /// error says why and what to do. The sequence ends after it; it also went to the
        /// configuration's logger at `error`.
        case failed(reason: String)
    }

    public let configuration: PostgresConfiguration
    public let channel: String
    /// How long the connection may stay silent before a `SELECT 1` checks it (which then has
    /// the same time to answer).
    public var healthCheckInterval: Duration
    /// The wait between two connection attempts.
    public var retryDelay: Duration

    public init(configuration: PostgresConfiguration, channel: String, healthCheckInterval: Duration = .seconds(30), retryDelay: Duration = .milliseconds(250)) {
        self.configuration = configuration
        self.channel = channel
        self.healthCheckInterval = healthCheckInterval
        self.retryDelay = retryDelay
    }

    /// The events, until the consuming task is cancelled.
    public func events() -> AsyncStream<Event> {
        let (stream, raw) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingOldest(10_000))
        let continuation = GapReportingContinuation(raw)
        let listener = self
        let task = Task {
            var listenedBefore = false
            while !Task.isCancelled {
                do {
                    let connection = try await PostgresConnection.connect(listener.configuration)
                    do {
                        let notifications = try await connection.listen(listener.channel)
                        continuation.yield(listenedBefore ? .reconnected : .listening)
                        listenedBefore = true
                        try await listener.forward(notifications, from: connection, to: continuation)
                    } catch let error as PostgresError where error.kind == .misuse && !listenedBefore {
                        // Listening here can never work (a pooler is in between): say so and end.
                        await connection.close()
                        listener.configuration.logger.error("cannot listen", metadata: ["channel": "\(listener.channel)", "reason": "\(error.message)"])
                        continuation.yield(.failed(reason: error.message))
                        break
                    } catch {}
                    await connection.close()
                } catch {}
                if Task.isCancelled { break }
                try? await Task.sleep(for: listener.retryDelay)
            }
            continuation.finish()
        }
        raw.onTermination = { _ in task.cancel() }
        return stream
    }

    /// Forwards notifications until the connection is lost (throws) or the task is cancelled
    /// (returns). A silent connection is checked with `SELECT 1` and a deadline.
    private func forward(_ notifications: PostgresNotificationSequence, from connection: PostgresConnection,
                         to continuation: GapReportingContinuation) async throws {
        let interval = healthCheckInterval
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for try await notification in notifications { continuation.yield(.notification(notification)) }
            }
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: interval)
                    try await connection.execute("SELECT 1", timeout: interval)
                }
            }
            // The first to finish decides: cancellation (both end) or a lost connection.
            defer { group.cancelAll() }
            try await group.next()
        }
    }
}

/// Yields events into a bounded buffer; when one had to be dropped (the consumer is more than
/// the buffer behind), `.overflowed` goes in as soon as there is room again, before anything
/// newer: a gap is always reported, never silent.
final class GapReportingContinuation: Sendable {
    private let continuation: AsyncStream<PostgresListener.Event>.Continuation
    private let gap = Mutex(false)

    init(_ continuation: AsyncStream<PostgresListener.Event>.Continuation) {
        self.continuation = continuation
    }

    func yield(_ event: PostgresListener.Event) {
        gap.withLock { gap in
            if gap {
                guard case .enqueued = continuation.yield(.overflowed) else { return }
                gap = false
            }
            if case .dropped = continuation.yield(event) { gap = true }
        }
    }

    func finish() { continuation.finish() }
}

extension PostgresPool {
    /// A `PostgresListener` on this pool's server, with a connection of its own (LISTEN needs
    /// one session for as long as it listens; a pooled one is reset when it goes back).
    ///
    /// ```swift
    /// for await event in pool.listener(channel: "child_changed").events() { … }
    /// ```
    public func listener(channel: String) -> PostgresListener {
        PostgresListener(configuration: configuration, channel: channel)
    }
}
