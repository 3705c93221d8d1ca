import EmbeddedPostgres
import Foundation
import Migrator
import Postgres

/// The write path of `events` at one schema version: what an insert costs the server, split
/// by EXPLAIN (ANALYZE) into triggers and foreign keys, against a bare copy of the table.
struct WritePathPoint: Codable, Sendable {
    var version: Int
    /// Server time of one single-statement insert (its own transaction): pgbench's latency
    /// minus that of `SELECT 1`, in µs.
    var insertMicros: Double
    /// The same insert into `bare_events` (same columns, a primary key, nothing else).
    var bareMicros: Double
    /// The first insert of a new session (EXPLAIN ANALYZE's execution time), in µs.
    var firstInsertMicros: Double
    /// Trigger and foreign-key lines of EXPLAIN (ANALYZE) of a warm insert, and its total.
    var breakdown: [String]
    /// Binary COPY of 20,000 events with every rule on.
    var copyPerSecond: Double
    /// Share of 1,000 single-row updates of `notes` that were HOT (touched no index).
    var hotShare: Double
}

extension Runner {
    /// The write path at each schema that changed it, in one run: 0019 (the schema the
    /// write-path issue measured), 0024 (trimmed, with the spec's four indexes), 0028 (the
    /// last before the CHECKs were made cheap to prepare) and the newest migration.
    mutating func writePath(cluster: EmbeddedPostgres) async throws {
        let newest = try MigrationFile.load(from: repository.appendingPathComponent("Migrations")).map(\.version).max() ?? 0
        for version in [19, 24, 28, newest].filter({ $0 <= newest }).reduce(into: [Int](), { if !$0.contains($1) { $0.append($1) } }) {
            log("write path at migration \(version)")
            writePathPoints.append(try await writePathPoint(cluster: cluster, version: version))
        }
    }

    private func writePathPoint(cluster: EmbeddedPostgres, version: Int) async throws -> WritePathPoint {
        let name = "write_\(version)"
        try await cluster.createDatabase(name)
        let url = try cluster.connectionString(database: name)
        _ = try await Migrator(configuration: PostgresConfiguration(url), options: .init(directory: repository.appendingPathComponent("Migrations"))).up(to: version)
        let connection = try await PostgresConnection.connect(url)
        let family = try await DomainData.families(connection, count: 1, tag: name)[0]
        try await connection.executeUnsafeRawSQL("""
            CREATE TABLE bare_events (LIKE events INCLUDING DEFAULTS);
            ALTER TABLE bare_events ADD PRIMARY KEY (id);
            ALTER TABLE bare_events ALTER change_seq DROP NOT NULL;
            """)
        let insert = { (table: String) in
            """
            INSERT INTO \(table) (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            VALUES ('\(family.child)', '\(family.user)', 'diaper', now() - random() * interval '300 days', 'UTC', 0, '{"contents":"wet"}');
            """
        }
        // pgbench, one client, each insert its own transaction; interleaved, medians of three.
        var events: [Double] = [], bare: [Double] = [], floor: [Double] = []
        for _ in 0..<3 {
            events.append(try await pgbenchLatency(cluster: cluster, database: name, script: insert("events")))
            bare.append(try await pgbenchLatency(cluster: cluster, database: name, script: insert("bare_events")))
            floor.append(try await pgbenchLatency(cluster: cluster, database: name, script: "SELECT 1;"))
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let roundTrip = median(floor)

        // EXPLAIN (ANALYZE): the first insert of a fresh session, then a warm one.
        let fresh = try await PostgresConnection.connect(url)
        let explain = SQL(unsafeRawSQL: "EXPLAIN (ANALYZE, COSTS OFF) " + insert("events"))
        try await fresh.executeUnsafeRawSQL("BEGIN")
        let firstPlan = try await fresh.query(explain).decodeColumn(String.self)
        _ = try await fresh.query(explain)
        let warmPlan = try await fresh.query(explain).decodeColumn(String.self)
        try await fresh.executeUnsafeRawSQL("ROLLBACK")
        await fresh.close()
        func executionMicros(_ plan: [String]) -> Double {
            plan.first { $0.contains("Execution Time:") }.flatMap { Double($0.split(separator: " ").dropLast().last ?? "") }.map { $0 * 1000 } ?? 0
        }
        let breakdown = warmPlan.filter { $0.contains("Trigger") || $0.contains("Execution Time") || $0.hasPrefix("Insert on") }
            .map { $0.trimmingCharacters(in: .whitespaces) }

        // COPY with every rule on.
        let rows = 20_000
        let start = ContinuousClock.now
        _ = try await connection.copyIn(table: "events", columns: ["id", "child_id", "logged_by", "event_type", "start_time", "start_tz", "start_offset_seconds", "data"]) { writer in
            let contents = JSONB(#"{"contents":"wet"}"#)
            let base = Date(timeIntervalSince1970: 1_763_683_200)
            for index in 0..<rows {
                try writer.append([UUID(), family.child, family.user, "diaper", base.addingTimeInterval(-Double(index) * 60), "UTC", Int32(0), contents])
            }
        }
        let copySeconds = seconds(ContinuousClock.now - start)

        // HOT: 1,000 updates of notes, one per transaction.
        try await connection.executeUnsafeRawSQL("ANALYZE events")
        let before = try await hotCounters(connection)
        let ids = try await connection.query("SELECT id FROM events ORDER BY random() LIMIT 1000").decodeColumn(UUID.self)
        for (index, id) in ids.enumerated() {
            try await connection.execute("UPDATE events SET notes = \("note \(index)") WHERE id = \(id)")
        }
        try await Task.sleep(for: .milliseconds(1200)) // the backend flushes its counters at most once a second
        _ = try await connection.fetchValue(Int.self, "SELECT 1") // a new transaction sees them
        let after = try await hotCounters(connection)
        await connection.close()
        let updated = max(1, after.updates - before.updates)
        return WritePathPoint(
            version: version, insertMicros: (median(events) - roundTrip) * 1e6, bareMicros: (median(bare) - roundTrip) * 1e6,
            firstInsertMicros: executionMicros(firstPlan), breakdown: breakdown,
            copyPerSecond: Double(rows) / copySeconds, hotShare: Double(after.hot - before.hot) / Double(updated))
    }

    private func hotCounters(_ connection: PostgresConnection) async throws -> (updates: Int, hot: Int) {
        try await connection.executeUnsafeRawSQL("SELECT pg_stat_clear_snapshot()")
        let row = try await connection.query("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'events'").first
        return (try row?.decode(Int.self, at: 0) ?? 0, try row?.decode(Int.self, at: 1) ?? 0)
    }

    /// pgbench's average latency in seconds for `script`, one client, 3,000 transactions.
    private func pgbenchLatency(cluster: EmbeddedPostgres, database: String, script: String) async throws -> Double {
        let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("bbbench-write-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sql")
        try Data(script.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        var environment = ProcessInfo.processInfo.environment
        environment["PGPASSFILE"] = cluster.passFile.path
        let result = try await ChildProcess.spawn([
            try Runner.pgbench(), "-n", "-M", "prepared", "-c", "1", "-t", quick ? "500" : "3000", "-f", file.path,
            "-h", cluster.directory.path, "-p", String(try cluster.port()), "-U", EmbeddedPostgres.superuser, database,
        ], environment: environment).result()
        guard result.status == 0,
              let line = result.stdout.split(separator: "\n").first(where: { $0.hasPrefix("latency average") }),
              let milliseconds = Double(line.split(separator: " ").dropLast().last ?? "") else {
            throw BenchError("pgbench failed: \(result.stderr)")
        }
        return milliseconds / 1000
    }

    /// The write-path table for BENCHMARKS.md: a column per schema version, the goals judged
    /// on the newest.
    func writePathSection() -> [String] {
        guard let after = writePathPoints.last, writePathPoints.count >= 2 else { return [] }
        let points = writePathPoints
        func micros(_ value: Double) -> String { "\(Int(value.rounded())) µs" }
        func row(_ name: String, _ value: (WritePathPoint) -> String, goal: String, met: String) -> String {
            "| \(name) | " + points.map(value).joined(separator: " | ") + " | \(goal) | \(met) |"
        }
        let versions = points.map { "\($0.version)" }.joined(separator: ", ")
        var lines = [
            "",
            "## Write path: events at migrations \(versions), same run",
            "",
            "Server time of one insert = pgbench's latency (`-M prepared`, one client, each insert its own transaction)",
            "minus that of `SELECT 1`, medians of three interleaved runs. `bare_events` has the same columns and a",
            "primary key only: the floor. 19 is the schema the write-path work started from; 24 is the trimmed",
            "write path with the spec's four indexes; 28 the last schema before 29, which states the same CHECKs",
            "so that PostgreSQL prepares them cheaply (it prepares a table's CHECKs for every statement). Goals:",
            "issue 32's, for the schema with every rule.",
            "",
            "| | " + points.map { "Migration \($0.version)" }.joined(separator: " | ") + " | Goal | Met (\(after.version)) |",
            "| --- | " + points.map { _ in "---" }.joined(separator: " | ") + " | --- | --- |",
            row("Insert, server time", { micros($0.insertMicros) }, goal: "≤ 3× the bare table",
                met: "\(after.insertMicros <= 3 * after.bareMicros ? "yes" : "**no**") (\(String(format: "%.1f", after.insertMicros / max(after.bareMicros, 1)))×)"),
            row("Bare table insert, server time", { micros($0.bareMicros) }, goal: "the floor", met: "–"),
            row("First insert of a new session (execution)", { micros($0.firstInsertMicros) }, goal: "report", met: "–"),
            row("Binary COPY, every rule on", { "\(Int($0.copyPerSecond)) events/s" }, goal: "≥ 60k events/s", met: after.copyPerSecond >= 60_000 ? "yes" : "**no**"),
            row("Updates of `notes` that were HOT", { "\(Int($0.hotShare * 100)) %" }, goal: "an update touches no index whose columns did not change",
                met: after.hotShare >= 0.9 ? "yes" : "**no**"),
            "",
            "EXPLAIN (ANALYZE) of a warm insert:",
            "",
            "| " + points.map { "Migration \($0.version)" }.joined(separator: " | ") + " |",
            "| " + points.map { _ in "---" }.joined(separator: " | ") + " |",
        ]
        for index in 0..<(points.map(\.breakdown.count).max() ?? 0) {
            lines.append("| " + points.map { index < $0.breakdown.count ? $0.breakdown[index] : "" }.joined(separator: " | ") + " |")
        }
        return lines
    }
}
