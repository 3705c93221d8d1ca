import Foundation
import Postgres

/// The repositories a backend service uses, over one connection pool.
///
/// Every call takes the acting user, and checks membership and role inside the SQL statement
/// that reads or writes: a family's data is reachable only by that family's caregivers.
///
/// ```swift
/// let store = Store(configuration: PostgresConfiguration(databaseURL), options: PoolOptions(maximumConnections: 20))
/// try await store.checkSchema()
/// let children = try await store.children.list(as: userID)
/// ```
public struct Store: Sendable {
    public let pool: PostgresPool

    /// A store over an existing pool. Give that pool a configuration passed through
    /// ``Store/configured(_:)`` (``init(configuration:options:)`` does it for you).
    ///
    /// ```swift
    /// let store = Store(pool: PostgresPool(configuration: Store.configured(configuration)))
    /// ```
    public init(pool: PostgresPool) { self.pool = pool }

    /// A store with a pool of its own, configured with ``serverSettings``.
    ///
    /// ```swift
    /// let store = Store(configuration: PostgresConfiguration(databaseURL))
    /// ```
    public init(configuration: PostgresConfiguration, options: PoolOptions = PoolOptions()) {
        self.init(pool: PostgresPool(configuration: Self.configured(configuration), options: options))
    }

    /// Server settings the store's statements are written for, sent in each connection's
    /// startup packet (so a pool's session reset keeps them):
    ///
    /// - `plan_cache_mode = force_generic_plan`: every statement of the store reads one
    ///   child's rows through an index whatever its parameters, so the plan made once per
    ///   connection is the right one. Left to choose, PostgreSQL planned the timeline and the
    ///   sync feed again on every call once the table grew (a plan for the given values costs
    ///   about 0.4 ms, more than running the statement): measured in `make bench`'s growth
    ///   group, the timeline went from 0.25 ms at 10k events to 0.6 ms at 100k without it, and
    ///   stays at 0.25-0.28 ms with it.
    ///
    /// ```swift
    /// configuration.serverSettings.merge(Store.serverSettings) { _, store in store }
    /// ```
    public static let serverSettings = ["plan_cache_mode": "force_generic_plan"]

    /// `configuration` with ``serverSettings`` added.
    ///
    /// ```swift
    /// let pool = PostgresPool(configuration: Store.configured(PostgresConfiguration(databaseURL)))
    /// ```
    public static func configured(_ configuration: PostgresConfiguration) -> PostgresConfiguration {
        var configured = configuration
        configured.serverSettings.merge(serverSettings) { _, store in store }
        return configured
    }

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
