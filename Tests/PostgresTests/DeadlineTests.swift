import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

/// Every wait has a deadline: statements (`pg_sleep`), a silent network (a proxy that stops
/// forwarding), connecting, and acquiring from a pool. A cancel never reaches a later statement.
@Suite struct DeadlineTests {
    @Test func aStatementDeadlineCancelsItOnTheServerAndTheConnectionGoesOn() async throws {
        let (connection, database) = try await freshConnection()
        let admin = try await database.connect()
        let pid = await connection.backendPID
        let error = await expectPostgresError(.timeout) {
            _ = try await connection.query("SELECT pg_sleep(30)", timeout: .milliseconds(200))
        }
        #expect(error?.message.contains("deadline") == true, "\(String(describing: error))")
        // The server stopped running it (cancelled, not left to finish): it is idle long before
        // the 30 s the statement asked for.
        try await waitUntil {
            try await admin.value(String.self, "SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = \(pid)") == "idle"
        }
        #expect(try await connection.value(Int.self, "SELECT 41 + 1") == 42)
        // Within its deadline, a statement runs as usual.
        #expect(try await connection.fetchValue(Int.self, "SELECT 1 FROM pg_sleep(0.05)", timeout: .seconds(10)) == 1)
        await admin.close()
    }

    @Test func theConfiguredQueryTimeoutAppliesToEveryStatement() async throws {
        let database = try await TestPostgresDatabase.make()
        var configuration = database.configuration
        configuration.queryTimeout = .milliseconds(200)
        let connection = try await PostgresConnection.connect(configuration)
        await expectPostgresError(.timeout) { try await connection.execute("SELECT pg_sleep(30)") }
        // A per-call deadline overrides it.
        #expect(try await connection.fetchValue(Int.self, "SELECT 1 FROM pg_sleep(0.4)", timeout: .seconds(10)) == 1)
        await connection.close()
    }

    /// Deadlines that expire just as their statement finishes, each followed at once by
    /// another statement: a late cancel must never hit the next one. Every third statement
    /// sleeps 0.5 s, so that some deadlines pass even when a busy machine fires the timers late
    /// (all of a plain `swift test` at once: none of 60 did with 20 ms statements).
    @Test func aLateCancelNeverReachesTheNextStatement() async throws {
        let (connection, _) = try await freshConnection()
        var timedOut = 0
        for attempt in 0..<60 {
            let sleep = attempt % 3 == 0 ? 0.5 : 0.02
            do {
                _ = try await connection.query("SELECT pg_sleep(\(sleep))", timeout: .milliseconds(10 + attempt % 20))
            } catch let error as PostgresError where error.kind == .timeout {
                timedOut += 1
            }
            // Never cancelled: it has no deadline, and nothing may cancel it by mistake.
            #expect(try await connection.value(Int.self, "SELECT \(attempt) FROM pg_sleep(0.03)") == attempt)
        }
        #expect(timedOut > 0)
    }

    @Test func aSilentPeerIsATimeoutNotAHang() async throws {
        let database = try await TestPostgresDatabase.make()
        let proxy = try FaultProxy.start(in: database.cluster)
        defer { proxy.stop() }
        let connection = try await PostgresConnection.connect(PostgresConfiguration(proxy.connectionString(database: database.name)))
        #expect(try await connection.value(Int.self, "SELECT 1") == 1)
        proxy.mode = .silent
        // A timeout, not a hang; how long each step takes (the deadline, the wait for the
        // cancel's answer, the grace before giving up) is ConnectionStateMachineTests' to check
        // on its manual clock, where a busy machine cannot stretch it.
        let error = await expectPostgresError(.timeout) { _ = try await connection.query("SELECT 2", timeout: .milliseconds(300)) }
        #expect(error?.message.contains("has not answered") == true, "\(String(describing: error))")
        // The server never answered the cancel either: the connection is given up.
        try await waitUntil { connection.isBroken }
        await expectPostgresError(.connectionFailure) { try await connection.execute("SELECT 3") }
    }

    @Test func connectingToASilentPeerTimesOut() async throws {
        let database = try await TestPostgresDatabase.make()
        let proxy = try FaultProxy.start(in: database.cluster)
        defer { proxy.stop() }
        proxy.mode = .silent
        let error = await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect(proxy.connectionString(database: database.name, options: "connect_timeout=1"))
        }
        #expect(error?.message.contains("connect timeout") == true, "\(String(describing: error))")
        // Without a connect_timeout in the string, the default (10 s) still ends it.
        var configuration = PostgresConfiguration(proxy.connectionString(database: database.name))
        #expect(configuration.connectionParameterValue("connect_timeout") == "10")
        configuration.connectTimeout = 1
        await expectPostgresError(.connectionFailure) { _ = try await PostgresConnection.connect(configuration) }
    }

    @Test func anAcquireDeadlineCoversConnecting() async throws {
        let database = try await TestPostgresDatabase.make()
        let proxy = try FaultProxy.start(in: database.cluster)
        defer { proxy.stop() }
        proxy.mode = .silent
        let pool = PostgresPool(
            configuration: PostgresConfiguration(proxy.connectionString(database: database.name)),
            options: PoolOptions(maximumConnections: 2, acquireTimeout: .milliseconds(500)))
        // The pool's 0.5 s, not the 10 s connect timeout: a pool timeout, not a connect failure.
        await expectPostgresError(.poolTimeout) { try await pool.execute("SELECT 1") }
        // Once the network is back, the pool works (its attempts from the silent spell may
        // still hold both slots for a moment: each later acquire has its own 0.5 s).
        proxy.mode = .forward
        try await waitUntil { (try? await pool.fetchValue(Int.self, "SELECT 7")) == 7 }
        await pool.close()
    }

    @Test func keepalivesAreOnByDefaultAndTheStringWins() {
        let defaults = PostgresConfiguration("postgresql://u@db.example.com/x")
        #expect(defaults.connectionParameterValue("keepalives") == "1")
        #expect(defaults.connectionParameterValue("keepalives_idle") == "30")
        #expect(defaults.connectionParameterValue("tcp_user_timeout") == "30000")
        let own = PostgresConfiguration("postgresql://u@db.example.com/x?keepalives_idle=5&connect_timeout=3")
        #expect(own.connectionParameterValue("keepalives_idle") == "5")
        #expect(own.connectionParameterValue("connect_timeout") == "3")
    }
}
