import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Migrator
import Postgres
import Testing

let migrationsFolder = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Migrations")

/// A migrated database, a `Store` whose connections run as the least-privilege
/// `babybasics_app` role, and a superuser connection for setting up and inspecting.
struct StoreFixture {
    let store: Store
    let admin: PostgresConnection
    let database: TestDatabase

    /// `configure` adjusts the store's connection configuration (a capturing logger, say).
    static func make(configure: (inout PostgresConfiguration) -> Void = { _ in }) async throws -> StoreFixture {
        let database = try await TestPostgres.shared.makeDatabase(template: "store_tests_template") { connection in
            let name = try #require(try await connection.fetchValue(String.self, "SELECT current_database()"))
            let cluster = try await TestPostgres.shared.cluster()
            let migrator = Migrator(configuration: PostgresConfiguration(try cluster.connectionString(database: name)), options: .init(directory: migrationsFolder))
            try await migrator.up()
        }
        var appRole = PostgresConfiguration(database.connectionString + "&options=-crole%3Dbabybasics_app")
        if TestCitus.fromEnvironment() != nil {
            // On a Citus coordinator (docs/scale-out.md): a generic plan cannot be routed to the
            // shard of the child it is about.
            appRole.serverSettings["plan_cache_mode"] = "auto"
        }
        configure(&appRole)
        if let bouncer = try await throughPgBouncer() {
            // The same suite through a transaction pooler: unnamed statements, nothing in the
            // session; LISTEN on a direct connection, as a service behind PgBouncer would.
            var pooled = appRole
            pooled.connectionString = bouncer.connectionString(database: database.name)
            pooled.pooler = .transaction
            let pool = PostgresPool(configuration: Store.configured(pooled), options: PoolOptions(maximumConnections: 6))
            return StoreFixture(store: Store(pool: pool, listenConfiguration: appRole, deadlines: .forTests), admin: try await database.connect(), database: database)
        }
        let pool = PostgresPool(configuration: Store.configured(appRole), options: PoolOptions(maximumConnections: 6))
        return StoreFixture(store: Store(pool: pool, deadlines: .forTests), admin: try await database.connect(), database: database)
    }

    /// With `BB_TEST_STORE_THROUGH=pgbouncer` (a run of `make test`), one PgBouncer in
    /// transaction mode for the whole run, serving the store as `babybasics_app`.
    static func throughPgBouncer() async throws -> PgBouncer? {
        guard ProcessInfo.processInfo.environment["BB_TEST_STORE_THROUGH"] == "pgbouncer" else { return nil }
        return try await sharedBouncer.value
    }

    private static let sharedBouncer = Task {
        let cluster = try await TestPostgres.shared.cluster()
        return try await PgBouncer.start(in: cluster, mode: .transaction, poolSize: 12, connectQuery: "SET ROLE babybasics_app")
    }

    /// A user with a child they are primary of.
    func family(_ name: String = "Parent") async throws -> (user: User, child: Child) {
        let user = try await store.users.create(email: "\(name.lowercased())-\(UUID().uuidString.prefix(6))@example.com", displayName: name)
        let child = try await store.children.create(ChildDraft(name: "\(name)'s baby", birthDate: PostgresDate(year: 2026, month: 3, day: 8)), as: user.id)
        return (user, child)
    }

    func user(_ name: String = "Someone") async throws -> User {
        try await store.users.create(email: "\(name.lowercased())-\(UUID().uuidString.prefix(6))@example.com", displayName: name)
    }

    /// Adds `user` to `child` through a real invite.
    func join(_ user: User, to child: Child, invitedBy primary: User) async throws {
        let invite = try await store.invites.create(for: child.id, as: primary.id)
        try await store.invites.redeem(invite.code, as: user.id)
    }

    /// A fingerprint of every table, to prove a refused call changed nothing.
    func fingerprint() async throws -> String {
        try await admin.fetchValue(String.self, """
            SELECT md5(string_agg(t, '|' ORDER BY t)) FROM (
              SELECT 'u' || u::text AS t FROM users u UNION ALL SELECT 'c' || c::text FROM children c
              UNION ALL SELECT 'g' || g::text FROM caregivers g UNION ALL SELECT 'i' || i::text FROM invites i
              UNION ALL SELECT 'e' || e::text FROM events e) all_rows
            """) ?? ""
    }
}

/// Expects `body` to throw exactly `expected`.
func expectStoreError(
    _ expected: StoreError, sourceLocation: SourceLocation = #_sourceLocation,
    isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(expected), but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as StoreError {
        #expect(error == expected, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(expected), got \(type(of: error)): \(error)", sourceLocation: sourceLocation)
    }
}

/// Runs every call and expects `StoreError.notFound` from each (the cross-family rule).
func expectAllNotFound(_ calls: [(String, @Sendable () async throws -> Void)], sourceLocation: SourceLocation = #_sourceLocation) async {
    for (name, call) in calls {
        do {
            try await call()
            Issue.record("\(name) succeeded across families", sourceLocation: sourceLocation)
        } catch let error as StoreError {
            #expect(error == .notFound, "\(name): \(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(name): \(error)", sourceLocation: sourceLocation)
        }
    }
}

extension StoreDeadlines {
    /// Deadlines for tests that are not about deadlines: long, so a test on a loaded machine
    /// never ends in a timeout it did not ask for (DeadlineTests sets short ones on purpose).
    static let forTests = StoreDeadlines(read: .seconds(300), write: .seconds(300))
}
