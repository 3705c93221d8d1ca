import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Metrics
import MetricsTestKit
import Migrator
import Postgres
import Testing

/// Reads on a real streaming standby (`pg_basebackup -R`), with replay paused and resumed on
/// it (`pg_wal_replay_pause()`): reads go to the replica, a caregiver always sees their own
/// writes, a lagging or unreachable replica is skipped, and a sync cursor ahead of the replica
/// is never taken for a restore. Serialized: pausing replay stops it for every test.
@Suite(.serialized) struct ReplicaTests {
    struct Fixture {
        let store: Store
        let primaryAdmin: PostgresConnection
        let standbyAdmin: PostgresConnection
        let primary: TestDatabase
        let standby: TestDatabase
        let logs: LogCapture

        /// Tests that pause replay on purpose must not see the replica skipped as lagging when
        /// a loaded machine makes them slow (a make test run took 37 s for one): only the
        /// lag test sets a short bound.
        static let patientLag: Duration = .seconds(600)

        static func make(options: ReplicaOptions = ReplicaOptions(maximumLag: Self.patientLag, healthCheckInterval: .milliseconds(50)), replicaURL: (@Sendable (_ database: String) -> String)? = nil, metrics: TestMetrics? = nil) async throws -> Fixture {
            let (primary, standby) = try await TestReplication.shared.makeDatabase(template: "replica_store_template") { connection in
                let name = try #require(try await connection.fetchValue(String.self, "SELECT current_database()"))
                let (cluster, _) = try await TestReplication.shared.pair()
                try await Migrator(configuration: PostgresConfiguration(try cluster.connectionString(database: name)), options: .init(directory: migrationsFolder)).up()
            }
            let logs = LogCapture()
            var primaryConfiguration = PostgresConfiguration(primary.connectionString + "&options=-crole%3Dbabybasics_app")
            primaryConfiguration.logger = logs.logger(label: "store", level: .info)
            primaryConfiguration.metricsFactory = metrics
            var replicaConfiguration = PostgresConfiguration((replicaURL?(standby.name) ?? standby.connectionString) + "&options=-crole%3Dbabybasics_app")
            replicaConfiguration.logger = logs.logger(label: "replica", level: .info)
            replicaConfiguration.connectTimeout = 2
            var replicaPoolOptions = PoolOptions(maximumConnections: 4, acquireTimeout: .seconds(3))
            replicaPoolOptions.name = "replica"
            let store = Store(
                pool: PostgresPool(configuration: Store.configured(primaryConfiguration), options: PoolOptions(maximumConnections: 4)),
                replica: PostgresPool(configuration: Store.configured(replicaConfiguration), options: replicaPoolOptions),
                replicaOptions: options)
            let fixture = Fixture(store: store, primaryAdmin: try await primary.connect(), standbyAdmin: try await standby.connect(), primary: primary, standby: standby, logs: logs)
            try await fixture.resumeReplay()
            return fixture
        }

        func pauseReplay() async throws {
            try await standbyAdmin.execute("SELECT pg_wal_replay_pause()")
            // Paused once the standby says so (a pause takes effect between records).
            for _ in 0..<500 where try await standbyAdmin.fetchValue(String.self, "SELECT pg_get_wal_replay_pause_state()") != "paused" {
                try await Task.sleep(for: .milliseconds(5))
            }
        }

        func resumeReplay() async throws {
            try await standbyAdmin.execute("SELECT pg_wal_replay_resume()")
        }

        /// Waits until the standby replayed everything the primary has now, then lets the
        /// store see it (a health check).
        func catchUp() async throws {
            // The written position (not the insert one, which stands after the header of a
            // page no record reached yet, where replay never arrives).
            let position = try #require(try await primaryAdmin.fetchValue(String.self, "SELECT pg_current_wal_lsn()::text"))
            for _ in 0..<1000 where try await standbyAdmin.fetchValue(Bool.self, "SELECT pg_last_wal_replay_lsn() >= \(position)::pg_lsn") != true {
                try await Task.sleep(for: .milliseconds(5))
            }
            _ = await store.replicaStatus(refresh: true)
        }

        func family() async throws -> (user: User, child: Child) {
            let user = try await store.users.create(email: "p-\(UUID().uuidString.prefix(8))@example.com", displayName: "Parent")
            let child = try await store.children.create(ChildDraft(name: "Baby", birthDate: PostgresDate(year: 2026, month: 3, day: 8)), as: user.id)
            return (user, child)
        }

        /// A diaper written straight into the primary by a DBA: no store user wrote it.
        func diaperByHand(for child: Child, by user: User, at: Date) async throws -> UUID {
            let id = UUID()
            try await primaryAdmin.execute("""
                INSERT INTO events (id, child_id, logged_by, updated_by, event_type, start_time, start_tz, start_offset_seconds, data)
                VALUES (\(id), \(child.id), \(user.id), \(user.id), 'diaper', \(at), 'UTC', 0, '{"contents":"wet"}')
                """)
            return id
        }

        func close() async {
            try? await resumeReplay()
            await primaryAdmin.close()
            await standbyAdmin.close()
            await store.pool.close()
            await store.replica?.close()
        }
    }

    static let now = Date()

    /// Pages `store`'s sync feed for `user` from the start to the end; the last cursor.
    static func syncToTheEnd(_ store: Store, as user: UUID) async throws -> SyncCursor {
        var cursor = SyncCursor.start
        while true {
            let page = try await store.events.changes(for: user, after: cursor)
            cursor = page.next
            if !page.hasMore { return cursor }
        }
    }

    @Test func theStandbyIsReadOnlyAndFollowsThePrimary() async throws {
        let fixture = try await Fixture.make()
        defer { Task { await fixture.close() } }
        #expect(try await fixture.standbyAdmin.fetchValue(Bool.self, "SELECT pg_is_in_recovery()") == true)
        #expect(try await fixture.primaryAdmin.fetchValue(Bool.self, "SELECT pg_is_in_recovery()") == false)
        // Refused on the standby, with the read-only SQLSTATE.
        await #expect(throws: PostgresError.self) {
            try await fixture.standbyAdmin.execute("CREATE TABLE nope (id int)")
        }
        do {
            try await fixture.standbyAdmin.execute("CREATE TABLE nope (id int)")
        } catch let error as PostgresError {
            #expect(error.sqlState == "25006")
        }
        // Accepted on the primary, and there on the standby once replayed.
        try await fixture.primaryAdmin.execute("CREATE TABLE replicated (id int)")
        try await fixture.primaryAdmin.execute("INSERT INTO replicated VALUES (42)")
        try await fixture.catchUp()
        #expect(try await fixture.standbyAdmin.fetchValue(Int.self, "SELECT id FROM replicated") == 42)
    }

    @Test func readsGoToTheReplicaAndACaregiverAlwaysSeesTheirOwnWrite() async throws {
        let fixture = try await Fixture.make()
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        let partner = try await fixture.store.users.create(email: "q-\(UUID().uuidString.prefix(8))@example.com", displayName: "Partner")
        let invite = try await fixture.store.invites.create(for: child.id, as: parent.id)
        _ = try await fixture.store.invites.redeem(invite.code, as: partner.id)
        try await fixture.catchUp()
        #expect(await fixture.store.replicaStatus()?.usable == true)

        try await fixture.pauseReplay()
        // Written on the primary by hand: the replica does not have it, and nobody's read must wait for it.
        let byHand = try await fixture.diaperByHand(for: child, by: parent, at: Self.now.addingTimeInterval(-600))
        let before = try #require(await fixture.store.replicaStatus()).reads
        let partnersView = try await fixture.store.events.range(for: child.id, from: Self.now.addingTimeInterval(-3600), to: Self.now, now: Self.now, as: partner.id)
        #expect(!partnersView.events.contains { $0.id == byHand }, "the read did not go to the (paused) replica")
        #expect(try #require(await fixture.store.replicaStatus()).reads.replica == before.replica + 1)

        // The parent logs a feed: their own reads must show it, although the replica is paused.
        let feed = try await fixture.store.events.log(EventDraft(
            childID: child.id, payload: .diaper(.dirty), start: EventTimestamp(utc: Self.now.addingTimeInterval(-60), timeZone: "UTC", offsetSeconds: 0)), as: parent.id)
        let parentsView = try await fixture.store.events.range(for: child.id, from: Self.now.addingTimeInterval(-3600), to: Self.now, now: Self.now, as: parent.id)
        #expect(parentsView.events.contains { $0.id == feed.id })
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        #expect(dashboard.lastDiaper?.id == feed.id)
        #expect(try await fixture.store.events.get(feed.id, as: parent.id).id == feed.id)
        let after = try #require(await fixture.store.replicaStatus()).reads
        #expect(after.primaryBecauseBehindUser >= before.primaryBecauseBehindUser + 3)

        // Once replayed, the parent's reads go to the replica again and show it there.
        try await fixture.resumeReplay()
        try await fixture.catchUp()
        let replicaBefore = try #require(await fixture.store.replicaStatus()).reads.replica
        let later = try await fixture.store.events.range(for: child.id, from: Self.now.addingTimeInterval(-3600), to: Self.now, now: Self.now, as: parent.id)
        #expect(later.events.contains { $0.id == feed.id } && later.events.contains { $0.id == byHand })
        #expect(try #require(await fixture.store.replicaStatus()).reads.replica == replicaBefore + 1)
    }

    @Test func aReadWaitsForTheReplicaToReplayTheWriteWhenAllowed() async throws {
        let fixture = try await Fixture.make(options: ReplicaOptions(maximumLag: Fixture.patientLag, readYourWritesWait: .seconds(20), healthCheckInterval: .milliseconds(50)))
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        try await fixture.catchUp()
        try await fixture.pauseReplay()
        let diaper = try await fixture.store.events.log(EventDraft(
            childID: child.id, payload: .diaper(.wet), start: EventTimestamp(utc: Self.now.addingTimeInterval(-60), timeZone: "UTC", offsetSeconds: 0)), as: parent.id)
        // The read starts while replay is paused; it waits, and gets the replica's answer once
        // replay resumes (the resume waits until the read is seen polling the standby).
        async let resumed: Void = {
            for _ in 0..<2000 {
                if try await fixture.standbyAdmin.fetchValue(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_last_wal_replay_lsn()%' AND pid <> pg_backend_pid()") ?? 0 > 0 { break }
                try await Task.sleep(for: .milliseconds(5))
            }
            try await fixture.resumeReplay()
        }()
        let view = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        try await resumed
        #expect(view.lastDiaper?.id == diaper.id)
        let reads = try #require(await fixture.store.replicaStatus()).reads
        #expect(reads.replicaAfterWait == 1)
        #expect(reads.primaryBecauseBehindUser == 0)
    }

    @Test func aLaggingReplicaIsSkippedAndReported() async throws {
        let fixture = try await Fixture.make(options: ReplicaOptions(maximumLag: .milliseconds(300), healthCheckInterval: .milliseconds(20)))
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        try await fixture.catchUp()
        #expect(await fixture.store.replicaStatus()?.usable == true)
        try await fixture.pauseReplay()
        // The primary moves on while the replica stands still, for longer than maximumLag.
        let byHand = try await fixture.diaperByHand(for: child, by: parent, at: Self.now.addingTimeInterval(-300))
        _ = await fixture.store.replicaStatus(refresh: true)
        try await Task.sleep(for: .milliseconds(400))
        let status = try #require(await fixture.store.replicaStatus(refresh: true))
        #expect(status.usable == false)
        #expect(status.reason?.hasPrefix("lagging") == true, "\(status)")
        #expect((status.lag ?? .zero) > .milliseconds(300))
        #expect(fixture.logs.records.contains { $0.level == .warning && $0.message.hasPrefix("replica skipped") && ($0.metadata["reason"] ?? "").hasPrefix("lagging") })
        // Every read now goes to the primary, so even someone who wrote nothing sees it.
        let view = try await fixture.store.events.range(for: child.id, from: Self.now.addingTimeInterval(-3600), to: Self.now, now: Self.now, as: parent.id)
        #expect(view.events.contains { $0.id == byHand })
        #expect(try #require(await fixture.store.replicaStatus()).reads.primaryBecauseUnusable >= 1)
        // Caught up, it serves reads again.
        try await fixture.resumeReplay()
        try await fixture.catchUp()
        #expect(await fixture.store.replicaStatus(refresh: true)?.usable == true)
    }

    /// Where reads went and the replica's lag reach the metrics backend (the primary pool's),
    /// by target and reason.
    @Test func readsAndLagAreCounted() async throws {
        let metrics = TestMetrics()
        let fixture = try await Fixture.make(options: ReplicaOptions(maximumLag: Fixture.patientLag, readYourWritesWait: .milliseconds(20), healthCheckInterval: .milliseconds(50)), metrics: metrics)
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        try await fixture.catchUp()
        _ = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        try await fixture.pauseReplay()
        _ = try await fixture.store.events.log(EventDraft(
            childID: child.id, payload: .diaper(.wet), start: EventTimestamp(utc: Self.now.addingTimeInterval(-60), timeZone: "UTC", offsetSeconds: 0)), as: parent.id)
        _ = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        try await fixture.resumeReplay()
        let onReplica = try metrics.expectCounter("babybasics.store.reads", [("target", "replica"), ("replica", "replica")])
        #expect(onReplica.totalValue == 1)
        let behind = try metrics.expectCounter("babybasics.store.reads", [("target", "primary"), ("reason", "replica_behind_user"), ("replica", "replica")])
        #expect(behind.totalValue == 1)
        #expect(try metrics.expectTimer("babybasics.store.read_your_writes_wait", [("replica", "replica")]).values.count == 1)
        #expect(try metrics.expectGauge("babybasics.store.replica_lag_seconds", [("replica", "replica")]).lastValue.map { $0 >= 0 } == true)
    }

    /// Two instances of a service, each with its own store over the same primary and
    /// replica: a write through one is not known to the other, so the other reads the stale
    /// replica, until the position is carried over (as a cookie or header would).
    @Test func aWritePositionCarriesReadYourWritesToAnotherInstance() async throws {
        let fixture = try await Fixture.make()
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        let other = Store(pool: fixture.store.pool, replica: fixture.store.replica, replicaOptions: ReplicaOptions(maximumLag: Fixture.patientLag, healthCheckInterval: .milliseconds(50)), deadlines: .forTests)
        try await fixture.catchUp()
        _ = await other.replicaStatus(refresh: true)
        try await fixture.pauseReplay()
        let diaper = try await fixture.store.events.log(EventDraft(
            childID: child.id, payload: .diaper(.wet), start: EventTimestamp(utc: Self.now.addingTimeInterval(-60), timeZone: "UTC", offsetSeconds: 0)), as: parent.id)
        let position = try #require(fixture.store.lastWritePosition(of: parent.id))
        #expect(WALPosition(position.description) == position)
        // The other instance knows nothing of it: its read goes to the paused replica.
        #expect(try await other.events.dashboard(for: child.id, now: Self.now, as: parent.id).lastDiaper == nil)
        // Carried over, the read sees the write.
        other.requireReads(of: parent.id, toSee: position)
        #expect(try await other.events.dashboard(for: child.id, now: Self.now, as: parent.id).lastDiaper?.id == diaper.id)
        #expect(WALPosition("not/an/lsn") == nil && WALPosition("G/0") == nil && WALPosition("16/B374D848")?.value == 0x16_B374_D848)
    }

    /// A child the replica does not show yet (the invite was redeemed through another
    /// instance a moment ago) is not revoked from the device's cursor: only the primary
    /// decides that.
    @Test func aChildTheReplicaDoesNotShowYetIsNotRevoked() async throws {
        let fixture = try await Fixture.make()
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        let partner = try await fixture.store.users.create(email: "r-\(UUID().uuidString.prefix(8))@example.com", displayName: "Partner")
        let invite = try await fixture.store.invites.create(for: child.id, as: parent.id)
        try await fixture.catchUp()
        try await fixture.pauseReplay()
        let primaryOnly = Store(pool: fixture.store.pool, deadlines: .forTests)
        _ = try await primaryOnly.invites.redeem(invite.code, as: partner.id)
        let cursor = try await Self.syncToTheEnd(primaryOnly, as: partner.id)
        #expect(cursor.positions[child.id] != nil)
        let next = try await fixture.store.events.changes(for: partner.id, after: cursor)
        #expect(next.notices.isEmpty, "\(next.notices)")
        #expect(next.next.positions[child.id] == cursor.positions[child.id])
    }

    /// An idle primary whose WAL position stands just after a page header (here after a
    /// segment switch) is not a lagging replica: the replay position never passes the header.
    @Test func anIdlePrimaryAfterASegmentSwitchDoesNotLookLagging() async throws {
        // Without the page-header rule the lag grows from the switch on: past maximumLag
        // within the 1.5 s watched here.
        let fixture = try await Fixture.make(options: ReplicaOptions(maximumLag: .seconds(1), healthCheckInterval: .milliseconds(20)))
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        _ = try await fixture.primaryAdmin.fetchValue(String.self, "SELECT pg_switch_wal()::text")
        try await fixture.catchUp()
        for _ in 0..<15 {
            try await Task.sleep(for: .milliseconds(100))
            let status = try #require(await fixture.store.replicaStatus(refresh: true))
            #expect(status.usable, "\(status)")
        }
        // And a read after one's own write right at such a position still reaches the replica.
        _ = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        #expect(try #require(await fixture.store.replicaStatus()).reads.replica >= 1)
    }

    @Test func anUnreachableReplicaIsSkippedAndReadsStillAnswer() async throws {
        let nobody = try EmbeddedPostgres.freePort()
        let fixture = try await Fixture.make(replicaURL: { "postgresql://postgres@127.0.0.1:\(nobody)/\($0)?sslmode=disable" })
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        let status = try #require(await fixture.store.replicaStatus(refresh: true))
        #expect(status.usable == false)
        #expect(status.reason?.hasPrefix("down") == true, "\(status)")
        #expect(fixture.logs.records.contains { $0.level == .warning && $0.message.hasPrefix("replica skipped") })
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        #expect(dashboard.lastDiaper == nil)
        #expect(try #require(await fixture.store.replicaStatus()).reads.primaryBecauseUnusable >= 1)
    }

    @Test func aReplicaLostMidUseFallsBackToThePrimary() async throws {
        // The replica through a proxy the test controls: usable, then gone (every connection
        // cut, no new ones accepted).
        let (_, standbyCluster) = try await TestReplication.shared.pair()
        let proxy = try FaultProxy.start(in: standbyCluster)
        defer { proxy.stop() }
        let fixture = try await Fixture.make(replicaURL: { proxy.connectionString(database: $0) })
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        try await fixture.catchUp()
        #expect(await fixture.store.replicaStatus()?.usable == true)
        _ = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        proxy.stop()
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: Self.now, as: parent.id)
        #expect(dashboard.lastDiaper == nil)
        let status = try #require(await fixture.store.replicaStatus())
        #expect(status.reads.primaryAfterReplicaFailed == 1, "\(status)")
        #expect(status.usable == false)
    }

    @Test func aSyncCursorAheadOfTheReplicaIsReadOnThePrimaryNotResynced() async throws {
        let fixture = try await Fixture.make()
        defer { Task { await fixture.close() } }
        let (parent, child) = try await fixture.family()
        try await fixture.catchUp()
        try await fixture.pauseReplay()
        // Another instance of the service, on the primary, gave the device a cursor beyond
        // what the replica has (a change made after the pause).
        _ = try await fixture.diaperByHand(for: child, by: parent, at: Self.now.addingTimeInterval(-120))
        let primaryOnly = Store(pool: fixture.store.pool, deadlines: .forTests)
        let cursor = try await Self.syncToTheEnd(primaryOnly, as: parent.id)
        // On this instance the parent wrote nothing since: the read may go to the replica,
        // which is behind the cursor. No resync, nothing lost, the cursor does not go back.
        let next = try await fixture.store.events.changes(for: parent.id, after: cursor)
        #expect(next.notices.isEmpty, "\(next.notices)")
        #expect(next.events.isEmpty)
        #expect(next.next.positions[child.id] == cursor.positions[child.id])
        // Without the replica the same cursor is just as valid (control).
        #expect(try await primaryOnly.events.changes(for: parent.id, after: cursor).notices.isEmpty)
    }
}
