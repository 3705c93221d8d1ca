public import Foundation
public import Postgres

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
    /// The primary's pool: every write, and every read no replica may answer.
    public let pool: PostgresPool
    /// The replica's pool, when reads may go to one.
    public let replica: PostgresPool?
    /// Where ``childChanges()`` listens (`LISTEN` needs a session of its own on PostgreSQL
    /// itself, never through a transaction pooler).
    public let listenConfiguration: PostgresConfiguration
    let routing: Routing

    /// A store over an existing pool. Give that pool a configuration passed through
    /// ``Store/configured(_:)`` (``init(configuration:options:retryPolicy:deadlines:)`` does it for you).
    ///
    /// - `replica`: a pool on a streaming replica of the primary. The calls that only read
    ///   (timeline, range, dashboard, quick stats, export, the sync feed, lists) go to it when
    ///   it is healthy and has replayed the acting user's last write (read-your-writes: a
    ///   caregiver's dashboard right after they log shows what they logged); otherwise they go
    ///   to the primary. See ``ReplicaOptions``.
    /// - `listenConfiguration`: where ``childChanges()`` connects; the pool's configuration
    ///   unless given. Behind PgBouncer in transaction mode, give a URL of PostgreSQL itself.
    /// - `retryPolicy`: how a call runs again after an error that guarantees nothing was
    ///   applied (see `RetryPolicy`); each retry is also logged at `info`.
    /// - `deadlines`: how long a read and a write may take in all, retries included (5 s
    ///   each by default): past it the call throws (`PostgresError.Kind.timeout` or
    ///   `.poolTimeout`), whatever the server does.
    ///
    /// ```swift
    /// let store = Store(pool: PostgresPool(configuration: Store.configured(configuration)))
    /// let scaled = Store(pool: primaryPool, replica: replicaPool)
    /// ```
    public init(pool: PostgresPool, replica: PostgresPool? = nil, replicaOptions: ReplicaOptions = ReplicaOptions(),
                listenConfiguration: PostgresConfiguration? = nil, retryPolicy: RetryPolicy = RetryPolicy(),
                deadlines: StoreDeadlines = StoreDeadlines()) {
        self.pool = pool
        self.replica = replica
        self.listenConfiguration = listenConfiguration ?? pool.configuration
        routing = Routing(
            primary: pool, router: replica.map { ReplicaRouter(primary: pool, replica: $0, options: replicaOptions) },
            retry: retryPolicy.loggingRetries(to: pool.logger), deadlines: deadlines)
    }

    /// The WAL position of `user`'s last write through this store, while reads may still have
    /// to wait for it (nil without a replica, or when the replica has it already). A service
    /// with several instances hands it to the client (a cookie, a header) and back to
    /// ``requireReads(of:toSee:)`` on whichever instance serves the next read: this store
    /// tracks only the writes made through it.
    ///
    /// ```swift
    /// if let position = store.lastWritePosition(of: userID) { cookies["bb_read_after"] = position.description }
    /// ```
    public func lastWritePosition(of user: UUID) -> WALPosition? {
        routing.router?.position(of: user).map(WALPosition.init)
    }

    /// Makes `user`'s reads through this store see `position` (a write made through another
    /// instance of the service): they wait for the replica to replay it, or read the primary.
    /// Does nothing without a replica.
    ///
    /// ```swift
    /// if let text = cookies["bb_read_after"], let position = WALPosition(text) { store.requireReads(of: userID, toSee: position) }
    /// ```
    public func requireReads(of user: UUID, toSee position: WALPosition) {
        routing.router?.require(position.value, for: user)
    }

    /// The replica's state as last checked (nil without a replica). `refresh` checks it now.
    ///
    /// ```swift
    /// if let status = await store.replicaStatus(refresh: true), !status.usable { print(status.reason ?? "") }
    /// ```
    public func replicaStatus(refresh: Bool = false) async -> ReplicaStatus? {
        guard let router = routing.router else { return nil }
        if refresh { await router.checkHealth() }
        return router.status
    }

    /// A store with a pool of its own, configured with ``serverSettings``.
    ///
    /// ```swift
    /// let store = Store(configuration: PostgresConfiguration(databaseURL))
    /// ```
    public init(configuration: PostgresConfiguration, options: PoolOptions = PoolOptions(),
                retryPolicy: RetryPolicy = RetryPolicy(), deadlines: StoreDeadlines = StoreDeadlines()) {
        self.init(pool: PostgresPool(configuration: Self.configured(configuration), options: options), retryPolicy: retryPolicy, deadlines: deadlines)
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
    /// - `statement_timeout = 10s`, `lock_timeout = 3s` and
    ///   `idle_in_transaction_session_timeout = 30s`: the server's own bounds, a little longer
    ///   than the store's deadlines (``StoreDeadlines``, 5 s), so the client normally gives up
    ///   first and answers "busy", and the server stops what nobody waits for any more: a
    ///   statement the client abandoned, a lock wait, a session left in a transaction (which would
    ///   hold locks and hold back vacuum). A DBA sees them with `SHOW` in the session, or in
    ///   `pg_settings` (source `client`). Set on the login role instead (`ALTER ROLE … SET`, see
    ///   README "Settings an operator should set") they also bound sessions that do not use the
    ///   store; behind a transaction pooler, where startup options are refused, that is the only
    ///   way.
    ///
    /// ```swift
    /// configuration.serverSettings.merge(Store.serverSettings) { mine, _ in mine }
    /// ```
    public static let serverSettings = [
        "plan_cache_mode": "force_generic_plan",
        "statement_timeout": "10s",
        "lock_timeout": "3s",
        "idle_in_transaction_session_timeout": "30s",
    ]

    /// `configuration` with ``serverSettings`` added (a setting the configuration already has
    /// keeps its value: an operator's choice wins over the store's default).
    ///
    /// ```swift
    /// let pool = PostgresPool(configuration: Store.configured(PostgresConfiguration(databaseURL)))
    /// ```
    ///
    /// Behind a transaction pooler (`configuration.pooler == .transaction`) nothing is added:
    /// the pooler refuses startup options, and with no named statements there is no plan cache
    /// for the setting to steer. Say `.transaction` explicitly behind PgBouncer: with the
    /// default `.detect` the settings go into the startup packet, which PgBouncer refuses (the
    /// connection error says so).
    public static func configured(_ configuration: PostgresConfiguration) -> PostgresConfiguration {
        guard configuration.pooler != .transaction else { return configuration }
        var configured = configuration
        configured.serverSettings.merge(serverSettings) { caller, _ in caller } // what the caller set wins
        return configured
    }

    public var users: UserRepository { UserRepository(routing: routing) }
    public var children: ChildRepository { ChildRepository(routing: routing) }
    public var caregivers: CaregiverRepository { CaregiverRepository(routing: routing) }
    public var invites: InviteRepository { InviteRepository(routing: routing) }
    public var events: EventRepository { EventRepository(routing: routing) }

    /// Refuses to run against a database older than `SchemaVersion.required`.
    public func checkSchema() async throws {
        try await pool.withConnection { try await SchemaVersion.check($0) }
    }
}
