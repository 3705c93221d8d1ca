import BabyBasicsStore
import EmbeddedPostgres
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
        let store = Store(configuration: PostgresConfiguration(database.connectionString), options: PoolOptions(maximumConnections: 1))
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
        #expect(planMode == (through ? "auto" : "force_generic_plan"))
        // Either way the store works as babybasics_app, never as the superuser.
        let role = try await fixture.store.pool.fetchValue(String.self, "SELECT current_user")
        #expect(role == "babybasics_app")
        await fixture.admin.close()
    }
}
