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
