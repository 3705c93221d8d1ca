import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Postgres
import PostgresTestKit
import Synchronization
import Testing

/// No store call outlives its deadline, a read never reports an unknown outcome, and an export
/// whose consumer stops reading holds no connection and no transaction.
@Suite struct BoundedCallTests {
    /// A store over `fixture`'s database with `deadlines`, and pool options of its own.
    static func store(_ fixture: StoreFixture, deadlines: StoreDeadlines, options: PoolOptions = PoolOptions(maximumConnections: 2)) -> Store {
        Store(pool: PostgresPool(configuration: PostgresConfiguration(fixture.database.connectionString + "&options=-crole%3Dbabybasics_app"), options: options),
              deadlines: deadlines)
    }

    /// A write that waits on a row lock another session holds: it ends at its deadline with a
    /// timeout (not after the lock is released), writes nothing, and the next call works.
    @Test func aWriteBehindAHeldLockEndsAtItsDeadline() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let store = Self.store(fixture, deadlines: StoreDeadlines(read: .seconds(300), write: .milliseconds(300)))
        let holder = try await fixture.database.connect()
        try await holder.execute("BEGIN")
        try await holder.execute("SELECT 1 FROM children WHERE id = \(child.id) FOR UPDATE")
        let error = await #expect(throws: PostgresError.self) {
            _ = try await store.children.update(child.id, with: ChildChanges(name: "Renamed"), as: user.id)
        }
        #expect(error?.kind == .timeout || error?.kind == .poolTimeout, "\(String(describing: error))")
        #expect(try await holder.fetchValue(Bool.self, "SELECT pg_try_advisory_lock(1)") == true, "the holder's session is unaffected")
        try await holder.execute("COMMIT")
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT name FROM children WHERE id = \(child.id)") == child.name)
        #expect(try await store.children.update(child.id, with: ChildChanges(name: "Renamed"), as: user.id).name == "Renamed")
        await holder.close()
        await store.pool.close()
    }

    /// Every connection busy for longer than the call's deadline: the call ends at its deadline
    /// with a pool timeout, though the pool itself would wait ten minutes.
    @Test func aReadWaitingForAConnectionEndsAtItsDeadline() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let store = Self.store(fixture, deadlines: StoreDeadlines(read: .milliseconds(300), write: .seconds(300)),
                               options: PoolOptions(maximumConnections: 1, acquireTimeout: .seconds(600)))
        let release = AsyncGate()
        let occupier = Task { try await store.pool.withConnection { _ in await release.wait() } }
        try await waitUntil { store.pool.statistics.inUse == 1 }
        let error = await #expect(throws: PostgresError.self) { _ = try await store.events.dashboard(for: child.id, as: user.id) }
        #expect(error?.kind == .poolTimeout, "\(String(describing: error))")
        release.open()
        try await occupier.value
        // The good case, with a deadline of 300 ms: retried until it fits, on a busy machine.
        try await waitUntil { (try? await store.events.dashboard(for: child.id, as: user.id)) != nil }
        await store.pool.close()
    }

    /// The server's answers stop (a frozen server, a dropped path): a read ends at its deadline,
    /// a safe retry cannot run past it, and after the network is back the store works without a
    /// restart.
    @Test func aSilentServerIsATimeoutAndTheStoreRecovers() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let proxy = try FaultProxy.start(in: fixture.database.cluster)
        defer { proxy.stop() }
        let configuration = PostgresConfiguration(proxy.connectionString(database: fixture.database.name, options: "options=-crole%3Dbabybasics_app"))
        let store = Store(pool: PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 2)),
                          deadlines: StoreDeadlines(read: .milliseconds(500), write: .milliseconds(500)))
        // Through the proxy first (opening a connection within 500 ms can take a few tries on
        // a busy machine: a pool timeout then, not a failure of the test).
        try await waitUntil { (try? await store.events.dashboard(for: child.id, as: user.id)) != nil }
        proxy.mode = .silent
        let error = await #expect(throws: PostgresError.self) { _ = try await store.events.dashboard(for: child.id, as: user.id) }
        #expect([.timeout, .poolTimeout].contains(error?.kind), "\(String(describing: error))")
        proxy.mode = .forward
        try await waitUntil { (try? await store.events.dashboard(for: child.id, as: user.id)) != nil }
        await store.pool.close()
    }

    /// A read whose answer is lost with its connection applied nothing: it runs again on a new
    /// connection and answers, where a write in the same spot says its outcome is unknown
    /// (RetryTests).
    @Test func aReadWhoseConnectionIsLostRunsAgainInsteadOfAnUnknownOutcome() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 06:30"))
        let proxy = try FaultProxy.start(in: fixture.database.cluster)
        defer { proxy.stop() }
        var configuration = PostgresConfiguration(proxy.connectionString(database: fixture.database.name, options: "options=-crole%3Dbabybasics_app"))
        configuration.applicationName = "lost-read-test"
        let store = Store(pool: PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 1)), deadlines: .forTests)
        _ = try await store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: user.id)
        proxy.mode = .dropAnswers
        let before = try #require(try await fixture.admin.fetchValue(Date.self, "SELECT clock_timestamp()"))
        let read = Task { try await store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: user.id) }
        // The server has run the timeline's statement again (this store's session, by its name).
        try await waitUntil {
            try await fixture.admin.fetchValue(Int.self, """
                SELECT count(*) FROM pg_stat_activity
                WHERE application_name = 'lost-read-test' AND query LIKE 'WITH span AS%' AND query_start > \(before)
                """) ?? 0 > 0
        }
        proxy.cutAll()
        proxy.mode = .forward
        let timeline = try await read.value
        #expect(timeline.events.count == 1)
    }

    /// An export whose consumer stops reading after the first page: meanwhile the store holds
    /// no connection and no transaction, then the export goes on where it stopped and writes
    /// every event exactly once (an event logged during the pause included).
    @Test func aStalledExportHoldsNoConnectionAndWritesEveryEventOnce() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        let start = at("2026-11-01 00:00", "UTC").utc
        let total = 1_203 // three pages and a bit
        try await fixture.admin.execute("""
            INSERT INTO events (id, child_id, event_type, start_time, start_tz, start_offset_seconds, data, logged_by)
            SELECT gen_random_uuid(), \(child.id), 'diaper', \(start)::timestamptz + n * interval '1 minute', 'UTC', 0, '{"contents":"wet"}', \(user.id)
            FROM generate_series(1, \(total)) n
            """)
        let store = Self.store(fixture, deadlines: .forTests)
        let gate = AsyncGate()
        let chunks = Mutex<[String]>([])
        let export = Task {
            try await store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { chunk in
                let count = chunks.withLock { chunks -> Int in
                    chunks.append(chunk)
                    return chunks.count
                }
                if count == 2 { await gate.wait() } // the header, the first page; then the consumer stalls
            }
        }
        try await waitUntil { chunks.withLock { $0.count } == 2 }
        #expect(store.pool.statistics.inUse == 0, "a stalled consumer holds a connection")
        #expect(try await fixture.admin.fetchValue(Int.self, """
            SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'
            """) == 0)
        // Logged during the pause, after everything already written: it is in the file once.
        let late = try await fixture.store.events.log(
            EventDraft(childID: child.id, payload: .diaper(.dirty), start: EventTimestamp(utc: start.addingTimeInterval(Double(total + 10) * 60), timeZone: "UTC", offsetSeconds: 0)),
            as: user.id)
        gate.open()
        try await export.value
        let lines = chunks.withLock { $0 }.joined().split(separator: "\r\n", omittingEmptySubsequences: true)
        #expect(lines.count == 1 + total + 1, "header, every event, the late one")
        #expect(Set(lines).count == lines.count, "no row twice")
        #expect(lines.last?.contains("dirty") == true, "the late event last: \(late.id)")
        await store.pool.close()
    }
}

/// A gate tasks wait at until it opens.
final class AsyncGate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
