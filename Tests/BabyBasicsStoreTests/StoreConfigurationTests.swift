import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

/// The store's connections run with the settings its statements are written for.
@Suite struct StoreConfigurationTests {
    @Test func configuredAddsTheStoresSettingsAndKeepsTheCallers() {
        var base = PostgresConfiguration("postgresql://localhost/babybasics")
        base.serverSettings["statement_timeout"] = "5s"
        let configured = Store.configured(base)
        #expect(configured.serverSettings["plan_cache_mode"] == "force_generic_plan")
        #expect(configured.serverSettings["statement_timeout"] == "5s")
        #expect(base.serverSettings["plan_cache_mode"] == nil)
    }

    /// Generic plans from the first call, and still after a pool reset (RESET ALL returns to the
    /// startup packet's value); a plain pool keeps the server's default.
    @Test func theStoresOwnPoolRunsGenericPlansEvenAfterAReset() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let store = Store(configuration: PostgresConfiguration(database.connectionString), options: PoolOptions(maximumConnections: 1), deadlines: .forTests)
        #expect(try await store.pool.fetchValue(String.self, "SHOW plan_cache_mode") == "force_generic_plan")
        _ = try await store.pool.withConnection { connection in
            _ = try await connection.execute("SET plan_cache_mode = auto") // a borrower changes it; the pool resets the session
        }
        #expect(try await store.pool.fetchValue(String.self, "SHOW plan_cache_mode") == "force_generic_plan")
        await store.pool.close()

        let plain = PostgresPool(configuration: PostgresConfiguration(database.connectionString), options: PoolOptions(maximumConnections: 1))
        #expect(try await plain.fetchValue(String.self, "SHOW plan_cache_mode") == "auto")
        await plain.close()
    }
}

/// `make test` runs the store's suite twice on the system's server: directly, and through a
/// real PgBouncer in transaction mode (`BB_TEST_STORE_THROUGH=pgbouncer`). This proves each
/// run went where it says: through the pooler the store's connections find it, keep no
/// prepared statement and send no startup settings; directly, they do both.
@Suite struct StoreSuiteRouteTests {
    @Test func theStoreRunsWhereTheRunSays() async throws {
        let fixture = try await StoreFixture.make()
        let through = ProcessInfo.processInfo.environment["BB_TEST_STORE_THROUGH"] == "pgbouncer"
        let (behind, planMode) = try await fixture.store.pool.withConnection { connection in
            (connection.isBehindPooler, try await connection.fetchValue(String.self, "SELECT current_setting('plan_cache_mode')"))
        }
        #expect(behind == through)
        // On Citus the fixture asks for custom plans (docs/scale-out.md): a generic plan
        // cannot be routed to the child's node.
        let citus = TestCitus.fromEnvironment() != nil
        #expect(planMode == (through || citus ? "auto" : "force_generic_plan"))
        // Either way the store works as babybasics_app, never as the superuser.
        let role = try await fixture.store.pool.fetchValue(String.self, "SELECT current_user")
        #expect(role == "babybasics_app")
        await fixture.admin.close()
    }
}

/// Push through a transaction pooler cannot work: `childChanges()` says so and ends, instead
/// of going quiet. With a direct listen configuration it delivers (the good case).
@Suite struct ChildChangesThroughAPoolerTests {
    @Test func pushThroughAPoolerEndsWithUnavailable() async throws {
        let fixture = try await StoreFixture.make()
        let bouncer = try await PgBouncer.start(in: fixture.database.cluster, mode: .transaction, poolSize: 2)
        defer { bouncer.stop() }
        var pooled = PostgresConfiguration(bouncer.connectionString(database: fixture.database.name))
        pooled.pooler = .transaction
        let store = Store(pool: fixture.store.pool, listenConfiguration: pooled, deadlines: .forTests)
        var changes: [ChildChange] = []
        for await change in store.childChanges() { changes.append(change) }
        #expect(changes.count == 1)
        guard case .unavailable(let reason)? = changes.first else { Issue.record("\(changes)"); return }
        #expect(reason.contains("connection to PostgreSQL itself"))

        let direct = Store(pool: fixture.store.pool, listenConfiguration: fixture.database.configuration, deadlines: .forTests)
        let (user, child) = try await fixture.family()
        let heard = HeardFlag()
        let listening = Task {
            for await change in direct.childChanges() where change == .changed(childID: child.id) {
                await heard.set()
                return
            }
        }
        // Subscribed once a change logged now is heard (the listener may need a moment).
        var attempt = 0
        while await !heard.value, attempt < 50 {
            attempt += 1
            _ = try await direct.events.log(EventDraft(childID: child.id, payload: .diaper(.wet), start: EventTimestamp(utc: Date().addingTimeInterval(Double(-attempt * 60)), timeZone: "UTC", offsetSeconds: 0)), as: user.id)
            try await Task.sleep(for: .milliseconds(100))
        }
        listening.cancel()
        #expect(await heard.value)
        await fixture.admin.close()
    }
}

actor HeardFlag {
    var value = false
    func set() { value = true }
}
