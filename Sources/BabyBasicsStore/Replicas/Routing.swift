import Foundation
import Postgres

/// Where each store call runs: writes on the primary, reads on the replica when the router
/// allows it (see `ReplicaRouter`), else on the primary. Without a replica, everything runs on
/// the primary and nothing below costs anything.
struct Routing: Sendable {
    let primary: PostgresPool
    let router: ReplicaRouter?
    /// How a call runs again after an error that guarantees nothing was applied.
    let retry: RetryPolicy
    /// How long a read and a write may take in all (see `StoreDeadlines`).
    let deadlines: StoreDeadlines
    /// The push of committed changes where the database cannot send it (Citus).
    let announcer = ChangeAnnouncer()

    /// A read by `user`: `body` gets the pool to read from. A replica that fails for a reason
    /// of its own (lost, unreachable) is skipped and the read runs again on the primary;
    /// `retrying: false` (an export already writing to its consumer) never runs it twice.
    func reading<T>(
        as user: UUID, retrying: Bool = true, isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresPool) async throws -> T
    ) async throws -> T {
        try await mappingErrors(self, retrying: retrying, reading: true) {
            guard let router, await router.route(for: user) == .replica else { return try await body(primary) }
            do {
                return try await body(router.replica)
            } catch let error as PostgresError where retrying && ReplicaRouter.isReplicaFailure(error) {
                router.replicaFailed(error)
                return try await body(primary)
            } catch is ReplicaBehindCursor {
                return try await body(primary)
            }
        }
    }

    /// A write by `user`: afterwards, their reads must see it (see `ReplicaRouter.noteWrite`),
    /// also when its outcome is unknown (it may have committed).
    func writing<T>(
        as user: UUID, isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> T
    ) async throws -> T {
        do {
            let result = try await mappingErrors(self, body)
            if let router { await router.noteWrite(by: user) }
            return result
        } catch StoreError.outcomeUnknown(let reason) {
            if let router { await router.noteWrite(by: user) }
            throw StoreError.outcomeUnknown(reason: reason)
        }
    }

    /// Whether `pool` is the replica's.
    func isReplica(_ pool: PostgresPool) -> Bool { router.map { $0.replica === pool } ?? false }
}

/// A sync cursor stands beyond what the replica has replayed (the device synced on the
/// primary, or on a replica further ahead): the page is read on the primary instead, where
/// a cursor ahead of the data means a restore.
struct ReplicaBehindCursor: Error {}
