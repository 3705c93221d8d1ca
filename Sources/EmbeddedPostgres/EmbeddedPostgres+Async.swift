public import Foundation

/// The cluster's blocking operations (they run `initdb`, `pg_ctl` and `pg_basebackup` and wait
/// for them, for seconds), for async code: each runs on a thread of its own, so Swift's
/// cooperative threads — one per core, shared by every task of the process — never wait on a
/// child process. In an async context these are the ones the compiler picks.
///
/// ```swift
/// try await cluster.start()
/// defer { Task { try? await cluster.stop(immediate: true) } }
/// ```
extension EmbeddedPostgres {
    /// See the synchronous `start()`.
    @discardableResult
    public func start() async throws -> Status {
        try await runOnDedicatedThread { try self.start() }
    }

    /// See the synchronous `stop(immediate:)`.
    public func stop(immediate: Bool = false) async throws {
        try await runOnDedicatedThread { try self.stop(immediate: immediate) }
    }

    /// See the synchronous `remove()`.
    public func remove() async throws {
        try await runOnDedicatedThread { try self.remove() }
    }

    /// See the synchronous `startStandby(at:options:)`.
    public func startStandby(at directory: URL, options: Options? = nil) async throws -> EmbeddedPostgres {
        try await runOnDedicatedThread { try self.startStandby(at: directory, options: options) }
    }
}
