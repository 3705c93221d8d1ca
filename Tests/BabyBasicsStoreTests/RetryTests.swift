import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Synchronization
import Testing

/// The store runs a call again only when the database guarantees nothing of it was applied,
/// and says so when it cannot know.
@Suite struct RetryTests {
    /// A store whose sessions give up waiting for a row lock after `lockTimeout`. On a Citus
    /// cluster the lock is waited for in Citus's session on a worker, which the start-up option
    /// does not reach: there the role's setting on every node does, as docs/scale-out.md says.
    static func store(_ fixture: StoreFixture, lockTimeout: String, retryPolicy: RetryPolicy = RetryPolicy()) async throws -> Store {
        try await TestCitus.setOnEveryNode("lock_timeout", to: lockTimeout, forRole: "babybasics_app", in: fixture.database)
        let configuration = PostgresConfiguration(
            fixture.database.connectionString + "&options=-crole%3Dbabybasics_app%20-clock_timeout%3D\(lockTimeout)")
        return Store(pool: PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 2)), retryPolicy: retryPolicy, deadlines: .forTests)
    }

    /// The errors a retry policy ran again after.
    final class Retries: Sendable {
        let errors = Mutex<[PostgresError.Kind]>([])
    }

    /// The first attempt gives up on a row lock another session holds (lock_timeout: safe to
    /// retry, nothing was written); before the second attempt the lock is released (the retry
    /// policy's hook: no race with the clock); the call succeeds, once.
    @Test func aLockTimeoutIsRetriedAndTheCallSucceeds() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let holder = try await fixture.database.connect()
        try await holder.execute("BEGIN")
        try await holder.execute("SELECT 1 FROM children WHERE id = \(child.id) FOR UPDATE")
        let retries = Retries()
        let store = try await Self.store(fixture, lockTimeout: "100ms", retryPolicy: RetryPolicy(beforeRetry: { _, error in
            retries.errors.withLock { $0.append(error.kind) }
            _ = try? await holder.execute("COMMIT")
        }))
        let renamed = try await store.children.update(child.id, with: ChildChanges(name: "Renamed"), as: user.id)
        #expect(renamed.name == "Renamed")
        #expect(retries.errors.withLock { $0 } == [.lockNotAvailable])
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT name FROM children WHERE id = \(child.id)") == "Renamed")
        await holder.close()
    }

    /// The other way round: a lock held through every attempt ends in the typed error, and
    /// nothing was written.
    @Test func aLockHeldThroughEveryAttemptEndsInItsError() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let store = try await Self.store(fixture, lockTimeout: "50ms")
        let holder = try await fixture.database.connect()
        try await holder.execute("BEGIN")
        try await holder.execute("SELECT 1 FROM children WHERE id = \(child.id) FOR UPDATE")
        let error = await #expect(throws: PostgresError.self) {
            _ = try await store.children.update(child.id, with: ChildChanges(name: "Renamed"), as: user.id)
        }
        #expect(error?.kind == .lockNotAvailable)
        try await holder.execute("COMMIT")
        #expect(try await holder.fetchValue(String.self, "SELECT name FROM children WHERE id = \(child.id)") == child.name)
        await holder.close()
    }

    /// A server session ended by an administrator while idle in the pool: the call that finds
    /// it gone runs again on a new connection, and the parent never sees an error.
    @Test func aTerminatedPooledSessionIsInvisibleToTheCaller() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        for round in 0..<5 {
            let pids = try await fixture.admin.fetchAll(Int32.self, """
                SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND usename IS NOT NULL
                  AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                """)
            for pid in pids { try await fixture.admin.execute("SELECT pg_terminate_backend(\(pid))") }
            if let bouncer = try await StoreFixture.throughPgBouncer() {
                // Through PgBouncer these were its server connections, and it drops one only once
                // it has read its end. Until then it may hand the dead one to the next write and,
                // when sending fails, close the client's connection without a word: the store
                // cannot tell that from a write lost after sending, and rightly answers "may or may
                // not have been saved". What is shown here is the pool's part: once PgBouncer knows.
                try await waitUntil { try await bouncer.serverProcessIDs(database: fixture.database.name).isDisjoint(with: pids) }
            }
            let renamed = try await fixture.store.children.update(child.id, with: ChildChanges(name: "Round \(round)"), as: user.id)
            #expect(renamed.name == "Round \(round)")
        }
    }

    /// The answer to a write is lost on the way back (the network drops it, then the
    /// connection): the store cannot know whether it was saved and says so, it does not retry
    /// blindly. The event was in fact saved, and the client's retry with the same id gets it.
    @Test func aLostAnswerIsOutcomeUnknownNotARetry() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let proxy = try FaultProxy.start(in: fixture.database.cluster)
        defer { proxy.stop() }
        let configuration = PostgresConfiguration(proxy.connectionString(database: fixture.database.name, options: "options=-crole%3Dbabybasics_app"))
        let store = Store(pool: PostgresPool(configuration: configuration, options: PoolOptions(maximumConnections: 1)), deadlines: .forTests)
        // Connected, and the statement prepared: what is lost below is its execution.
        _ = try await store.events.log(EventDraft(childID: child.id, payload: .diaper(.dirty), start: at("2026-11-20 05:30")), as: user.id)

        let draft = EventDraft(childID: child.id, payload: .diaper(.wet), start: at("2026-11-20 06:30"))
        proxy.mode = .dropAnswers
        let log = Task { try await store.events.log(draft, as: user.id) }
        try await waitUntil { try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events WHERE id = \(draft.id)") == 1 }
        proxy.cutAll()
        proxy.mode = .forward
        do {
            _ = try await log.value
            Issue.record("the call succeeded although its answer was lost")
        } catch let error as StoreError {
            guard case .outcomeUnknown = error else { throw error }
            #expect(error.description.contains("may or may not have been saved"))
        }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events WHERE id = \(draft.id)") == 1)
        // The client's retry with the same id is answered with the stored event, not a copy.
        #expect(try await store.events.log(draft, as: user.id).id == draft.id)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events WHERE child_id = \(child.id)") == 2)
    }
}

func waitUntil(_ condition: () async throws -> Bool) async throws {
    for _ in 0..<2000 {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("condition never became true")
}
