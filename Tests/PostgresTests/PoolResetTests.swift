import Foundation
import Postgres
import Testing

/// A connection goes back to the next borrower as a fresh session: no role, search_path,
/// advisory lock, LISTEN, temp table or setting of the last borrower, and a statement cache
/// that still answers right.
@Suite struct PoolResetTests {
    /// What one borrower leaves behind, and what the next one sees of it.
    struct Leftovers: Equatable, Decodable {
        var user: String
        var searchPath: String
        var channels: Int
        var tempTable: Bool
        var statementTimeout: String
    }

    static func leaveEverythingBehind(_ connection: isolated PostgresConnection, role: String) async throws {
        try await connection.execute("SET ROLE \(identifier: role)")
        try await connection.execute("SET search_path TO pg_catalog")
        try await connection.execute("SELECT pg_advisory_lock(4242)")
        try await connection.execute("LISTEN reset_channel")
        try await connection.execute("CREATE TEMP TABLE leftover (x int)")
        try await connection.execute("SET statement_timeout = '7s'")
    }

    static func look(_ connection: isolated PostgresConnection) async throws -> Leftovers {
        try await connection.fetchOne(Leftovers.self, """
            SELECT current_user AS user, current_setting('search_path') AS "searchPath",
                   (SELECT count(*) FROM pg_listening_channels())::int AS channels,
                   to_regclass('pg_temp.leftover') IS NOT NULL AS "tempTable",
                   current_setting('statement_timeout') AS "statementTimeout"
            """).map { $0 } ?? Leftovers(user: "?", searchPath: "?", channels: -1, tempTable: true, statementTimeout: "?")
    }

    @Test(arguments: [SessionReset.tracked, .always])
    func theNextBorrowerSeesNoneOfTheLastOnesSession(reset: SessionReset) async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let role = "reset_\(database.name)"
        try await admin.execute("CREATE ROLE \(identifier: role)")
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1, reset: reset))

        let (pid, fresh) = try await pool.withConnection { connection in
            let fresh = try await Self.look(connection)
            #expect(try await connection.value(Int.self, "SELECT 40 + \(2)") == 42) // cached now
            try await Self.leaveEverythingBehind(connection, role: role)
            #expect(try await Self.look(connection).user == role)
            return (connection.backendPID, fresh)
        }
        #expect(fresh.channels == 0 && !fresh.tempTable && fresh.user != role)

        try await pool.withConnection { connection throws -> Void in
            #expect(connection.backendPID == pid, "the same server session, reset")
            #expect(try await Self.look(connection) == fresh)
            // The statement cache still answers right (after DISCARD ALL it starts over).
            #expect(try await connection.value(Int.self, "SELECT 40 + \(3)") == 43)
        }
        // The advisory lock was released: another session takes it at once.
        #expect(try await admin.value(Bool.self, "SELECT pg_try_advisory_lock(4242)") == true)
        await pool.close()
        await admin.close()
    }

    /// The other way round: without a reset, the next borrower does inherit it all (this is
    /// what the test above would see if the reset did nothing).
    @Test func withoutAResetTheNextBorrowerInheritsTheSession() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let role = "keep_\(database.name)"
        try await admin.execute("CREATE ROLE \(identifier: role)")
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1, reset: .never))
        try await pool.withConnection { try await Self.leaveEverythingBehind($0, role: role) }
        let seen = try await pool.withConnection { try await Self.look($0) }
        #expect(seen == Leftovers(user: role, searchPath: "pg_catalog", channels: 1, tempTable: true, statementTimeout: "7s"))
        #expect(try await admin.value(Bool.self, "SELECT pg_try_advisory_lock(4242)") == false)
        await pool.close()
        await admin.close()
    }

    @Test func aResetHookRunsOnEveryReturn() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(
            maximumConnections: 1,
            resetHook: { connection in try await connection.execute("SET application_name = 'after-reset'") }))
        _ = try await pool.withConnection { try await $0.execute("SET application_name = 'borrower'") }
        #expect(try await pool.withConnection { try await $0.value(String.self, "SELECT current_setting('application_name')") } == "after-reset")
        await pool.close()
    }

    /// A SET through the pool's one-statement calls never leaks into other callers'
    /// statements: it runs on a connection of its own, reset before anyone else uses it.
    @Test func aSessionChangeThroughThePoolsSharedCallsStaysWithIt() async throws {
        let database = try await TestPostgresDatabase.make()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 2, acquireTimeout: .seconds(60)))
        let before = try await pool.fetchValue(String.self, "SELECT current_setting('search_path')")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<40 {
                group.addTask {
                    if index % 4 == 0 {
                        try await pool.execute("SET search_path TO pg_catalog")
                    } else {
                        #expect(try await pool.fetchValue(String.self, "SELECT current_setting('search_path')") == before)
                    }
                }
            }
            try await group.waitForAll()
        }
        await pool.close()
    }

    /// `set_config(…, true)` ends with its transaction (the sync feed uses it): it costs no
    /// reset on release. One that lasts for the session does, and so does one whose third
    /// argument is not a literal `true`.
    @Test func onlyASessionLevelSetConfigCostsAReset() async throws {
        let database = try await TestPostgresDatabase.make()
        let admin = try await database.connect()
        let pool = PostgresPool(configuration: database.configuration, options: PoolOptions(maximumConnections: 1))
        let cases: [(SQL, Bool)] = [
            ("SELECT set_config('application_name', 'local', true)", false),
            ("SELECT 1 FROM set_config('work_mem', \("8MB"), TRUE) AS planner", false),
            ("SELECT set_config('application_name', 'session', false)", true),
            ("SELECT set_config('application_name', 'bound', \(false))", true),
        ]
        for (sql, resets) in cases {
            let pid = try await pool.withConnection { connection in
                _ = try await connection.query(sql)
                return connection.backendPID
            }
            // The next lease starts after any reset of the last one has finished.
            let last = try await pool.withConnection { _ in
                try await admin.fetchValue(String.self, "SELECT query FROM pg_stat_activity WHERE pid = \(pid)")
            }
            #expect((last?.contains("RESET ALL") == true) == resets, "\(sql): the connection's last statement was \(last ?? "nothing")")
        }
        #expect(try await pool.fetchValue(String.self, "SELECT current_setting('application_name')") != "session", "the session-level one was reset")
        await pool.close()
        await admin.close()
    }
}
