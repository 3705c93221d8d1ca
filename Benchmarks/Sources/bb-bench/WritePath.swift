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

/// What one group of rules costs at the newest schema: the write path measured again on a
/// copy of the database with that group removed, in the same run.
struct WritePathAblation: Codable, Sendable {
    /// The group removed, as the report names it ("" for none: every rule on).
    var removed: String
    /// The server's CPU time for one single-row insert in its own transaction, in µs: the
    /// backend's time on a CPU (`/proc/PID/schedstat`) over a loop of inserts. Unlike a
    /// latency difference it does not count waiting for a CPU, so it holds on a busy machine.
    var insertCPUMicros: Double
    /// Binary COPY of 20,000 events.
    var copyPerSecond: Double
}

/// The middle of an odd number of interleaved runs.
private func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

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
        log("write path at migration \(newest): what each group of rules costs")
        writePathAblations = try await writePathAblation(cluster: cluster, template: "write_\(newest)")
    }

    /// The groups of rules on `events` that the ablation removes, one at a time: a name for
    /// the report, and the SQL that removes the group from a copy of the database.
    private static let ruleGroups: [(name: String, remove: String)] = [
        ("its CHECK constraints", dropConstraints(ofType: "c")),
        ("its foreign keys", dropConstraints(ofType: "f")),
        ("its bookkeeping trigger (zone check, lock order, sync stamp)", """
            ALTER TABLE events DISABLE TRIGGER events_bookkeeping;
            ALTER TABLE events ALTER change_seq DROP NOT NULL;
            """),
        ("its indexes but the primary key", """
            DO $$ DECLARE i record; BEGIN
                FOR i IN SELECT indexrelid::regclass AS name FROM pg_index WHERE indrelid = 'events'::regclass AND NOT indisprimary LOOP
                    EXECUTE format('DROP INDEX %s', i.name);
                END LOOP;
            END $$;
            """),
    ]

    /// SQL that drops every constraint of `events` of one `pg_constraint.contype` (a constant).
    private static func dropConstraints(ofType type: StaticString) -> String {
        """
        DO $$ DECLARE c record; BEGIN
            FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype = '\(type)' LOOP
                EXECUTE format('ALTER TABLE events DROP CONSTRAINT %I', c.conname);
            END LOOP;
        END $$;
        """
    }

    /// The insert and the COPY on copies of `template` (a migrated write-path database with
    /// `bare_events`), each with one group of rules removed; the insert's server CPU time in
    /// interleaved rounds, medians of three. The first row is every rule; the last the bare table.
    private func writePathAblation(cluster: EmbeddedPostgres, template: String) async throws -> [WritePathAblation] {
        let groups = [(name: "", remove: "")] + Self.ruleGroups
        var connections: [PostgresConnection] = []
        var family: DomainData.Family?
        for (index, group) in groups.enumerated() {
            let name = "\(template)_without_\(index)"
            try await cluster.createDatabase(name, template: template)
            let connection = try await PostgresConnection.connect(try cluster.connectionString(database: name))
            if !group.remove.isEmpty { try await connection.executeUnsafeRawSQL(group.remove) }
            // One procedure call per measurement: each insert its own transaction, its plan
            // cached (as pgbench's -M prepared), no client round trip between them.
            try await connection.executeUnsafeRawSQL("""
                CREATE PROCEDURE bench_insert_loop(tbl text, child uuid, logged_by uuid, n integer) LANGUAGE plpgsql AS $$
                BEGIN
                    FOR i IN 1..n LOOP
                        IF tbl = 'events' THEN
                            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                            VALUES (child, logged_by, 'diaper', now() - random() * interval '300 days', 'UTC', 0, '{"contents":"wet"}');
                        ELSE
                            INSERT INTO bare_events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                            VALUES (child, logged_by, 'diaper', now() - random() * interval '300 days', 'UTC', 0, '{"contents":"wet"}');
                        END IF;
                        COMMIT;
                    END LOOP;
                END $$;
                """)
            if family == nil {
                let row = try await connection.query("SELECT id, primary_caregiver_id FROM children LIMIT 1").first
                family = try row.map { DomainData.Family(child: try $0.decode(UUID.self, at: 0), user: try $0.decode(UUID.self, at: 1), zone: "UTC") }
            }
            connections.append(connection)
        }
        guard let family else { throw BenchError("write path: the database \(template) has no child") }
        let count = quick ? 1_000 : 3_000
        func cpuMicrosPerInsert(_ connection: PostgresConnection, table: String) async throws -> Double {
            try await connection.execute("CALL bench_insert_loop(\(table), \(family.child), \(family.user), \(Int32(200)))") // warm
            guard let pid = try await connection.fetchValue(Int32.self, "SELECT pg_backend_pid()") else { throw BenchError("write path: no backend pid") }
            let before = try Self.cpuSeconds(of: pid)
            try await connection.execute("CALL bench_insert_loop(\(table), \(family.child), \(family.user), \(Int32(count)))")
            return (try Self.cpuSeconds(of: pid) - before) / Double(count) * 1e6
        }
        var inserts = Array(repeating: [Double](), count: groups.count + 1)
        for _ in 0..<3 {
            for (index, connection) in connections.enumerated() {
                inserts[index].append(try await cpuMicrosPerInsert(connection, table: "events"))
            }
            inserts[groups.count].append(try await cpuMicrosPerInsert(connections[0], table: "bare_events"))
        }
        var ablations: [WritePathAblation] = []
        for (index, connection) in connections.enumerated() {
            ablations.append(WritePathAblation(removed: groups[index].name, insertCPUMicros: median(inserts[index]), copyPerSecond: try await Self.copyRate(connection, family)))
            await connection.close()
        }
        ablations.append(WritePathAblation(removed: "everything but the primary key (`bare_events`)", insertCPUMicros: median(inserts[groups.count]), copyPerSecond: 0))
        return ablations
    }

    /// A server process's CPU time so far, in seconds: `/proc/PID/schedstat`'s time on a CPU
    /// (nanoseconds), else user + system time from `/proc/PID/stat` (10 ms ticks: too coarse
    /// for a bare insert's few µs over a few thousand inserts, so only a fallback).
    private static func cpuSeconds(of pid: Int32) throws -> Double {
        if let schedstat = try? String(contentsOfFile: "/proc/\(pid)/schedstat", encoding: .utf8),
           let onCPU = schedstat.split(separator: " ").first.flatMap({ Double($0) }), onCPU > 0 {
            return onCPU / 1e9
        }
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else {
            throw BenchError("write path: cannot read /proc/\(pid)/stat (the server's CPU time is read from /proc, on Linux)")
        }
        // After "pid (comm)": state is field 3, utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
            throw BenchError("write path: unexpected /proc/\(pid)/stat: \(stat.prefix(120))")
        }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The insert every write-path figure times (pgbench's script: the values are ours).
    private static func insert(into table: String, _ family: DomainData.Family) -> String {
        """
        INSERT INTO \(table) (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
        VALUES ('\(family.child)', '\(family.user)', 'diaper', now() - random() * interval '300 days', 'UTC', 0, '{"contents":"wet"}');
        """
    }

    /// Binary COPY of 20,000 diaper events into `events`, in events per second.
    private static func copyRate(_ connection: PostgresConnection, _ family: DomainData.Family) async throws -> Double {
        let rows = 20_000
        let start = ContinuousClock.now
        _ = try await connection.copyIn(table: "events", columns: ["id", "child_id", "logged_by", "event_type", "start_time", "start_tz", "start_offset_seconds", "data"]) { writer in
            let contents = JSONB(#"{"contents":"wet"}"#)
            let base = Date(timeIntervalSince1970: 1_763_683_200)
            for index in 0..<rows {
                try writer.append([UUID(), family.child, family.user, "diaper", base.addingTimeInterval(-Double(index) * 60), "UTC", Int32(0), contents])
            }
        }
        return Double(rows) / seconds(ContinuousClock.now - start)
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
        let insert = { (table: String) in Self.insert(into: table, family) }
        // pgbench, one client, each insert its own transaction; interleaved, medians of three.
        var events: [Double] = [], bare: [Double] = [], floor: [Double] = []
        for _ in 0..<3 {
            events.append(try await pgbenchLatency(cluster: cluster, database: name, script: insert("events")))
            bare.append(try await pgbenchLatency(cluster: cluster, database: name, script: insert("bare_events")))
            floor.append(try await pgbenchLatency(cluster: cluster, database: name, script: "SELECT 1;"))
        }
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
        let copyPerSecond = try await Self.copyRate(connection, family)

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
            copyPerSecond: copyPerSecond, hotShare: Double(after.hot - before.hot) / Double(updated))
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
        // A difference of two latencies at or below zero is the noise of a shared machine (one
        // run here printed a bare insert of −27 µs), not a server time.
        func micros(_ value: Double) -> String { value > 0 ? "\(Int(value.rounded())) µs" : "within the noise" }
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
                met: after.bareMicros <= 0 || after.insertMicros <= 0 ? "not measured (a time within the noise)"
                    : "\(after.insertMicros <= 3 * after.bareMicros ? "yes" : "**no**") (\(String(format: "%.1f", after.insertMicros / after.bareMicros))×)"),
            row("Bare table insert, server time", { micros($0.bareMicros) }, goal: "the floor", met: "–"),
            row("First insert of a new session (execution)", { micros($0.firstInsertMicros) }, goal: "report", met: "–"),
            row("Binary COPY, every rule on", { "\(Int($0.copyPerSecond)) events/s" }, goal: "≥ 60k events/s", met: after.copyPerSecond >= 60_000 ? "yes" : "**no**"),
            row("Updates of `notes` that were HOT", { "\(Int($0.hotShare * 100)) %" }, goal: "an update touches no index whose columns did not change",
                met: after.hotShare >= 0.9 ? "yes" : "**no**"),
        ]
        lines += writePathAblationLines(version: after.version)
        lines += [
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

    /// What each group of rules costs: the ablation's table, and what it says about the goals.
    private func writePathAblationLines(version: Int) -> [String] {
        guard let every = writePathAblations.first, let bare = writePathAblations.last, writePathAblations.count >= 3 else { return [] }
        let single = Array(writePathAblations.dropFirst().dropLast())
        func micros(_ value: Double) -> String { "\(Int(value.rounded())) µs" }
        func ratio(_ value: Double) -> String { bare.insertCPUMicros > 0 ? String(format: "%.1f×", value / bare.insertCPUMicros) : "–" }
        var lines = [
            "",
            "What each group of rules costs at migration \(version): the same insert on copies of the database, each with one",
            "group removed from `events`, in the same run. Server CPU time per insert (the backend's time on a CPU over",
            "a loop of single-row inserts, each its own transaction, interleaved, medians of three): unlike a latency",
            "difference it does not count waiting for a CPU. COPY as above. The issue keeps every group.",
            "",
            "| Removed from `events` | Insert, server CPU | × the bare table | Saved | Binary COPY |",
            "| --- | --- | --- | --- | --- |",
            "| nothing (every rule) | \(micros(every.insertCPUMicros)) | \(ratio(every.insertCPUMicros)) | – | \(Int(every.copyPerSecond)) events/s |",
        ]
        for group in single {
            lines.append("| \(group.removed) | \(micros(group.insertCPUMicros)) | \(ratio(group.insertCPUMicros)) | "
                + "\(micros(every.insertCPUMicros - group.insertCPUMicros)) | \(Int(group.copyPerSecond)) events/s |")
        }
        lines.append("| \(bare.removed) | \(micros(bare.insertCPUMicros)) | 1.0× | \(micros(every.insertCPUMicros - bare.insertCPUMicros)) | – |")
        if let cheapest = single.min(by: { $0.insertCPUMicros < $1.insertCPUMicros }), let fastest = single.max(by: { $0.copyPerSecond < $1.copyPerSecond }) {
            let withinInsertGoal = single.filter { $0.insertCPUMicros <= 3 * bare.insertCPUMicros }.map(\.removed)
            let withinCopyGoal = single.filter { $0.copyPerSecond >= 60_000 }.map(\.removed)
            let insertLine = every.insertCPUMicros <= 3 * bare.insertCPUMicros
                ? "With every rule the insert costs the server at most 3× the bare table."
                : withinInsertGoal.isEmpty
                    ? "Without any one group the insert still costs the server more than 3× the bare table (\(ratio(cheapest.insertCPUMicros)) at the least, without \(cheapest.removed)): no one group alone stands between it and the goal."
                    : "The insert costs the server at most 3× the bare table only without \(withinInsertGoal.joined(separator: ", or without "))."
            let copyLine = every.copyPerSecond >= 60_000
                ? "With every rule COPY reaches 60k events/s."
                : withinCopyGoal.isEmpty
                    ? "COPY stays under 60k events/s without any one group (\(Int(fastest.copyPerSecond)) events/s at the most, without \(fastest.removed))."
                    : "COPY reaches 60k events/s only without \(withinCopyGoal.joined(separator: ", or without "))."
            lines += ["", insertLine, copyLine]
        }
        return lines
    }
}
