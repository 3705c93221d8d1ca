import EmbeddedPostgres
import Foundation
import Postgres
import Synchronization

/// The test kit's Citus mode: with `BB_TEST_CITUS=1` (and `BB_PG_BINDIR` naming a PostgreSQL
/// with Citus installed: `scripts/citus-build.sh` builds one), ``TestPostgres`` starts a real
/// three-node Citus cluster, a coordinator and two workers, and every test database is a
/// distributed database on all three. Tests connect to the coordinator as they would to a
/// single server; `make citus-check` runs the store's suite this way.
///
/// Each new database:
/// - is created on every node, with `CREATE EXTENSION citus` in each, and the two workers
///   added to the coordinator's metadata (`citus_add_node`), before anything else: a cluster
///   whose nodes are there before `bbmigrate up`, the harder order;
/// - runs the template's setup (the migrations) itself, because a distributed database cannot
///   be cloned: its shards live on the workers. The setup runs with
///   `citus.enable_ddl_propagation = off` as the database's default, as docs/scale-out.md tells
///   an operator to run the first `bbmigrate up`; the migration that distributes turns it on
///   for its own transaction.
///
/// Citus opens its own connections to the other nodes as the role that runs the query, so in
/// this test cluster every role may log in, with the superuser's password (shared by the
/// nodes), which `pg_dist_authinfo` gives Citus.
///
/// ```swift
/// // BB_TEST_CITUS=1 BB_PG_BINDIR=$(scripts/citus-build.sh) swift test --filter BabyBasicsStoreTests
/// let database = try await TestPostgres.shared.makeDatabase()   // distributed, on 3 nodes
/// ```
public struct TestCitus: Sendable {
    /// The workers, once started.
    private static let workers = Mutex<[EmbeddedPostgres]>([])
    private static let password = EmbeddedPostgres.randomPassword()

    /// Citus mode, when `BB_TEST_CITUS` is `1`.
    public static func fromEnvironment() -> TestCitus? {
        ProcessInfo.processInfo.environment["BB_TEST_CITUS"] == "1" ? TestCitus() : nil
    }

    /// What the first `bbmigrate up` of a Citus database adds to its connection string
    /// (docs/scale-out.md: DDL propagation off until 0027 distributes); empty when not in
    /// Citus mode. For tests that migrate a database themselves.
    ///
    /// ```swift
    /// let migrator = Migrator(configuration: try PostgresConfiguration(database.connectionString + TestCitus.firstMigrationOptions), options: options)
    /// ```
    public static var firstMigrationOptions: String {
        fromEnvironment() == nil ? "" : "&options=-c%20citus.enable_ddl_propagation%3Doff"
    }

    /// Every node's settings: Citus loaded; prepared transactions for its two-phase commit;
    /// 4 shards a table (not 32: each test creates its own distributed database); logical WAL for
    /// shard moves.
    static let settings = [
        "shared_preload_libraries": "'citus'", "max_prepared_transactions": "200", "max_worker_processes": "400", "citus.shard_count": "4", "wal_level": "logical",
    ]

    /// Starts the coordinator and two workers; returns the coordinator.
    func start() async throws -> EmbeddedPostgres {
        try await runOnDedicatedThread {
            let coordinator = try TestPostgres.startCluster(name: "bbcitus-coordinator", settings: Self.settings, superuserPassword: Self.password)
            var started: [EmbeddedPostgres] = []
            for number in 1...2 {
                let worker = try TestPostgres.startCluster(name: "bbcitus-worker\(number)", settings: Self.settings, superuserPassword: Self.password)
                started.append(worker)
            }
            Self.workers.withLock { $0 = started }
            return coordinator
        }
    }

    /// Creates database `name` on every node and adds the workers; then runs `setup`, if any,
    /// on it (see the type's documentation).
    func createDatabase(_ name: String, coordinator: EmbeddedPostgres, setup: (@Sendable (PostgresConnection) async throws -> Void)?) async throws {
        let workers = Self.workers.withLock { $0 }
        for node in [coordinator] + workers {
            try await node.createDatabase(name)
            let connection = try await PostgresConnection.connect(try node.connectionString(database: name))
            try await Self.closing(connection) {
                try await connection.execute("CREATE EXTENSION citus")
                try await Self.letEveryRoleLogIn(on: connection)
            }
        }
        let admin = try await PostgresConnection.connect(try coordinator.connectionString(database: name))
        try await Self.closing(admin) {
            _ = try await admin.query("SELECT citus_set_coordinator_host('127.0.0.1', \(Int32(try coordinator.port())))")
            for worker in workers {
                _ = try await admin.query("SELECT citus_add_node('127.0.0.1', \(Int32(try worker.port())))")
            }
            guard let setup else { return }
            // The first bbmigrate up of a Citus database, as docs/scale-out.md describes it.
            try await admin.execute("SET citus.enable_ddl_propagation = off")
            try await admin.execute("ALTER DATABASE \(identifier: name) SET citus.enable_ddl_propagation = off")
            // A migration that distributes makes Citus bring the app's role up to date on the
            // workers; another database's setup or a test's role setting may update that role's
            // row at the same moment ("tuple concurrently updated", the whole migration file
            // rolled back). Only the test kit runs many databases' DDL on one cluster at once:
            // once the other is done, again (bbmigrate goes on where it stopped).
            try await Self.retryingConcurrentRoleUpdates {
                let connection = try await PostgresConnection.connect(try coordinator.connectionString(database: name))
                try await Self.closing(connection) { try await setup(connection) }
            }
            try await admin.execute("ALTER DATABASE \(identifier: name) RESET citus.enable_ddl_propagation")
        }
        // The roles the setup created (the app's), on every node.
        for node in [coordinator] + workers {
            let connection = try await PostgresConnection.connect(try node.connectionString(database: name))
            try await Self.closing(connection) { try await Self.letEveryRoleLogIn(on: connection, creatingThoseOf: coordinator) }
        }
    }

    /// Sets `setting` to `value` for `role` in `database` on every node (`ALTER ROLE … IN
    /// DATABASE … SET`), as docs/scale-out.md tells an operator to set the store's server bounds:
    /// a start-up option reaches the coordinator's session only, while Citus's own sessions on
    /// the workers start with the role's settings. New sessions take it; open ones keep theirs.
    /// Returns false, doing nothing, when not in Citus mode.
    ///
    /// ```swift
    /// try await TestCitus.setOnEveryNode("lock_timeout", to: "100ms", forRole: "babybasics_app", in: database)
    /// ```
    @discardableResult
    public static func setOnEveryNode(_ setting: String, to value: String, forRole role: String, in database: TestDatabase) async throws -> Bool {
        guard fromEnvironment() != nil else { return false }
        let workers = Self.workers.withLock { $0 }
        for node in [database.cluster] + workers {
            let connection = try await PostgresConnection.connect(try node.connectionString(database: database.name))
            try await closing(connection) {
                // Each node by itself, as an operator would on a node that is not the coordinator.
                try await connection.execute("SET citus.enable_alter_role_set_propagation = off")
                // Names cannot be parameters: the server quotes them (format %I, %L).
                let alter = try await connection.fetchValue(String.self, """
                    SELECT format('ALTER ROLE %I IN DATABASE %I SET %I = %L', \(role)::text, \(database.name)::text, \(setting)::text, \(value)::text)
                    """) ?? ""
                try await retryingConcurrentRoleUpdates { try await connection.executeUnsafeRawSQL(alter) }
            }
        }
        return true
    }

    /// Every role but the built-in ones may log in with the shared password, and Citus is told
    /// that password for each (`pg_dist_authinfo`, this database's). With `coordinator`, the
    /// coordinator's roles are created first where missing.
    private static func letEveryRoleLogIn(on connection: PostgresConnection, creatingThoseOf coordinator: EmbeddedPostgres? = nil) async throws {
        try await connection.execute("SET citus.enable_ddl_propagation = off")
        var roles = try await connection.fetchAll(String.self, "SELECT rolname::text FROM pg_roles WHERE rolname !~ '^pg_'")
        if let coordinator {
            let source = try await PostgresConnection.connect(try coordinator.connectionString(database: "postgres"))
            let wanted = try await closing(source) { try await source.fetchAll(String.self, "SELECT rolname::text FROM pg_roles WHERE rolname !~ '^pg_'") }
            for role in wanted where !roles.contains(role) {
                // Role names cannot be parameters: the server quotes it (format %I).
                let create = try await connection.fetchValue(String.self, "SELECT format('CREATE ROLE %I', \(role)::text)") ?? ""
                try await connection.executeUnsafeRawSQL(create)
                roles.append(role)
            }
        }
        for role in roles {
            let alter = try await connection.fetchValue(String.self, "SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', \(role)::text, \(password)::text)") ?? ""
            // A test migrating a database of its own (outside the queue of creations) may
            // update the same role at once.
            try await retryingConcurrentRoleUpdates { try await connection.executeUnsafeRawSQL(alter) }
            try await connection.execute("""
                INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, \(role), \("password=" + password))
                ON CONFLICT DO NOTHING
                """)
        }
    }

    /// Runs `body` again (4 times at most) when it failed because another session updated the
    /// same role's catalog row at once ("tuple concurrently updated", SQLSTATE XX000): the test
    /// kit's databases share their roles, and their DDL runs in parallel. Any other error, or
    /// the fifth, is thrown.
    @discardableResult
    private static func retryingConcurrentRoleUpdates<T>(_ body: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch where attempt < 5 && "\(error)".contains("tuple concurrently updated") {
                // A short pause lets the other transaction finish before the next attempt.
                try await Task.sleep(for: .milliseconds(50 * attempt))
                attempt += 1
            }
        }
    }

    /// Runs `body`, then closes `connection` whatever happened.
    private static func closing<T>(_ connection: PostgresConnection, _ body: () async throws -> T) async throws -> T {
        do {
            let result = try await body()
            await connection.close()
            return result
        } catch {
            await connection.close()
            throw error
        }
    }
}
