import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Migrator
import Postgres

/// The scale-out group's figures: reads on a streaming replica and calls through PgBouncer.
struct ScaleOutResult: Codable, Sendable {
    var dashboardPrimary = Measurement()
    var dashboardReplica = Measurement()
    /// A caregiver's dashboard read right after their own write, under a steady write load.
    var readAfterOwnWrite = Measurement()
    /// How long the replica took to replay such a write (commit to replay), under that load.
    var replayDelay = Measurement()
    var writesPerSecond = 0.0
    var readsOnReplica = 0
    var readsOnReplicaAfterWait = 0
    var readsOnPrimaryBehind = 0
    var roundTripDirect = Measurement()
    var roundTripPgBouncer = Measurement()
    var storeDirect = Measurement()
    var storePgBouncer = Measurement()
}

extension Runner {
    /// A primary with a streaming standby of its own (small, so the base backup is quick) and
    /// a PgBouncer in transaction mode in front of the primary.
    mutating func scaleOut() async throws {
        let base = "/tmp/bbbench-scale-\(getpid())"
        // Durability off, except that a commit waits for its WAL to be written (as on a real
        // primary): otherwise a standby may see a commit up to 200 ms after it returned.
        let options = EmbeddedPostgres.Options(durable: false, maxConnections: 100, settings: ["synchronous_commit": "on", "shared_buffers": "256MB"])
        let primary = EmbeddedPostgres(directory: URL(fileURLWithPath: base + "-p"), options: options)
        try await runOnDedicatedThread { _ = try primary.start() }
        defer { try? primary.stop(immediate: true); try? FileManager.default.removeItem(atPath: base + "-p") }
        let (url, admin, families, end) = try await familyDatabase(primary, name: "scale")
        log("scale-out: starting a standby (pg_basebackup -R)")
        let standby = try await runOnDedicatedThread { try primary.startStandby(at: URL(fileURLWithPath: base + "-s")) }
        defer { try? standby.stop(immediate: true); try? FileManager.default.removeItem(atPath: base + "-s") }
        let replicaURL = try standby.connectionString(database: "scale")
        // The standby has everything once it replayed the primary's present position.
        let standbyAdmin = try await PostgresConnection.connect(replicaURL)
        let position = try await admin.fetchValue(String.self, "SELECT pg_current_wal_insert_lsn()::text") ?? "0/0"
        while try await standbyAdmin.fetchValue(Bool.self, "SELECT pg_last_wal_replay_lsn() >= \(position)::pg_lsn") != true {
            try await Task.sleep(for: .milliseconds(10))
        }

        var result = ScaleOutResult()
        let primaryPool = PostgresPool(configuration: Store.configured(PostgresConfiguration(url)), options: PoolOptions(maximumConnections: 4))
        var replicaOptions = PoolOptions(maximumConnections: 4)
        replicaOptions.name = "replica"
        let replicaPool = PostgresPool(configuration: Store.configured(PostgresConfiguration(replicaURL)), options: replicaOptions)
        let direct = Store(pool: primaryPool)
        let scaled = Store(pool: primaryPool, replica: replicaPool, replicaOptions: ReplicaOptions(readYourWritesWait: .milliseconds(100), healthCheckInterval: .milliseconds(200)))
        _ = await scaled.replicaStatus(refresh: true)

        // 1. The dashboard on the primary and on the replica (readers who wrote nothing), interleaved.
        let calls = quick ? 200 : 1000
        var random = SplitMix(seed: 7)
        for _ in 0..<50 {
            let family = families[random.int(families.count)]
            _ = try await direct.events.dashboard(for: family.child, now: end, as: family.user)
            _ = try await scaled.events.dashboard(for: family.child, now: end, as: family.user)
        }
        for _ in 0..<calls {
            let family = families[random.int(families.count)]
            result.dashboardPrimary.latencies.append(try await timed { try await direct.events.dashboard(for: family.child, now: end, as: family.user) }.1)
            result.dashboardReplica.latencies.append(try await timed { try await scaled.events.dashboard(for: family.child, now: end, as: family.user) }.1)
        }

        // 2. Read-your-writes under a steady write load: other families log events as fast as
        // one writer can, while one caregiver logs and at once reads their dashboard.
        let before = await scaled.replicaStatus()?.reads ?? ReadCounts()
        let writers = Array(families.dropFirst())
        let load = Task {
            var written = 0
            var index = 0
            let started = ContinuousClock.now
            while !Task.isCancelled {
                let family = writers[index % writers.count]
                index += 1
                _ = try? await direct.events.log(EventDraft(childID: family.child, payload: .diaper(.wet), start: EventTimestamp(Date(), in: .gmt)), as: family.user)
                written += 1
            }
            return Double(written) / seconds(ContinuousClock.now - started)
        }
        let caregiver = families[0]
        let positionSQL: SQL = "SELECT pg_current_wal_insert_lsn()::text"
        for _ in 0..<(quick ? 50 : 300) {
            _ = try await scaled.events.log(EventDraft(childID: caregiver.child, payload: .diaper(.dirty), start: EventTimestamp(Date(), in: .gmt)), as: caregiver.user)
            let written = try await primaryPool.fetchValue(String.self, positionSQL) ?? "0/0"
            let committed = ContinuousClock.now
            result.readAfterOwnWrite.latencies.append(try await timed { try await scaled.events.dashboard(for: caregiver.child, as: caregiver.user) }.1)
            while try await standbyAdmin.fetchValue(Bool.self, "SELECT pg_last_wal_replay_lsn() >= \(written)::pg_lsn") != true {
                try await Task.sleep(for: .microseconds(200))
            }
            result.replayDelay.latencies.append(seconds(ContinuousClock.now - committed))
            try await Task.sleep(for: .milliseconds(5))
        }
        load.cancel()
        result.writesPerSecond = await load.value
        let after = await scaled.replicaStatus()?.reads ?? ReadCounts()
        result.readsOnReplica = after.replica - before.replica
        result.readsOnReplicaAfterWait = after.replicaAfterWait - before.replicaAfterWait
        result.readsOnPrimaryBehind = after.primaryBecauseBehindUser - before.primaryBecauseBehindUser

        // 3. Through PgBouncer (transaction mode) versus direct: a round trip and a store call.
        let bouncer = try await PgBouncer.start(in: primary, mode: .transaction, poolSize: 4)
        defer { bouncer.stop() }
        var pooled = PostgresConfiguration(bouncer.connectionString(database: "scale"))
        pooled.pooler = .transaction
        let bouncerPool = PostgresPool(configuration: Store.configured(pooled), options: PoolOptions(maximumConnections: 4))
        let bounced = Store(pool: bouncerPool)
        let trips = quick ? 1000 : 5000
        for index in 0..<trips {
            result.roundTripDirect.latencies.append(try await timed { _ = try await primaryPool.fetchValue(Int.self, "SELECT \(index)::int") }.1)
            result.roundTripPgBouncer.latencies.append(try await timed { _ = try await bouncerPool.fetchValue(Int.self, "SELECT \(index)::int") }.1)
        }
        for _ in 0..<calls {
            let family = families[random.int(families.count)]
            result.storeDirect.latencies.append(try await timed { try await direct.events.dashboard(for: family.child, now: end, as: family.user) }.1)
            result.storePgBouncer.latencies.append(try await timed { try await bounced.events.dashboard(for: family.child, now: end, as: family.user) }.1)
        }
        await bouncerPool.close()
        await primaryPool.close()
        await replicaPool.close()
        await admin.close()
        await standbyAdmin.close()
        scaleOutResult = result
    }

    /// The scale-out table for BENCHMARKS.md.
    func scaleOutSection() -> [String] {
        guard let result = scaleOutResult else { return [] }
        func cell(_ measurement: Measurement) -> String { "\(formatLatency(measurement.p50)) / \(formatLatency(measurement.p99))" }
        func ratio(_ ours: Measurement, _ base: Measurement) -> String {
            guard let a = ours.p50, let b = base.p50, b > 0 else { return "–" }
            return String(format: "%.2f×", a / b)
        }
        let ownReads = result.readsOnReplica + result.readsOnReplicaAfterWait + result.readsOnPrimaryBehind
        return [
            "",
            "## Scale-out: a streaming replica and PgBouncer",
            "",
            "A primary (20 families × 30 days) with a streaming standby of its own (`EmbeddedPostgres.startStandby`,",
            "`pg_basebackup -R`) and Debian's PgBouncer \("1.18") in transaction mode in front of the primary. p50 / p99.",
            "",
            "| Case | p50 / p99 | Against |",
            "| --- | --- | --- |",
            "| Dashboard on the primary (store without replica) | \(cell(result.dashboardPrimary)) | |",
            "| Dashboard on the replica (a reader who wrote nothing) | \(cell(result.dashboardReplica)) | \(ratio(result.dashboardReplica, result.dashboardPrimary)) of the primary's |",
            "| Dashboard right after one's own write, under \(Int(result.writesPerSecond)) writes/s | \(cell(result.readAfterOwnWrite)) | "
                + "\(ratio(result.readAfterOwnWrite, result.dashboardPrimary)) of a primary read; of \(ownReads) reads: \(result.readsOnReplica) on the replica at once, "
                + "\(result.readsOnReplicaAfterWait) after waiting for replay, \(result.readsOnPrimaryBehind) on the primary (replay later than 100 ms) |",
            "| Replay delay: commit to replayed on the standby, same load | \(cell(result.replayDelay)) | |",
            "| `SELECT $1` round trip, direct | \(cell(result.roundTripDirect)) | |",
            "| `SELECT $1` round trip through PgBouncer (unnamed statements) | \(cell(result.roundTripPgBouncer)) | \(ratio(result.roundTripPgBouncer, result.roundTripDirect)) of direct |",
            "| Store dashboard, direct | \(cell(result.storeDirect)) | |",
            "| Store dashboard through PgBouncer | \(cell(result.storePgBouncer)) | \(ratio(result.storePgBouncer, result.storeDirect)) of direct |",
        ]
    }
}
