import Foundation
import Postgres

/// The repositories a backend service uses, over one connection pool.
///
/// Every call takes the acting user, and checks membership and role inside the SQL statement
/// that reads or writes: a family's data is reachable only by that family's caregivers.
///
/// ```swift
/// let pool = PostgresPool(configuration: PostgresConfiguration(databaseURL))
/// let store = Store(pool: pool)
/// try await store.checkSchema()
/// let children = try await store.children.list(as: userID)
/// ```
public struct Store: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    public var users: UserRepository { UserRepository(pool: pool) }
    public var children: ChildRepository { ChildRepository(pool: pool) }
    public var caregivers: CaregiverRepository { CaregiverRepository(pool: pool) }
    public var invites: InviteRepository { InviteRepository(pool: pool) }
    public var events: EventRepository { EventRepository(pool: pool) }

    /// Refuses to run against a database older than `SchemaVersion.required`.
    public func checkSchema() async throws {
        try await pool.withConnection { try await SchemaVersion.check($0) }
    }
}
