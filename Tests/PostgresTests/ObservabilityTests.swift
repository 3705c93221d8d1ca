import EmbeddedPostgres
import PostgresTestKit
import Foundation
import InMemoryTracing
import Logging
import MetricsTestKit
@testable import Postgres
import ServiceLifecycle
import Synchronization
import Testing
import Tracing

/// Logs, metrics and spans: each is emitted, and none ever holds a parameter value.
@Suite struct ObservabilityTests {
    /// A value no log record, metric or span may contain.
    static let secret = "Zq7-family-secret-\(UUID().uuidString.prefix(8))"

    private func configuration(_ database: TestDatabase, _ change: (inout PostgresConfiguration) -> Void) -> PostgresConfiguration {
        var configuration = PostgresConfiguration(database.connectionString)
        change(&configuration)
        return configuration
    }

    // MARK: Logging

    @Test func connectionsLogOpenAndCloseAtInfoAndStatementsAtDebugWithoutValues() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let capture = LogCapture()
        let connection = try await PostgresConnection.connect(configuration(database) {
            $0.logger = capture.logger(level: .debug)
            $0.slowQueryThreshold = nil // a loaded test machine must not turn the record into a warning
        })
        let opened = try #require(capture.records.first { $0.message == "connected" })
        #expect(opened.level == .info)
        #expect(opened.metadata["postgres.backend_pid"] == "\(await connection.backendPID)")
        #expect(opened.metadata["db.namespace"] == database.name)

        let echoed = try await connection.fetchValue(String.self, "SELECT \(Self.secret)::text || \(42)::int::text")
        #expect(echoed == Self.secret + "42")
        let statement = try #require(capture.records.last { $0.message == "statement" })
        #expect(statement.level == .debug)
        #expect(statement.metadata["db.query.text"] == "SELECT $1::text || $2::int::text")
        #expect(statement.metadata["db.query.parameter_count"] == "2")
        #expect(Double(statement.metadata["duration_ms"] ?? "") != nil)

        await connection.close()
        #expect(capture.records.last?.message == "connection closed")
        #expect(capture.records.last?.level == .info)
        #expect(!capture.records.contains { $0.description.contains(Self.secret) })
    }

    @Test func aFailedStatementLogsItsSQLStateAndConstraintButNotTheServersMessage() async throws {
        let (admin, database) = try await freshConnection()
        try await admin.executeUnsafeRawSQL("CREATE TABLE emails (address text CONSTRAINT emails_unique UNIQUE)")
        let capture = LogCapture()
        let connection = try await PostgresConnection.connect(configuration(database) { $0.logger = capture.logger(level: .debug) })
        try await connection.execute("INSERT INTO emails VALUES (\(Self.secret))")
        let error = await expectPostgresError(.uniqueViolation) {
            try await connection.execute("INSERT INTO emails VALUES (\(Self.secret))")
        }
        // The server's detail names the value; the log must not.
        #expect(error?.detail?.contains(Self.secret) == true)
        let failed = try #require(capture.records.last { $0.message == "statement failed" })
        #expect(failed.metadata["db.response.status_code"] == "23505")
        #expect(failed.metadata["error.constraint"] == "emails_unique")
        #expect(failed.metadata["error.class"] == "23")
        #expect(!capture.records.contains { $0.description.contains(Self.secret) })
    }

    @Test func aStatementSlowerThanTheThresholdIsAWarningAndAFastOneIsNot() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let capture = LogCapture()
        let connection = try await PostgresConnection.connect(configuration(database) {
            $0.logger = capture.logger(level: .debug)
            $0.slowQueryThreshold = .milliseconds(250)
        })
        try await connection.execute("SELECT \(1)")
        try await connection.execute("SELECT pg_sleep(\(0.3))")
        let slow = try #require(capture.records.first { $0.metadata["db.query.text"] == "SELECT pg_sleep($1)" })
        #expect(slow.message == "slow statement")
        #expect(slow.level == .warning)
        // Each record's level follows its own measured duration (a loaded machine may make
        // even SELECT 1 slow, and then it must say so).
        let statements = capture.records.filter { $0.metadata["db.query.text"] != nil }
        #expect(statements.count == 2)
        for record in statements {
            let milliseconds = try #require(Double(record.metadata["duration_ms"] ?? ""))
            #expect((record.message == "slow statement") == (milliseconds >= 250), "\(record)")
            #expect((record.level == .warning) == (milliseconds >= 250), "\(record)")
        }
    }

    @Test func aRefusedConnectionIsLoggedAtInfoWithoutThePassword() async throws {
        let capture = LogCapture()
        var configuration = PostgresConfiguration("postgresql://someone:\(Self.secret)@127.0.0.1:1/nothing")
        configuration.logger = capture.logger(level: .info)
        await expectPostgresError(.connectionFailure) { _ = try await PostgresConnection.connect(configuration) }
        let failed = try #require(capture.records.first { $0.message == "could not connect" })
        #expect(failed.level == .info)
        #expect(failed.metadata["postgres.target"]?.contains("127.0.0.1") == true)
        #expect(!capture.records.contains { $0.description.contains(Self.secret) })
    }

    @Test func thePoolWarnsWhenExhaustedAndWhenItReplacesABrokenConnection() async throws {
        let (admin, database) = try await freshConnection()
        let capture = LogCapture()
        let pool = PostgresPool(
            configuration: configuration(database) { $0.logger = capture.logger(level: .info) },
            options: PoolOptions(maximumConnections: 1, acquireTimeout: .seconds(10)))
        // One lease holds the only connection; a second caller must wait.
        let (held, release) = AsyncStream<Void>.makeStream()
        let holder = Task {
            try await pool.withConnection { connection in
                for await _ in held { break }
                return try await connection.fetchValue(Int32.self, "SELECT pg_backend_pid()") ?? 0
            }
        }
        try await waitFor { pool.statistics.inUse == 1 }
        let waiter = Task { try await pool.fetchValue(Int.self, "SELECT \(1)") }
        try await waitFor { pool.statistics.waiting == 1 }
        let exhausted = try #require(capture.records.first { $0.message.hasPrefix("connection pool exhausted") })
        #expect(exhausted.level == .warning)
        #expect(exhausted.metadata["postgres.pool.waiting"] == "1")
        release.yield()
        let pid = try await holder.value
        #expect(try await waiter.value == 1)
        #expect(capture.records.filter { $0.message.hasPrefix("connection pool exhausted") }.count == 1)

        // The server ends the idle connection; the next caller gets a new one and the pool says so.
        try await admin.execute("SELECT pg_terminate_backend(\(pid))")
        try await waitFor { try await admin.fetchValue(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid)") == 0 }
        #expect(try await pool.fetchValue(Int.self, "SELECT \(2)") == 2)
        #expect(capture.records.contains { $0.level == .warning && ($0.message.contains("broken")) })
        await pool.close()
    }

    /// An overloaded pool does not flood the log: the same warning at most once per interval,
    /// saying how many times it happened since the last one.
    @Test func repeatedPoolWarningsAreRateLimitedAndCounted() async throws {
        let capture = LogCapture()
        var configuration = PostgresConfiguration("postgresql://localhost/x")
        configuration.logger = capture.logger(level: .info)
        let observer = PoolObserver(configuration: configuration, options: PoolOptions(), reportInterval: .milliseconds(200))
        let counts = PoolObserver.Counts(open: 1, idle: 0, leased: 1, waiting: 1)
        for _ in 0..<3 { observer.exhausted(counts) }
        observer.timedOut(1)
        #expect(capture.records.filter { $0.message.hasPrefix("connection pool exhausted") }.count == 1)
        try await Task.sleep(for: .milliseconds(300))
        observer.exhausted(counts)
        let exhausted = capture.records.filter { $0.message.hasPrefix("connection pool exhausted") }
        #expect(exhausted.count == 2)
        #expect(exhausted.last?.metadata["postgres.pool.times_since_last_report"] == "3")
        #expect(capture.records.filter { $0.message.hasPrefix("callers gave up") }.count == 1)
    }

    /// A pool that is still opening its connections says so, rather than "every connection
    /// is lent" next to `leased=0`.
    @Test func anExhaustedPoolSaysWhetherItIsStillOpening() {
        let capture = LogCapture()
        var configuration = PostgresConfiguration("postgresql://localhost/x")
        configuration.logger = capture.logger(level: .info)
        PoolObserver(configuration: configuration, options: PoolOptions(), reportInterval: .zero)
            .exhausted(PoolObserver.Counts(open: 8, idle: 0, leased: 0, waiting: 3))
        PoolObserver(configuration: configuration, options: PoolOptions(), reportInterval: .zero)
            .exhausted(PoolObserver.Counts(open: 8, idle: 0, leased: 8, waiting: 3))
        let messages = capture.records.map(\.message)
        #expect(messages.count == 2)
        #expect(messages.first?.contains("still being opened") == true)
        #expect(capture.records.first?.metadata["postgres.pool.opening"] == "8")
        #expect(messages.last?.contains("every connection is lent") == true)
        #expect(capture.records.last?.metadata["postgres.pool.opening"] == "0")
    }

    // MARK: Metrics

    @Test func metricsRecordDurationsErrorsByClassAndThePoolsCounts() async throws {
        let (admin, database) = try await freshConnection()
        try await admin.executeUnsafeRawSQL("CREATE TABLE t (id int PRIMARY KEY)")
        let metrics = TestMetrics()
        let pool = PostgresPool(
            configuration: configuration(database) { $0.metricsFactory = metrics },
            options: PoolOptions(maximumConnections: 2))
        try await pool.execute("INSERT INTO t VALUES (\(1))")
        await expectPostgresError(.uniqueViolation) { try await pool.execute("INSERT INTO t VALUES (\(1))") }
        await expectPostgresError(.undefinedTable) { try await pool.execute("SELECT * FROM missing") }

        let durations = try metrics.expectTimer(PostgresMetricName.queryDuration)
        #expect(durations.values.count == 3)
        #expect(durations.values.allSatisfy { $0 > 0 })
        #expect(try metrics.expectCounter(PostgresMetricName.errors, [("sqlstate_class", "23")]).totalValue == 1)
        #expect(try metrics.expectCounter(PostgresMetricName.errors, [("sqlstate_class", "42")]).totalValue == 1)

        let dimensions = [("pool", "primary")]
        #expect(try metrics.expectTimer(PostgresMetricName.acquireWait, dimensions).values.count == 3)
        #expect(try metrics.expectGauge(PostgresMetricName.poolOpen, dimensions).lastValue == 1)
        #expect(try metrics.expectGauge(PostgresMetricName.poolIdle, dimensions).lastValue == 1)
        #expect(try metrics.expectGauge(PostgresMetricName.poolLeased, dimensions).lastValue == 0)
        #expect(try metrics.expectGauge(PostgresMetricName.poolWaiting, dimensions).lastValue == 0)

        // While a lease is out and another caller waits, the gauges say so.
        let (held, release) = AsyncStream<Void>.makeStream()
        let holders = (0..<2).map { _ in Task { try await pool.withConnection { _ in for await _ in held { break } } } }
        try await waitFor { pool.statistics.inUse == 2 }
        let waiter = Task { try await pool.withConnection { _ in } }
        try await waitFor { pool.statistics.waiting == 1 }
        #expect(try metrics.expectGauge(PostgresMetricName.poolLeased, dimensions).lastValue == 2)
        #expect(try metrics.expectGauge(PostgresMetricName.poolWaiting, dimensions).lastValue == 1)
        #expect(try metrics.expectGauge(PostgresMetricName.poolOpen, dimensions).lastValue == 2)
        release.yield()
        release.yield()
        release.finish()
        for holder in holders { try await holder.value }
        try await waiter.value
        await pool.close()
        #expect(try metrics.expectGauge(PostgresMetricName.poolOpen, dimensions).lastValue == 0)
    }

    @Test func nothingIsRecordedOrTracedWhileTheBackendsAreTheNoOpOnes() {
        // The test process bootstraps neither system: the defaults are the no-op ones.
        let configuration = PostgresConfiguration("postgresql://localhost/x")
        #expect(configuration.observesNothing)
        var withMetrics = configuration
        withMetrics.metricsFactory = TestMetrics()
        #expect(!withMetrics.observesNothing)
        var withTracer = configuration
        withTracer.tracer = InMemoryTracer()
        #expect(!withTracer.observesNothing)
    }

    // MARK: Tracing

    @Test func eachStatementIsAClientSpanWithTheDatabaseConventionsAndNoValues() async throws {
        let (admin, database) = try await freshConnection()
        try await admin.executeUnsafeRawSQL("CREATE TABLE notes (body text CHECK (length(body) < 40))")
        let tracer = InMemoryTracer()
        let connection = try await PostgresConnection.connect(configuration(database) { $0.tracer = tracer })
        try await connection.execute("INSERT INTO notes VALUES (\(Self.secret))")
        let spans = tracer.finishedSpans
        let insert = try #require(spans.last)
        #expect(insert.operationName == "INSERT")
        #expect(insert.kind == .client)
        #expect(insert.attributes["db.system"]?.toSpanAttribute() == "postgresql")
        #expect(insert.attributes["db.system.name"]?.toSpanAttribute() == "postgresql")
        #expect(insert.attributes["db.namespace"]?.toSpanAttribute() == .string(database.name))
        #expect(insert.attributes["db.operation.name"]?.toSpanAttribute() == "INSERT")
        #expect(insert.attributes["db.query.text"]?.toSpanAttribute() == "INSERT INTO notes VALUES ($1)")
        #expect(insert.attributes["server.address"] != nil)
        #expect(insert.status == nil)

        await expectPostgresError(.checkViolation) {
            try await connection.execute("INSERT INTO notes VALUES (\(String(repeating: Self.secret, count: 3)))")
        }
        let failed = try #require(tracer.finishedSpans.last)
        #expect(failed.status?.code == .error)
        #expect(failed.attributes["db.response.status_code"]?.toSpanAttribute() == "23514")
        #expect(failed.errors.count == 1)
        let everything = tracer.finishedSpans.map { "\($0.attributes) \($0.errors.map { "\($0.error)" })" }.joined()
        #expect(!everything.contains(Self.secret))
        await connection.close()
    }

    @Test func aPipelineIsOneBatchSpan() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let tracer = InMemoryTracer()
        let connection = try await PostgresConnection.connect(configuration(database) { $0.tracer = tracer })
        _ = try await connection.pipeline(["SELECT \(1)", "SELECT \(2)", "SELECT \(3)"])
        let batch = try #require(tracer.finishedSpans.last)
        #expect(batch.operationName == "BATCH")
        #expect(batch.attributes["db.operation.batch.size"]?.toSpanAttribute() == 3)
        await connection.close()
    }
}

/// Polls `condition` every 10 ms for up to 10 s.
func waitFor(_ condition: () async throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while try await !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("the condition did not become true within 10 s", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// The pool as a swift-service-lifecycle `Service`.
@Suite struct PoolServiceTests {
    @Test func gracefulShutdownStopsLendingWaitsForLeasesThenCloses() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let capture = LogCapture()
        var configuration = PostgresConfiguration(database.connectionString)
        configuration.logger = capture.logger(level: .info)
        var options = PoolOptions(maximumConnections: 2)
        options.shutdownGracePeriod = .seconds(30)
        let pool = PostgresPool(configuration: configuration, options: options)
        let group = ServiceGroup(configuration: .init(services: [.init(service: pool)], logger: capture.logger(label: "group", level: .warning)))
        let running = Task { try await group.run() }

        // A lease in progress when shutdown begins finishes its work.
        let (held, release) = AsyncStream<Void>.makeStream()
        let lease = Task {
            try await pool.withConnection { connection in
                for await _ in held { break }
                return try await connection.fetchValue(Int.self, "SELECT \(7)")
            }
        }
        try await waitFor { pool.statistics.inUse == 1 }
        await group.triggerGracefulShutdown()
        try await waitFor { capture.records.contains { $0.message.hasPrefix("connection pool shutting down") } }

        // No new leases once shutdown began.
        await expectPostgresError(.poolClosed) { _ = try await pool.fetchValue(Int.self, "SELECT \(1)") }
        #expect(!capture.records.contains { $0.message == "connection pool closed" })

        release.yield()
        #expect(try await lease.value == 7)
        try await running.value
        #expect(capture.records.contains { $0.message == "connection pool closed" })
        #expect(pool.statistics.open == 0)
    }

    @Test func aLeaseThatOutlivesTheGracePeriodIsClosedUnderItsBorrower() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let capture = LogCapture()
        var configuration = PostgresConfiguration(database.connectionString)
        configuration.logger = capture.logger(level: .info)
        var options = PoolOptions(maximumConnections: 1)
        options.shutdownGracePeriod = .milliseconds(300)
        let pool = PostgresPool(configuration: configuration, options: options)
        let group = ServiceGroup(configuration: .init(services: [.init(service: pool)], logger: capture.logger(label: "group", level: .warning)))
        let running = Task { try await group.run() }

        let stuck = Task {
            try await pool.withConnection { connection in
                try await connection.execute("SELECT pg_sleep(\(30))")
            }
        }
        try await waitFor { pool.statistics.inUse == 1 }
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(capture.records.contains { $0.level == .warning && $0.message.contains("closed") && $0.metadata["postgres.pool.closed_under_borrowers"] == "1" })
        await #expect(throws: PostgresError.self) { try await stuck.value }
    }
}
