import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Postgres

extension Runner {
    /// What the sync stamp (the child's counter row in `sync_counters`, migrations 0011, 0013
    /// and 0022) costs a write, against the cost model
    /// of the cursor it replaced, measured side by side in this run: the same triggers, with
    /// `sync_next_seq` swapped for what the old trigger did (`pg_current_xact_id()` and a
    /// global `nextval`, no child row lock, no NOTIFY).
    mutating func syncCost(_ clients: Clients) async throws {
        let count = quick ? 2000 : 10_000
        let copyCount = quick ? 20_000 : 100_000
        let families = try await DomainData.families(clients.ours, count: 1, tag: "synccost")
        let child = families[0].child, user = families[0].user
        let current = try await clients.ours.fetchValue(String.self, "SELECT pg_get_functiondef('sync_next_seq(uuid)'::regprocedure)") ?? ""
        try await clients.ours.executeUnsafeRawSQL("CREATE SEQUENCE bench_v1_change_seq")
        let v1 = """
            CREATE OR REPLACE FUNCTION public.sync_next_seq(p_child_id uuid) RETURNS bigint LANGUAGE sql
            AS $$ SELECT nextval('bench_v1_change_seq') + 0 * (pg_current_xact_id()::text::numeric)::bigint $$
            """
        var inserts: [String: Measurement] = ["v2": Measurement(count: count), "v1": Measurement(count: count)]
        var copies: [String: Measurement] = ["v2": Measurement(count: copyCount), "v1": Measurement(count: copyCount)]
        for rep in 0..<3 {
            for variant in rep % 2 == 0 ? ["v2", "v1"] : ["v1", "v2"] {
                log("sync cost (\(variant)), repetition \(rep + 1)/3")
                try await clients.ours.executeUnsafeRawSQL(variant == "v1" ? v1 : current)
                inserts[variant]?.runs.append(try await timed { try await clients.insertOurs(count, child: child, user: user, mode: "sequential") }.1)
                try await clients.ours.executeUnsafeRawSQL("TRUNCATE events, event_history, sync_tombstones")
                copies[variant]?.runs.append(try await timed { try await clients.insertOurs(copyCount, child: child, user: user, mode: "copy") }.1)
                try await clients.ours.executeUnsafeRawSQL("TRUNCATE events, event_history, sync_tombstones")
            }
        }
        try await clients.ours.executeUnsafeRawSQL(current)
        try await clients.ours.executeUnsafeRawSQL("DROP SEQUENCE bench_v1_change_seq")
        for (name, measured) in [("\(count) single-statement event inserts", inserts), ("COPY of \(copyCount) events, triggers on", copies)] {
            guard let ours = measured["v2"], let old = measured["v1"], let a = ours.median, let b = old.median else { continue }
            results.append(CaseResult(
                name: "Sync stamp cost: \(name)", unit: "s", ours: ours,
                goal: "≤ 1.10× the old cursor's trigger (\(duration(b)) in this run; here \(String(format: "%.2f", a / b))×)",
                goalMet: a / b <= 1.10,
                note: "same triggers and indexes; sync_next_seq swapped for the old cost (xid + global sequence)"))
        }
    }
}

extension Runner {
    /// The issue's two latency promises, measured while a write transaction is held open on
    /// another child of this database and in another database of the cluster for the whole
    /// case (at least 5 s): a change committed on a child is delivered by the next feed page
    /// (commit returned → page holding it returned), and `child_changed` is heard (write sent
    /// → `store.childChanges()` yields it).
    mutating func syncLatency(cluster: EmbeddedPostgres, clients: Clients) async throws {
        let samples = quick ? 30 : 100
        let families = try await DomainData.families(clients.ours, count: 2, tag: "synclatency")
        let stuck = families[0], writer = families[1]
        try await cluster.createDatabase("bench_other")
        let holders = [
            try await PostgresConnection.connect(PostgresConfiguration(try cluster.connectionString(database: "bench"))),
            try await PostgresConnection.connect(PostgresConfiguration(try cluster.connectionString(database: "bench_other"))),
        ]
        try await holders[0].executeUnsafeRawSQL("BEGIN")
        try await holders[0].execute(Clients.insertSQL(UUID(), stuck.child, stuck.user, Date()))
        try await holders[1].executeUnsafeRawSQL("BEGIN; CREATE TABLE busy (x int); INSERT INTO busy VALUES (1)")

        let pool = PostgresPool(configuration: PostgresConfiguration(try cluster.connectionString(database: "bench")), options: PoolOptions(maximumConnections: 2))
        let store = Store(pool: pool)
        let heard = HeardChanges()
        let listening = Task { for await change in store.childChanges() { if case .changed(let child) = change { heard.add(child) } } }
        defer { listening.cancel() }
        // The listener is up once a change of the writer's child is heard.
        var cursor = SyncCursor.start
        while true {
            let page = try await store.events.changes(for: writer.user, after: cursor, limit: 5000)
            cursor = page.next
            if !page.hasMore { break }
        }
        while heard.count(of: writer.child) == 0 {
            _ = try await store.events.log(EventDraft(childID: writer.child, payload: .diaper(.wet), start: EventTimestamp(Date(), in: .gmt)), as: writer.user)
            try await Task.sleep(for: .milliseconds(50))
        }
        cursor = try await store.events.changes(for: writer.user, after: cursor, limit: 5000).next

        var delivered = Measurement(count: samples), pushed = Measurement(count: samples)
        let started = ContinuousClock.now
        var index = 0
        while index < samples || ContinuousClock.now - started < .seconds(5) {
            let before = heard.count(of: writer.child)
            let sent = ContinuousClock.now
            let event = try await store.events.log(EventDraft(childID: writer.child, payload: .diaper(.dirty), start: EventTimestamp(Date(), in: .gmt)), as: writer.user)
            let committed = ContinuousClock.now
            let page = try await store.events.changes(for: writer.user, after: cursor)
            guard page.events.map(\.id) == [event.id] else { throw BenchError("the feed did not deliver the committed change at once: \(page.events.map(\.id))") }
            delivered.latencies.append(seconds(ContinuousClock.now - committed))
            cursor = page.next
            while heard.count(of: writer.child) == before {
                guard ContinuousClock.now - committed < .seconds(5) else { throw BenchError("child_changed not heard within 5 s of the commit") }
                try await Task.sleep(for: .microseconds(200))
            }
            // From before the write was sent: an upper bound of commit → heard (the
            // notification often arrives before the writer has its answer).
            pushed.latencies.append(heard.lastArrival(of: writer.child).map { seconds($0 - sent) } ?? 0)
            index += 1
        }
        let held = seconds(ContinuousClock.now - started)
        let stillOpen = try await clients.ours.fetchValue(Int.self, """
            SELECT count(*)::int FROM pg_stat_activity WHERE state = 'idle in transaction' AND backend_xid IS NOT NULL
            """) ?? 0
        guard stillOpen >= 2 else { throw BenchError("the held transactions ended early (\(stillOpen) still open)") }
        for holder in holders {
            try await holder.executeUnsafeRawSQL("ROLLBACK")
            await holder.close()
        }
        await pool.close()
        let context = "writes held open on another child and in another database for \(String(format: "%.1f", held)) s"
        results.append(CaseResult(name: "Sync: commit → the next feed page delivers it (\(context))", unit: "latency", ours: delivered,
                                  goal: "p99 ≤ 100 ms", goalMet: (delivered.p99 ?? 1) <= 0.1))
        results.append(CaseResult(name: "Sync: write sent → child_changed heard by store.childChanges() (same; an upper bound of commit → heard)", unit: "latency", ours: pushed,
                                  goal: "p99 ≤ 100 ms", goalMet: (pushed.p99 ?? 1) <= 0.1))
    }
}

/// When each child's `child_changed` notifications arrived (shared with the listening task).
final class HeardChanges: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [UUID: Int] = [:]
    private var last: [UUID: ContinuousClock.Instant] = [:]

    func add(_ child: UUID) {
        lock.withLock {
            counts[child, default: 0] += 1
            last[child] = ContinuousClock.now
        }
    }

    func count(of child: UUID) -> Int { lock.withLock { counts[child] ?? 0 } }
    func lastArrival(of child: UUID) -> ContinuousClock.Instant? { lock.withLock { last[child] } }
}
