import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import PostgresTestKit
import Synchronization

/// The Citus group (`make citus-bench`, never part of a plain `make bench`: it needs a Citus
/// build): the store on a coordinator with two workers against the same store on one server,
/// and a shard move under a steady write load with devices syncing all the while.
struct CitusResult: Codable, Sendable {
    var families = 0
    var eventsLoaded = 0
    var dashboardSingle = Measurement(), dashboardCluster = Measurement()
    var timelineSingle = Measurement(), timelineCluster = Measurement()
    var insertSingle = Measurement(), insertCluster = Measurement()
    /// What every call pays: a `SELECT 1` round trip, and one row of one child by its key (a
    /// router query on the cluster: planned on the coordinator, run on one worker).
    var roundTripSingle = Measurement(), roundTripCluster = Measurement()
    var oneRowSingle = Measurement(), oneRowCluster = Measurement()
    /// What fans out: a caregiver of four children lists them, reads one sync page of all four,
    /// and exports everything as JSON.
    var childrenSingle = Measurement(), childrenCluster = Measurement()
    var syncSingle = Measurement(), syncCluster = Measurement()
    var exportSingle = Measurement(), exportCluster = Measurement()
    var move = ShardMoveResult()
    var date = ""
    var machine = ""
}

/// What a `citus_move_shard_placement(…, 'force_logical')` of one shard group did to writers
/// and to the devices syncing the children on it.
struct ShardMoveResult: Codable, Sendable {
    /// The shards moved together (one per distributed table: the group is co-located).
    var shardsMoved = 0
    var moveSeconds = 0.0
    /// Writes the store confirmed while the move ran (and the short while after it).
    var confirmedWrites = 0
    var writesPerSecond = 0.0
    /// The same writers in the two seconds before the move started.
    var writesPerSecondBefore = 0.0
    /// Writes that ended in an error; `unknownOutcome` of them may have been saved.
    var failedWrites = 0
    var unknownOutcome = 0
    /// Children on the moved shard group, each followed by its own device.
    var childrenFollowed = 0
    var pagesRead = 0
    /// Events delivered by the feed to those devices, and of them: confirmed writes never
    /// delivered (lost), and events delivered more than once (repeated). Events are only inserted
    /// here, so each must come exactly once.
    var delivered = 0
    var lost = 0
    var repeated = 0
    /// Rows of those children in the database at the end that no device was given.
    var notDelivered = 0
}

/// What the writers and devices of the shard move share.
final class MoveState: Sendable {
    let moving = Atomic<Bool>(true)
    /// Every writer has returned: no write is in flight any more.
    let writersDone = Atomic<Bool>(false)
    /// Child → the ids of the events the store confirmed for it.
    let confirmed = Mutex<[UUID: Set<UUID>]>([:])
    let failures = Mutex<(failed: Int, unknown: Int)>((0, 0))
}

extension Runner {
    /// The Citus group. `BB_TEST_CITUS=1` and `BB_PG_BINDIR` (a PostgreSQL with Citus:
    /// `scripts/citus-build.sh`) must be set; `make citus-bench` sets both.
    mutating func citus() async throws {
        guard TestCitus.fromEnvironment() != nil, let binaries = ProcessInfo.processInfo.environment["BB_PG_BINDIR"] else {
            throw BenchError("the Citus group needs a Citus build: run make citus-bench CITUS_SRC=~/citus")
        }
        var result = CitusResult()
        let families = quick ? 8 : 20
        result.families = families

        // One server: the same PostgreSQL build, the settings the test kit gives each Citus node,
        // without Citus.
        let base = "/tmp/bbbench-single-\(getpid())"
        let single = EmbeddedPostgres(directory: URL(fileURLWithPath: base), options: .init(durable: false, maxConnections: 400, settings: [
            "shared_buffers": "256MB", "max_locks_per_transaction": "256",
        ]))
        log("citus: one server from \(binaries)")
        try await runOnDedicatedThread { _ = try single.start() }
        defer { try? single.stop(immediate: true); try? FileManager.default.removeItem(atPath: base) }
        let (singleURL, singleAdmin, singleFamilies, end) = try await familyDatabase(single, name: "single", count: families)

        // The cluster: a coordinator and two workers (the test kit's Citus mode), migrated the way
        // docs/scale-out.md describes, loaded with the same families.
        log("citus: a coordinator and two workers")
        let migrations = repository.appendingPathComponent("Migrations")
        let database = try await TestPostgres.shared.makeDatabase(template: "citus_bench") { connection in
            let name = try await connection.fetchValue(String.self, "SELECT current_database()") ?? ""
            let cluster = try await TestPostgres.shared.cluster()
            try await Migrator(configuration: PostgresConfiguration(try cluster.connectionString(database: name)), options: .init(directory: migrations)).up()
        }
        let clusterAdmin = try await database.connect()
        let clusterFamilies = try await DomainData.families(clusterAdmin, count: families, tag: "citus")
        result.eventsLoaded = try await DomainData.load(clusterAdmin, families: clusterFamilies, days: 30, end: end)
        try await clusterAdmin.executeUnsafeRawSQL("VACUUM (ANALYZE) events")

        // Each store as the service runs it: the app's role; on the coordinator a custom plan per
        // call, so each routes to its child's shard (docs/scale-out.md).
        let singleStore = Store(pool: PostgresPool(configuration: Store.configured(PostgresConfiguration(singleURL + "&options=-crole%3Dbabybasics_app")),
                                                   options: PoolOptions(maximumConnections: 8)))
        var clusterConfiguration = PostgresConfiguration(database.connectionString + "&options=-crole%3Dbabybasics_app")
        clusterConfiguration.serverSettings["plan_cache_mode"] = "auto"
        let clusterStore = Store(pool: PostgresPool(configuration: Store.configured(clusterConfiguration), options: PoolOptions(maximumConnections: 8)))

        // A grandparent who cares for four of the children (on different shards, most likely):
        // the calls that must read every shard.
        let grandparent = UUID()
        for admin in [singleAdmin, clusterAdmin] {
            try await admin.execute("INSERT INTO users (id, email, display_name) VALUES (\(grandparent), \("grandparent-\(grandparent.uuidString.prefix(8))@example.com"), 'Grandparent')")
        }
        for index in 0..<4 {
            try await singleAdmin.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(singleFamilies[index].child), \(grandparent), 'caregiver')")
            try await clusterAdmin.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(clusterFamilies[index].child), \(grandparent), 'caregiver')")
        }
        let fanOutCalls = quick ? 20 : 100
        for round in 0..<(fanOutCalls + 5) {
            let c1 = try await timed { _ = try await singleStore.children.list(as: grandparent) }.1
            let c2 = try await timed { _ = try await clusterStore.children.list(as: grandparent) }.1
            let s1 = try await timed { _ = try await singleStore.events.changes(for: grandparent, after: .start, limit: 500) }.1
            let s2 = try await timed { _ = try await clusterStore.events.changes(for: grandparent, after: .start, limit: 500) }.1
            let e1 = try await timed { try await singleStore.events.exportJSON(as: grandparent) { _ in } }.1
            let e2 = try await timed { try await clusterStore.events.exportJSON(as: grandparent) { _ in } }.1
            guard round >= 5 else { continue }
            result.childrenSingle.latencies.append(c1); result.childrenCluster.latencies.append(c2)
            result.syncSingle.latencies.append(s1); result.syncCluster.latencies.append(s2)
            result.exportSingle.latencies.append(e1); result.exportCluster.latencies.append(e2)
        }

        // 1. Dashboard, timeline and one insert, interleaved call by call (one server, cluster, …).
        let calls = quick ? 100 : 500
        var random = SplitMix(seed: 11)
        func today(_ zone: String) -> PostgresDate { PostgresDate(end, in: TimeZone(identifier: zone) ?? .gmt) }
        for round in 0..<(calls + 20) {
            let index = random.int(families)
            let (a, b) = (singleFamilies[index], clusterFamilies[index])
            let warm = round < 20
            let d1 = try await timed { _ = try await singleStore.events.dashboard(for: a.child, now: end, as: a.user) }.1
            let d2 = try await timed { _ = try await clusterStore.events.dashboard(for: b.child, now: end, as: b.user) }.1
            let t1 = try await timed { _ = try await singleStore.events.timeline(for: a.child, day: today(a.zone), now: end, as: a.user) }.1
            let t2 = try await timed { _ = try await clusterStore.events.timeline(for: b.child, day: today(b.zone), now: end, as: b.user) }.1
            let i1 = try await timed { _ = try await singleStore.events.log(EventDraft(childID: a.child, payload: .diaper(.wet), start: EventTimestamp(Date(), in: .gmt)), as: a.user) }.1
            let i2 = try await timed { _ = try await clusterStore.events.log(EventDraft(childID: b.child, payload: .diaper(.wet), start: EventTimestamp(Date(), in: .gmt)), as: b.user) }.1
            let r1 = try await timed { _ = try await singleAdmin.fetchValue(Int32.self, "SELECT 1") }.1
            let r2 = try await timed { _ = try await clusterAdmin.fetchValue(Int32.self, "SELECT 1") }.1
            let o1 = try await timed { _ = try await singleAdmin.query("SELECT id, start_time FROM events WHERE child_id = \(a.child) ORDER BY start_time DESC LIMIT 1") }.1
            let o2 = try await timed { _ = try await clusterAdmin.query("SELECT id, start_time FROM events WHERE child_id = \(b.child) ORDER BY start_time DESC LIMIT 1") }.1
            guard !warm else { continue }
            result.roundTripSingle.latencies.append(r1); result.roundTripCluster.latencies.append(r2)
            result.oneRowSingle.latencies.append(o1); result.oneRowCluster.latencies.append(o2)
            result.dashboardSingle.latencies.append(d1); result.dashboardCluster.latencies.append(d2)
            result.timelineSingle.latencies.append(t1); result.timelineCluster.latencies.append(t2)
            result.insertSingle.latencies.append(i1); result.insertCluster.latencies.append(i2)
            if round % 100 == 0 { log("citus: call \(round - 20) of \(calls)") }
        }

        // 2. A shard move under load.
        result.move = try await shardMove(admin: clusterAdmin, store: clusterStore, families: clusterFamilies)
        result.date = ISO8601DateFormatter().string(from: Date())
        let load = ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
        result.machine = "\(ProcessInfo.processInfo.activeProcessorCount) cores, all three nodes and the one server on this machine, load average \(load) at the end; "
            + "PostgreSQL \(try await clusterAdmin.fetchValue(String.self, "SHOW server_version") ?? "?"), Citus \(try await clusterAdmin.fetchValue(String.self, "SELECT extversion FROM pg_extension WHERE extname = 'citus'") ?? "?")"
        await singleStore.pool.close()
        await clusterStore.pool.close()
        await singleAdmin.close()
        await clusterAdmin.close()
        citusResult = result
    }

    /// Moves the shard group holding the first family's child to the other worker while four
    /// writers log events for every child and one device per child on that group pages the
    /// feed; then reads every device's feed to its end and counts what was lost or repeated.
    func shardMove(admin: PostgresConnection, store: Store, families: [DomainData.Family]) async throws -> ShardMoveResult {
        var result = ShardMoveResult()
        let shard = try await admin.fetchValue(Int64.self, "SELECT get_shard_id_for_distribution_column('events', \(families[0].child))") ?? 0
        let placement = try await admin.query("SELECT nodename::text, nodeport::int4 FROM citus_shards WHERE shardid = \(shard)")
        guard let source = placement.first else { throw BenchError("no placement for shard \(shard)") }
        let (sourceHost, sourcePort) = (try source.decode(String.self, at: 0), try source.decode(Int32.self, at: 1))
        guard let target = try await admin.query("""
            SELECT nodename::text, nodeport::int4 FROM pg_dist_node
            WHERE groupid <> 0 AND isactive AND noderole = 'primary' AND NOT (nodename = \(sourceHost) AND nodeport = \(sourcePort))
            ORDER BY nodeid LIMIT 1
            """).first else { throw BenchError("no other worker to move shard \(shard) to") }
        let (targetHost, targetPort) = (try target.decode(String.self, at: 0), try target.decode(Int32.self, at: 1))
        // The shards of the same hash range in the tables co-located with events move with it.
        result.shardsMoved = try await admin.fetchValue(Int64.self, """
            SELECT count(*) FROM pg_dist_shard s
            JOIN pg_dist_shard e ON e.shardid = \(shard) AND s.shardminvalue = e.shardminvalue
            JOIN pg_dist_partition p ON p.logicalrelid = s.logicalrelid
            WHERE p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'events'::regclass)
            """).map(Int.init) ?? 0
        // The children on the moving group: each gets a device that follows it.
        var followed: [DomainData.Family] = []
        for family in families where try await admin.fetchValue(Int64.self, "SELECT get_shard_id_for_distribution_column('events', \(family.child))") == shard {
            followed.append(family)
        }
        result.childrenFollowed = followed.count

        let state = MoveState()
        let writers = (0..<4).map { writer in
            Task {
                var index = writer
                while state.moving.load(ordering: .relaxed) {
                    let family = families[index % families.count]
                    index += 1
                    do {
                        let event = try await store.events.log(EventDraft(childID: family.child, payload: .diaper(.dirty), start: EventTimestamp(Date(), in: .gmt)), as: family.user)
                        state.confirmed.withLock { _ = $0[family.child, default: []].insert(event.id) }
                    } catch {
                        state.failures.withLock { counts in
                            counts.failed += 1
                            if case StoreError.outcomeUnknown = error { counts.unknown += 1 }
                        }
                    }
                }
            }
        }
        let devices = followed.map { family in
            Task { () throws -> (delivered: [UUID: Int], pages: Int) in
                var cursor = SyncCursor.start
                var delivered: [UUID: Int] = [:]
                var pages = 0
                var quietPages = 0
                // Page while the move runs, then to the end: until two empty pages in a row after
                // the last writer returned (not merely was told to stop: its last write may still
                // be committing).
                while true {
                    let page = try await store.events.changes(for: family.user, child: family.child, after: cursor, limit: 50)
                    pages += 1
                    for event in page.events { delivered[event.id, default: 0] += 1 }
                    cursor = page.next
                    if state.writersDone.load(ordering: .acquiring) && page.events.isEmpty && !page.hasMore {
                        quietPages += 1
                        if quietPages == 2 { break }
                    } else if !page.hasMore {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
                return (delivered, pages)
            }
        }
        // Let the writers and devices settle, then move.
        try await Task.sleep(for: .seconds(2))
        log("citus: moving shard \(shard) (\(result.shardsMoved) co-located) from \(sourceHost):\(sourcePort) to \(targetHost):\(targetPort) under load")
        let before = state.confirmed.withLock { $0.values.reduce(0) { $0 + $1.count } }
        result.writesPerSecondBefore = Double(before) / 2
        let clock = ContinuousClock()
        let started = clock.now
        let moveResult: Result<Void, any Error>
        do {
            _ = try await admin.query("""
                SELECT citus_move_shard_placement(\(shard), \(sourceHost), \(sourcePort), \(targetHost), \(targetPort), shard_transfer_mode => 'force_logical')
                """)
            moveResult = .success(())
        } catch {
            moveResult = .failure(error)
        }
        result.moveSeconds = seconds(clock.now - started)
        // A second of writes on the new placement.
        try await Task.sleep(for: .seconds(1))
        state.moving.store(false, ordering: .relaxed)
        for writer in writers { await writer.value }
        state.writersDone.store(true, ordering: .releasing)
        let writing = seconds(clock.now - started)
        try moveResult.get()

        let written = state.confirmed.withLock { $0 }
        result.confirmedWrites = written.values.reduce(0) { $0 + $1.count }
        result.writesPerSecond = Double(result.confirmedWrites - before) / writing
        (result.failedWrites, result.unknownOutcome) = state.failures.withLock { ($0.failed, $0.unknown) }
        for (family, device) in zip(followed, devices) {
            let (delivered, pages) = try await device.value
            result.pagesRead += pages
            result.delivered += delivered.values.reduce(0, +)
            result.repeated += delivered.values.filter { $0 > 1 }.count
            result.lost += (written[family.child] ?? []).filter { delivered[$0] == nil }.count
            let rows = try await admin.fetchAll(UUID.self, "SELECT id FROM events WHERE child_id = \(family.child)")
            result.notDelivered += rows.filter { delivered[$0] == nil }.count
        }
        let placed = try await admin.query("SELECT nodeport::int4 FROM citus_shards WHERE shardid = \(shard)").first
        guard try placed?.decode(Int32.self, at: 0) == targetPort else { throw BenchError("shard \(shard) is not on \(targetHost):\(targetPort) after the move") }
        return result
    }

    /// The Citus section of BENCHMARKS.md.
    func citusSection(_ result: CitusResult) -> [String] {
        func cell(_ measurement: Measurement) -> String { "\(formatLatency(measurement.p50)) / \(formatLatency(measurement.p99))" }
        func ratio(_ cluster: Measurement, _ single: Measurement) -> String {
            guard let a = cluster.p50, let b = single.p50, b > 0 else { return "–" }
            return String(format: "%.2f×", a / b)
        }
        let move = result.move
        return [
            "<!-- citus:begin -->",
            "",
            "## Scale-out on Citus: the store on a coordinator with two workers",
            "",
            "Generated by `make citus-bench` on \(result.date) (\(result.machine)). \(result.families) families × 30 days",
            "(\(result.eventsLoaded) events) loaded in each; the same calls, interleaved one by one, on one server and on the",
            "cluster's coordinator, as `babybasics_app` through the store. p50 / p99 of \(result.dashboardSingle.latencies.count) calls.",
            "All four servers share this machine's cores: the cluster pays its extra hop (coordinator → worker) and",
            "gains none of the capacity that separate machines would give it.",
            "",
            "| Case | One server | Cluster (coordinator) | Cluster / one server (p50) |",
            "| --- | --- | --- | --- |",
            "| `SELECT 1` round trip (superuser, no table) | \(cell(result.roundTripSingle)) | \(cell(result.roundTripCluster)) | \(ratio(result.roundTripCluster, result.roundTripSingle)) |",
            "| One child's latest event by its key (a router query: one worker) | \(cell(result.oneRowSingle)) | \(cell(result.oneRowCluster)) | \(ratio(result.oneRowCluster, result.oneRowSingle)) |",
            "| Dashboard (one child: one task, no subplan) | \(cell(result.dashboardSingle)) | \(cell(result.dashboardCluster)) | \(ratio(result.dashboardCluster, result.dashboardSingle)) |",
            "| Timeline, one day | \(cell(result.timelineSingle)) | \(cell(result.timelineCluster)) | \(ratio(result.timelineCluster, result.timelineSingle)) |",
            "| Insert (`events.log`, stamped, one shard) | \(cell(result.insertSingle)) | \(cell(result.insertCluster)) | \(ratio(result.insertCluster, result.insertSingle)) |",
            "",
            "Every statement about one child is one task on one worker, with no subplan (`OneChildOneNodeTests`). What a call pays on the",
            "cluster beyond one server: the coordinator parses and plans the statement and deparses it for the worker",
            "(EXPLAIN ANALYZE of the dashboard on the coordinator, steady state: 1.4–1.5 ms of planning), and the worker parses",
            "and plans it again, at every call (Citus sends it as an unnamed statement): the bigger the statement, the",
            "bigger the ratio. Logging an event is one `INSERT … SELECT` (it was 13.6× with the `INSERT` in a CTE, which",
            "Citus ran apart and committed in two phases on both workers).",
            "",
            "What must read every shard, for a caregiver of four of the children (p50 / p99 of \(result.childrenSingle.latencies.count) calls each):",
            "",
            "| Case | One server | Cluster (coordinator) | Cluster / one server (p50) |",
            "| --- | --- | --- | --- |",
            "| The user's children (`children.list`: every shard) | \(cell(result.childrenSingle)) | \(cell(result.childrenCluster)) | \(ratio(result.childrenCluster, result.childrenSingle)) |",
            "| One sync page of all four (the list, then one pipelined statement pair per child) | \(cell(result.syncSingle)) | \(cell(result.syncCluster)) | \(ratio(result.syncCluster, result.syncSingle)) |",
            "| The JSON export of everything the user sees (four children × 30 days) | \(cell(result.exportSingle)) | \(cell(result.exportCluster)) | \(ratio(result.exportCluster, result.exportSingle)) |",
            "",
            "**A shard move under load.** `citus_move_shard_placement(…, 'force_logical')` moved one shard group (\(move.shardsMoved)",
            "co-located shards) to the other worker in \(String(format: "%.1f", move.moveSeconds)) s while four writers logged events for every child",
            "(\(move.confirmedWrites) confirmed; \(String(format: "%.0f", move.writesPerSecond))/s from the move's start to a second after it, \(String(format: "%.0f", move.writesPerSecondBefore))/s in the two seconds before;",
            "\(move.failedWrites) failed, \(move.unknownOutcome) of them with an unknown outcome)",
            "and one device per child on that group (\(move.childrenFollowed)) paged its feed, 50 at a time, throughout and then to its end",
            "(\(move.pagesRead) pages, \(move.delivered) events delivered): **\(move.lost) confirmed writes lost, \(move.repeated) events repeated**,",
            "\(move.notDelivered) rows of those children never delivered.",
            "",
            "<!-- citus:end -->",
        ]
    }
}
