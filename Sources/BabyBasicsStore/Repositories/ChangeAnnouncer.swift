import Foundation
import Postgres
import Synchronization

/// The push of a committed change (`NOTIFY child_changed`, what `Store.childChanges()` hears)
/// where the database cannot send it itself.
///
/// On one server the sync stamp's function sends it inside the writing transaction, so it is
/// delivered at commit and never for a rollback (0011). On a Citus coordinator it cannot: the
/// stamp is drawn on the worker that holds the child, whose NOTIFY no listener on the
/// coordinator hears, and a transaction that wrote on two nodes ends in `PREPARE TRANSACTION`,
/// which PostgreSQL refuses after a NOTIFY. 0027 takes the NOTIFY out there, and the store
/// announces each child a call changed itself, after the commit, on the coordinator.
///
/// Best effort, as a push is: the write is saved either way and the feed is the record. An
/// announcement lost (the process stopped between the commit and it, the coordinator
/// unreachable) delays the devices until their next poll; it is logged, never thrown.
final class ChangeAnnouncer: Sendable {
    private enum Need: Sendable { case unknown, yes, no }
    private let need = Mutex<Need>(.unknown)

    /// Whether the store must announce changes on this database (a Citus coordinator); asked
    /// of the database once.
    func isNeeded(on pool: PostgresPool) async throws -> Bool {
        switch need.withLock({ $0 }) {
        case .yes: return true
        case .no: return false
        case .unknown:
            let citus = try await pool.fetchValue(Bool.self, "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')") ?? false
            need.withLock { $0 = citus ? .yes : .no }
            return citus
        }
    }

    /// Announces that `children` changed, if the database does not (see the type); `children`
    /// is asked for only then.
    func announce(on pool: PostgresPool, _ children: () async throws -> [UUID]) async {
        do {
            guard try await isNeeded(on: pool) else { return }
            let changed = try await children()
            guard !changed.isEmpty else { return }
            _ = try await pool.query("SELECT pg_notify('child_changed', c::text) FROM unnest(\(changed)::uuid[]) AS c")
        } catch {
            pool.logger.warning("a committed change was not announced (child_changed): devices see it at their next sync", metadata: [
                "error": "\(String(describing: type(of: error)))",
            ])
        }
    }
}

extension Routing {
    /// After a committed write: announces that `children` changed where the database does not
    /// (a Citus coordinator; see `ChangeAnnouncer`).
    func announce(_ children: [UUID]) async {
        await announcer.announce(on: primary) { children }
    }
}
