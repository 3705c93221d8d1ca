@testable import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

/// A client's local copy of a user's family state, built only from feed pages, remembering
/// every version it was given.
struct SyncReplica {
    var cursor = SyncCursor.start
    var children: [UUID: Child] = [:]
    var caregivers: [UUID: [UUID: Caregiver]] = [:]
    var events: [UUID: Event] = [:]
    var notices: [SyncNotice] = []
    /// One key per delivered version: a key seen twice is a change delivered twice.
    var deliveries: [String: Int] = [:]
    var pages = 0

    mutating func apply(_ page: ChangePage) {
        pages += 1
        notices += page.notices
        for notice in page.notices {
            switch notice {
            case .accessRevoked(let child), .resyncRequired(let child): forget(child)
            }
        }
        for removal in page.removals {
            switch removal.kind {
            case .event: events[removal.id] = nil
            case .caregiver: caregivers[removal.childID]?[removal.id] = nil
            }
        }
        for child in page.children {
            children[child.id] = child
            deliveries["child \(child.id) \(child.name) \(child.updatedAt.timeIntervalSince1970)", default: 0] += 1
        }
        for change in page.caregivers {
            caregivers[change.childID, default: [:]][change.caregiver.userID] = change.caregiver
            deliveries["caregiver \(change.childID) \(change.caregiver.userID) \(change.caregiver.joinedAt.timeIntervalSince1970) \(change.caregiver.role)", default: 0] += 1
        }
        for event in page.events {
            events[event.id] = event
            deliveries["event \(event.id) r\(event.revision)", default: 0] += 1
        }
        cursor = page.next
    }

    mutating func forget(_ child: UUID) {
        children[child] = nil
        caregivers[child] = nil
        events = events.filter { $0.value.childID != child }
    }

    /// Pages until the feed says there is nothing more right now.
    mutating func catchUp(_ store: Store, _ user: UUID, limit: Int = 500) async throws {
        while true {
            let page = try await store.events.changes(for: user, after: cursor, limit: limit)
            apply(page)
            if !page.hasMore { return }
        }
    }

    var repeated: [String] { deliveries.filter { $0.value > 1 }.map(\.key) }

    /// What the replica holds, in the shape `FamilyState.read` reads from the server.
    var state: FamilyState {
        FamilyState(
            children: children.mapValues(\.name),
            caregivers: Set(caregivers.flatMap { child, members in members.values.map { "\(child) \($0.userID) \($0.role)" } }),
            events: events.mapValues { "r\($0.revision) \($0.isDeleted ? "deleted" : "live")" })
    }
}

/// The family state of a user's children as the server has it now.
struct FamilyState: Equatable, CustomStringConvertible {
    var children: [UUID: String]
    var caregivers: Set<String>
    var events: [UUID: String]

    static func read(_ admin: PostgresConnection, user: UUID) async throws -> FamilyState {
        var state = FamilyState(children: [:], caregivers: [], events: [:])
        for row in try await admin.query("""
            SELECT c.id, c.name FROM children c JOIN caregivers me ON me.child_id = c.id AND me.user_id = \(user)
            """) {
            let (id, name) = try row.decode((UUID, String).self)
            state.children[id] = name
        }
        let ids = Array(state.children.keys)
        for row in try await admin.query("SELECT child_id, user_id, role FROM caregivers WHERE child_id = ANY(\(ids))") {
            let (child, member, role) = try row.decode((UUID, UUID, String).self)
            state.caregivers.insert("\(child) \(member) \(role)")
        }
        for row in try await admin.query("SELECT id, revision, deleted_at IS NOT NULL FROM events WHERE child_id = ANY(\(ids))") {
            let (id, revision, deleted) = try row.decode((UUID, Int, Bool).self)
            state.events[id] = "r\(revision) \(deleted ? "deleted" : "live")"
        }
        return state
    }

    var description: String { "\(children.count) children, \(caregivers.count) caregivers, \(events.count) events" }
}

private struct RolledBack: Error {}

@Suite struct SyncFeedTests {
    /// 12 writers on 3 children of one user: inserts, edits, soft deletes, restores, renames,
    /// a caregiver added and removed, random commit delays, one transaction in five rolled
    /// back; three readers page all the while with limits 1, 7 and 50.
    @Test func twelveWritersThreeChildrenThreeReadersNeverMissNeverRepeat() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, first) = try await fixture.family(zone: "UTC")
        let second = try await fixture.store.children.create(ChildDraft(name: "Second", birthDate: PostgresDate(year: 2026, month: 1, day: 2)), as: parent.id)
        let third = try await fixture.store.children.create(ChildDraft(name: "Third", birthDate: PostgresDate(year: 2026, month: 1, day: 3)), as: parent.id)
        let helper = try await fixture.user("Helper")
        let children = [first.id, second.id, third.id]
        let database = fixture.database
        let store = fixture.store
        let writersDone = ManagedFlag()
        let rolledBackIDs = LockedSet<UUID>()
        let deadlocks = Counter()
        let committedInserts = Counter()

        let readers = [1, 7, 50].map { limit in
            Task { () throws -> SyncReplica in
                var replica = SyncReplica()
                let admin = try await database.connect()
                defer { Task { await admin.close() } }
                let deadline = ContinuousClock.now + .seconds(120)
                var final: FamilyState?
                while ContinuousClock.now < deadline {
                    if final == nil && writersDone.value { final = try await FamilyState.read(admin, user: parent.id) }
                    let page = try await store.events.changes(for: parent.id, after: replica.cursor, limit: limit)
                    replica.apply(page)
                    if let final, !page.hasMore, replica.state == final { break }
                    if !page.hasMore { try await Task.sleep(for: .milliseconds(3)) }
                }
                return replica
            }
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<12 {
                group.addTask {
                    let connection = try await database.connect()
                    for step in 0..<15 {
                        let child = children[(writer + step) % 3]
                        // The mix is fixed (58 committed inserts, 36 roll-backs); the timing is not.
                        let operation = (writer * 3 + step * 7) % 10
                        let rollBack = (writer + step * 2) % 5 == 0
                        let marker = rollBack ? "rollback" : "w\(writer)s\(step)"
                        let id = UUID()
                        // A deadlock (40P01) rolls the victim back whole; like the store, run it again.
                        for attempt in 1...5 {
                        do {
                            try await connection.transaction { connection in
                                switch operation {
                                case 0..<4:
                                    try await connection.execute("""
                                        INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data, notes)
                                        VALUES (\(id), \(child), \(parent.id), 'diaper', now() - \(PostgresInterval(microseconds: Int64(writer * 100 + step) * 1_000_000)), 'UTC', 0, '{"contents":"wet"}', \(marker))
                                        """)
                                case 4..<6:
                                    try await connection.execute("""
                                        UPDATE events SET notes = \(marker), updated_by = \(parent.id)
                                        WHERE id = (SELECT id FROM events WHERE child_id = \(child) ORDER BY random() LIMIT 1)
                                        """)
                                case 6:
                                    try await connection.execute("""
                                        UPDATE events SET deleted_at = now(), deleted_by = \(parent.id), updated_by = \(parent.id), notes = \(marker)
                                        WHERE id = (SELECT id FROM events WHERE child_id = \(child) AND deleted_at IS NULL ORDER BY random() LIMIT 1)
                                        """)
                                case 7:
                                    try await connection.execute("""
                                        UPDATE events SET deleted_at = NULL, updated_by = \(parent.id), notes = \(marker)
                                        WHERE id = (SELECT id FROM events WHERE child_id = \(child) AND deleted_at IS NOT NULL ORDER BY random() LIMIT 1)
                                        """)
                                case 8:
                                    try await connection.execute("UPDATE children SET name = \("name \(marker)") WHERE id = \(child)")
                                default:
                                    let removed = try await connection.execute("DELETE FROM caregivers WHERE child_id = \(child) AND user_id = \(helper.id)")
                                    if removed == 0 {
                                        try await connection.execute("INSERT INTO caregivers (child_id, user_id) VALUES (\(child), \(helper.id)) ON CONFLICT DO NOTHING")
                                    }
                                }
                                try await Task.sleep(for: .milliseconds(Int.random(in: 0...30)))
                                if rollBack { throw RolledBack() }
                            }
                            if operation < 4 { committedInserts.add() }
                            break
                        } catch is RolledBack {
                            rolledBackIDs.insert(id)
                            break
                        } catch let error as PostgresError where error.sqlState == "40P01" && attempt < 5 {
                            deadlocks.add()
                        }
                        }
                    }
                    await connection.close()
                }
            }
            try await group.waitForAll()
        }
        writersDone.set()
        print("sync stress: \(deadlocks.value) deadlock(s) detected by PostgreSQL and retried")

        let final = try await FamilyState.read(fixture.admin, user: parent.id)
        #expect(committedInserts.value >= 50, "the writers committed too little to prove anything: \(committedInserts.value) inserts")
        #expect(final.events.count == committedInserts.value, "every committed insert is one event: \(final)")
        for (limit, reader) in zip([1, 7, 50], readers) {
            let replica = try await reader.value
            #expect(replica.state == final, "reader with limit \(limit) ended with \(replica.state), the server has \(final)")
            #expect(replica.repeated.isEmpty, "reader with limit \(limit) was given these twice: \(replica.repeated.prefix(5))")
            #expect(replica.notices.isEmpty, "reader with limit \(limit): \(replica.notices)")
            let delivered = replica.deliveries.keys
            #expect(!delivered.contains { $0.contains("rollback") }, "a rolled-back change was delivered")
            #expect(replica.events.keys.allSatisfy { !rolledBackIDs.contains($0) })
            #expect(replica.events.values.allSatisfy { $0.notes != "rollback" })
            #expect(replica.children.values.allSatisfy { !$0.name.contains("rollback") })
        }
    }

    /// An open write transaction in this database and another holds back nothing but its own
    /// change: other children's changes are in the very next page.
    @Test func anOpenWriteTransactionAnywhereStallsNoOtherChild() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, stuck) = try await fixture.family(zone: "UTC")
        let (bob, bobsChild) = try await fixture.family(zone: "UTC")
        let other = try await fixture.store.children.create(ChildDraft(name: "Twin", birthDate: PostgresDate(year: 2026, month: 1, day: 2)), as: alice.id)
        var alices = SyncReplica(), bobs = SyncReplica()
        try await alices.catchUp(fixture.store, alice.id)
        try await bobs.catchUp(fixture.store, bob.id)

        // A write left open on Alice's first child, and one in another database of the cluster.
        let elsewhere = try await TestPostgres.shared.makeDatabase()
        let holders = [try await fixture.database.connect(), try await elsewhere.connect()]
        let release = ManagedFlag()
        let held = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await holders[0].transaction { connection in
                        try await connection.execute("""
                            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                            VALUES (\(stuck.id), \(alice.id), 'diaper', now(), 'UTC', 0, '{"contents":"wet"}')
                            """)
                        while !release.value { try await Task.sleep(for: .milliseconds(20)) }
                    }
                }
                group.addTask {
                    try await holders[1].transaction { connection in
                        try await connection.execute("CREATE TABLE busy (x int)")
                        try await connection.execute("INSERT INTO busy VALUES (1)")
                        while !release.value { try await Task.sleep(for: .milliseconds(20)) }
                    }
                }
                try await group.waitForAll()
            }
        }
        // Both transactions hold a transaction id (they wrote) before anything else happens. On
        // a Citus cluster the insert's transaction id is on the child's worker: every node's
        // sessions are in citus_stat_activity.
        let activity: SQL = TestCitus.fromEnvironment() == nil ? "pg_stat_activity" : "citus_stat_activity"
        try await waitUntil {
            try await fixture.admin.fetchValue(Int.self, """
                SELECT count(*)::int FROM \(activity) WHERE backend_xid IS NOT NULL AND state = 'idle in transaction'
                  AND datname IN (current_database(), \(elsewhere.name))
                """) == 2
        }

        let bobsEvent = try await fixture.log(bobsChild, bob, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        let twinsEvent = try await fixture.log(other, alice, .diaper(.dirty), at("2026-11-20 08:05", "UTC"))
        let started = ContinuousClock.now
        let bobsPage = try await fixture.store.events.changes(for: bob.id, after: bobs.cursor)
        let alicesPage = try await fixture.store.events.changes(for: alice.id, after: alices.cursor)
        let elapsed = ContinuousClock.now - started
        #expect(bobsPage.events.map(\.id) == [bobsEvent.id])
        #expect(alicesPage.events.map(\.id) == [twinsEvent.id], "Alice's other child is not held back; the open insert is not delivered")
        print("two pages with two writes held open elsewhere: \(elapsed)")
        alices.apply(alicesPage)

        release.set()
        try await held.value
        let after = try await fixture.store.events.changes(for: alice.id, after: alices.cursor)
        #expect(after.events.count == 1 && after.events.first?.childID == stuck.id, "the held write arrives once it commits")
        for holder in holders { await holder.close() }
    }

    /// Removed from a child: `accessRevoked` on the next page, and nothing more of it. Given
    /// access: the child's whole state. Another family's data never appears.
    @Test func accessRevokedAndGrantedAndNothingOfAnotherFamily() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let (carol, carolsChild) = try await fixture.family(zone: "UTC")
        let carolsEvent = try await fixture.log(carolsChild, carol, .diaper(.wet), at("2026-11-20 07:00", "UTC"))
        let before = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        let deleted = try await fixture.log(child, alice, .diaper(.dirty), at("2026-11-20 08:30", "UTC"))
        _ = try await fixture.store.events.softDelete(deleted.id, as: alice.id)

        let bob = try await fixture.user("Bob")
        var bobs = SyncReplica()
        try await bobs.catchUp(fixture.store, bob.id)
        #expect(bobs.children.isEmpty && bobs.events.isEmpty)

        try await fixture.join(bob, to: child, invitedBy: alice)
        try await bobs.catchUp(fixture.store, bob.id, limit: 2)
        #expect(bobs.children.keys.sorted { $0.uuidString < $1.uuidString } == [child.id])
        #expect(bobs.children[child.id]?.role == .caregiver)
        #expect(Set(bobs.events.keys) == [before.id, deleted.id] && bobs.events[deleted.id]?.isDeleted == true)
        #expect(Set(bobs.caregivers[child.id]?.keys.map { $0 } ?? []) == [alice.id, bob.id])

        // Alice sees Bob join (a caregiver row), then leave.
        var alices = SyncReplica()
        try await alices.catchUp(fixture.store, alice.id)
        try await fixture.store.caregivers.remove(bob.id, from: child.id, as: alice.id)
        let revoked = try await fixture.store.events.changes(for: bob.id, after: bobs.cursor)
        #expect(revoked.notices == [.accessRevoked(childID: child.id)])
        #expect(revoked.events.isEmpty && revoked.children.isEmpty && revoked.caregivers.isEmpty)
        bobs.apply(revoked)
        #expect(bobs.children.isEmpty && bobs.events.isEmpty)
        #expect(bobs.cursor.positions.isEmpty)
        _ = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 09:00", "UTC"))
        let later = try await fixture.store.events.changes(for: bob.id, after: bobs.cursor)
        #expect(later.notices.isEmpty && later.events.isEmpty, "nothing more of a child one no longer sees")

        let alicesPage = try await fixture.store.events.changes(for: alice.id, after: alices.cursor)
        #expect(alicesPage.removals == [SyncRemoval(childID: child.id, kind: .caregiver, id: bob.id)])
        alices.apply(alicesPage)
        #expect(alices.caregivers[child.id]?.keys.map { $0 } == [alice.id])

        // The child deleted: its caregivers are told.
        try await fixture.store.children.delete(child.id, as: alice.id)
        let gone = try await fixture.store.events.changes(for: alice.id, after: alices.cursor)
        #expect(gone.notices == [.accessRevoked(childID: child.id)])

        // Nothing of Carol's family reached anyone else.
        for replica in [alices, bobs] {
            #expect(replica.children[carolsChild.id] == nil && replica.events[carolsEvent.id] == nil)
            #expect(!replica.deliveries.keys.contains { $0.contains(carolsChild.id.uuidString) || $0.contains(carolsEvent.id.uuidString) })
        }
    }

    /// A purged event reaches clients as a removal. Once the tombstone itself is pruned, a
    /// cursor older than it gets `resyncRequired` and the child's whole state; a newer one
    /// goes on as before.
    @Test func purgeRemovalsAndTheStaleCursor() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let kept = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        let doomed = try await fixture.log(child, alice, .diaper(.dirty), at("2026-11-20 08:30", "UTC"))
        var old = SyncReplica()
        try await old.catchUp(fixture.store, alice.id)
        _ = try await fixture.store.events.softDelete(doomed.id, as: alice.id)
        try await fixture.admin.execute("UPDATE events SET deleted_at = now() - interval '40 days' WHERE id = \(doomed.id)")
        #expect(try await fixture.store.events.purgeDeleted() == 1)

        var current = old
        let purged = try await fixture.store.events.changes(for: alice.id, after: current.cursor)
        #expect(purged.removals == [SyncRemoval(childID: child.id, kind: .event, id: doomed.id)])
        #expect(purged.events.isEmpty, "the soft-deleted version is gone with the row")
        current.apply(purged)
        #expect(Set(current.events.keys) == [kept.id])

        // The tombstone ages past the retention and is pruned: the floor rises above `old`.
        try await fixture.admin.execute("UPDATE sync_tombstones SET removed_at = now() - interval '40 days'")
        #expect(try await fixture.store.events.purgeDeleted() == 0)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*)::int FROM sync_tombstones") == 0)
        let stale = try await fixture.store.events.changes(for: alice.id, after: old.cursor)
        #expect(stale.notices == [.resyncRequired(childID: child.id)])
        #expect(stale.children.map(\.id) == [child.id] && stale.events.map(\.id) == [kept.id], "the whole state follows")
        old.apply(stale)
        #expect(old.state == current.state)

        let fresh = try await fixture.store.events.changes(for: alice.id, after: current.cursor)
        #expect(fresh.notices.isEmpty && fresh.events.isEmpty && fresh.children.isEmpty)
    }

    /// Damaged and foreign cursors are refused by name; forged positions cannot reveal or skip
    /// anything; a new epoch resyncs everyone.
    @Test func cursorsThatCannotContinue() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let (bob, bobsChild) = try await fixture.family(zone: "UTC")
        _ = try await fixture.log(bobsChild, bob, .diaper(.wet), at("2026-11-20 07:00", "UTC"))
        let event = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        var alices = SyncReplica()
        try await alices.catchUp(fixture.store, alice.id)
        let token = alices.cursor.description
        #expect(try SyncCursor(validating: token) == alices.cursor)
        #expect(SyncCursor("0") == .start && SyncCursor.start.description == "0")

        for damaged in ["", "1:2", "2.", "2.!!!", "2." + String(token.dropFirst(2).dropLast(3)), token + "x", "3" + token.dropFirst()] {
            #expect(throws: StoreError.invalid(field: "cursor", reason: "is not a sync cursor this server wrote; start again from SyncCursor.start")) {
                try SyncCursor(validating: damaged)
            }
        }
        await expectStoreError(.invalid(field: "cursor", reason: "belongs to another account; start again from SyncCursor.start")) {
            _ = try await fixture.store.events.changes(for: bob.id, after: alices.cursor)
        }

        // Forged positions: Bob's child named in Alice's cursor, and Alice's own child ahead of
        // the server. Bob's child is only "not yours"; Alice's own child starts over.
        var forged = alices.cursor
        forged = try SyncCursor(validating: Self.token(epoch: forged.epoch, user: alice.id, positions: [child.id: 1_000_000, bobsChild.id: 0]))
        let page = try await fixture.store.events.changes(for: alice.id, after: forged)
        #expect(Set(page.notices) == [.resyncRequired(childID: child.id), .accessRevoked(childID: bobsChild.id)])
        #expect(page.events.map(\.id) == [event.id] && page.children.map(\.id) == [child.id])
        #expect(page.next.positions.keys.map { $0 } == [child.id])

        // A restore of an older state: the operator starts a new epoch; every cursor resyncs.
        _ = try await fixture.admin.fetchValue(UUID.self, "SELECT sync_start_new_epoch()")
        let resync = try await fixture.store.events.changes(for: alice.id, after: alices.cursor)
        #expect(resync.notices == [.resyncRequired(childID: child.id)])
        #expect(resync.events.map(\.id) == [event.id])
        // With a second child, a page asked for one child after a new epoch still tells the
        // client to start the other one over (its position belonged to the old epoch).
        let twin = try await fixture.store.children.create(ChildDraft(name: "Twin", birthDate: PostgresDate(year: 2026, month: 1, day: 2)), as: alice.id)
        var both = SyncReplica()
        try await both.catchUp(fixture.store, alice.id)
        #expect(Set(both.cursor.positions.keys) == [child.id, twin.id])
        _ = try await fixture.admin.fetchValue(UUID.self, "SELECT sync_start_new_epoch()")
        let filtered = try await fixture.store.events.changes(for: alice.id, child: child.id, after: both.cursor)
        #expect(Set(filtered.notices) == [.resyncRequired(childID: child.id), .resyncRequired(childID: twin.id)])
        #expect(filtered.next.positions[twin.id] == nil && filtered.next.positions[child.id] != nil)
        both.apply(filtered)
        try await both.catchUp(fixture.store, alice.id)
        #expect(both.state == (try await FamilyState.read(fixture.admin, user: alice.id)))

        let limitError = StoreError.invalid(field: "limit", reason: "must be between 1 and 10000")
        await expectStoreError(limitError) { _ = try await fixture.store.events.changes(for: alice.id, after: .start, limit: 0) }
    }

    /// A token with exactly these fields, as the library writes it.
    static func token(epoch: UUID?, user: UUID, positions: [UUID: Int64]) -> String {
        let entries = positions.map { "\($0.key.uuidString):\($0.value)" }.joined(separator: ",")
        let payload = Data("\((epoch ?? UUID()).uuidString)|\(user.uuidString)|\(entries)".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return "2." + payload
    }

    /// The child record's own changes (rename, time zone, day start, settings) are in the feed;
    /// a counter bump alone does not move `updated_at`.
    @Test func childRecordChangesAreDelivered() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        var replica = SyncReplica()
        try await replica.catchUp(fixture.store, alice.id)
        let updatedAt = try await fixture.admin.fetchValue(Date.self, "SELECT updated_at FROM children WHERE id = \(child.id)")
        _ = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        #expect(try await fixture.admin.fetchValue(Date.self, "SELECT updated_at FROM children WHERE id = \(child.id)") == updatedAt)
        var settings = child.settings
        settings.timezone = "Asia/Tokyo"
        settings.dayStartTime = PostgresTime(hour: 6, minute: 0)
        _ = try await fixture.store.children.update(child.id, with: ChildChanges(name: "Renamed", settings: settings), as: alice.id)
        let page = try await fixture.store.events.changes(for: alice.id, after: replica.cursor)
        #expect(page.events.count == 1)
        #expect(page.children.map(\.name) == ["Renamed"])
        #expect(page.children.first?.settings.timezone == "Asia/Tokyo" && page.children.first?.settings.dayStartTime == PostgresTime(hour: 6, minute: 0))
    }

    /// The application role cannot move the stamps itself, and a stamp is drawn only under the
    /// lock of the child's counter row (sync_counters, 0022): a second writer of the same child
    /// waits for the first to commit and then draws a larger number.
    @Test func theStampsAreTheTriggersAlone() async throws {
        let fixture = try await StoreFixture.make()
        let (_, child) = try await fixture.family(zone: "UTC")
        let app = try await PostgresConnection.connect(PostgresConfiguration(fixture.database.connectionString + "&options=-crole%3Dbabybasics_app"))
        for column in ["record_seq", "sync_floor"] {
            await #expect(throws: PostgresError.self) {
                try await app.execute("UPDATE children SET \(identifier: column) = 0 WHERE id = \(child.id)")
            }
        }
        await #expect(throws: PostgresError.self) {
            try await app.execute("INSERT INTO sync_tombstones (child_id, change_seq, kind, entity_id) VALUES (\(child.id), 99, 'event', \(UUID()))")
        }
        for call: SQL in ["UPDATE sync_counters SET last_stamp = 1 WHERE child_id = \(child.id)",
                          "DELETE FROM sync_counters WHERE child_id = \(child.id)",
                          "INSERT INTO sync_counters (child_id, last_stamp) VALUES (\(UUID()), 1)"] {
            let refused = await #expect(throws: PostgresError.self, "the application moved a counter") { try await app.execute(call) }
            #expect(refused?.kind == .insufficientPrivilege)
        }
        #expect(try await app.execute("UPDATE children SET name = 'Allowed' WHERE id = \(child.id)") == 1)
        let position = try #require(try await app.fetchValue(Int64.self, "SELECT sync_child_position(\(child.id))"))

        let insert: SQL = """
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            SELECT \(child.id), primary_caregiver_id, 'diaper', now(), 'UTC', 0, '{"contents":"wet"}' FROM children WHERE id = \(child.id)
            RETURNING change_seq
            """
        let held = ManagedFlag(), release = ManagedFlag()
        let first = Task {
            try await app.transaction { app in
                let early = try await app.fetchValue(Int64.self, insert)
                held.set()
                while !release.value { try await Task.sleep(for: .milliseconds(10)) }
                // Stamped while the second writer waits: the second one's number must still
                // be larger (it draws after the lock, never before waiting for it).
                let late = try await app.fetchValue(Int64.self, insert)
                return (early, late)
            }
        }
        while !held.value { try await Task.sleep(for: .milliseconds(10)) }
        let locked = await #expect(throws: PostgresError.self, "a stamp was drawn without the child's lock") {
            try await fixture.admin.execute("SELECT 1 FROM sync_counters WHERE child_id = \(child.id) FOR NO KEY UPDATE NOWAIT")
        }
        #expect(locked?.kind == .lockNotAvailable)
        // A second writer of the same child waits for the first one's commit.
        let second = try await fixture.database.connect()
        let secondPID = await second.backendPID
        let secondStamp = Task { try await second.fetchValue(Int64.self, insert) }
        var waiting = false
        // On a Citus cluster the lock wait is on the child's worker (citus_lock_waits).
        let waits: SQL = TestCitus.fromEnvironment() == nil
            ? "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = \(secondPID)"
            : "SELECT count(*) > 0 FROM citus_lock_waits"
        for _ in 0..<500 where !waiting {
            waiting = try await fixture.admin.fetchValue(Bool.self, waits) == true
            if !waiting { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(waiting, "the second writer of the child did not wait for the first")
        release.set()
        let (early, late) = try await first.value
        let a1 = try #require(early), a2 = try #require(late), b = try #require(try await secondStamp.value)
        #expect(position < a1 && a1 < a2 && a2 < b, "stamps \(a1), \(a2) (first writer) then \(b) after position \(position)")
        #expect(try await fixture.admin.fetchValue(Int64.self, "SELECT sync_child_position(\(child.id))") == b)
        await second.close()
        await app.close()
    }

    /// A child new to the client arrives before anything of it, even one row a page, and is
    /// not sent again when the position passes its record's stamp; a caregiver's new display
    /// name reaches the feed.
    @Test func aNewChildsRecordComesFirstAndOnce() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        for hour in 8...10 { _ = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 \(hour):00", "UTC")) }
        _ = try await fixture.store.children.update(child.id, with: ChildChanges(name: "Renamed after three events"), as: alice.id)
        _ = try await fixture.log(child, alice, .diaper(.dirty), at("2026-11-20 11:00", "UTC"))

        var replica = SyncReplica()
        let first = try await fixture.store.events.changes(for: alice.id, after: replica.cursor, limit: 1)
        #expect(first.children.map(\.name) == ["Renamed after three events"] && first.events.isEmpty && first.hasMore)
        replica.apply(first)
        var order: [String] = []
        while true {
            let page = try await fixture.store.events.changes(for: alice.id, after: replica.cursor, limit: 1)
            order += page.children.map { "child \($0.name)" } + page.events.map { "event \($0.id)" } + page.caregivers.map { "caregiver \($0.caregiver.displayName)" }
            replica.apply(page)
            if !page.hasMore { break }
        }
        #expect(!order.contains { $0.hasPrefix("child") }, "the record was sent again: \(order)")
        #expect(replica.repeated.isEmpty, "given twice: \(replica.repeated)")
        let server = try await FamilyState.read(fixture.admin, user: alice.id)
        #expect(replica.events.count == 4 && replica.state == server)

        // A later rename of the child is delivered at its stamp, after the events before it.
        _ = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 12:00", "UTC"))
        _ = try await fixture.store.children.update(child.id, with: ChildChanges(name: "Again"), as: alice.id)
        let later = try await fixture.store.events.changes(for: alice.id, after: replica.cursor, limit: 1)
        #expect(later.events.count == 1 && later.children.isEmpty)
        let rename = try await fixture.store.events.changes(for: alice.id, after: later.next, limit: 1)
        #expect(rename.children.map(\.name) == ["Again"])

        // A display name change re-stamps the memberships; an unchanged name does not. By hand
        // on one server (trigger users_sync_display_name); on a Citus cluster, where that trigger
        // cannot run, with set_display_name(), as docs/scale-out.md tells a DBA.
        let app = try await PostgresConnection.connect(PostgresConfiguration(fixture.database.connectionString + "&options=-crole%3Dbabybasics_app"))
        defer { Task { await app.close() } }
        let byHand = TestCitus.fromEnvironment() == nil
        func setName(_ name: String) async throws {
            if byHand {
                try await app.execute("UPDATE users SET display_name = \(name) WHERE id = \(alice.id)")
            } else {
                #expect(try await app.fetchValue(Int.self, "SELECT count(*)::int FROM set_display_name(\(alice.id), \(name))") == 1)
            }
        }
        try await setName(alice.displayName)
        #expect(try await fixture.store.events.changes(for: alice.id, after: rename.next).caregivers.isEmpty)
        try await setName("Mum")
        let named = try await fixture.store.events.changes(for: alice.id, after: rename.next)
        #expect(named.caregivers.map(\.caregiver.displayName) == ["Mum"] && named.events.isEmpty)
    }

    /// `pg_dump` of the database restored into a new cluster: a cursor from before the dump
    /// continues with exactly the changes written after the restore. The dump holds an event
    /// of each kind, so the restore (psql, stopping at the first error) runs every CHECK
    /// function of events with the empty search_path pg_dump sets.
    @Test func aCursorSurvivesDumpAndRestore() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let old = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        // One row for each CHECK function: the restore evaluates them all with an empty search_path.
        _ = try await fixture.log(child, alice, .note(category: "health"), at("2026-11-20 08:05"), notes: "a note")
        _ = try await fixture.log(child, alice, .feeding(.breast(startedSide: .left, bothSides: true)), at("2026-11-20 08:10"), end: at("2026-11-20 08:30"))
        _ = try await fixture.log(child, alice, .sleep, at("2026-11-20 09:00"), end: at("2026-11-20 10:00"))
        _ = try await fixture.log(child, alice, .feeding(.bottle(amountMl: nil, preparedMl: 150, remainingMl: 20,
                                                                   feedingStartedAt: at("2026-11-20 11:05").utc, refrigerated: true)),
                                  at("2026-11-20 11:00"), end: at("2026-11-20 11:30"))
        var replica = SyncReplica()
        try await replica.catchUp(fixture.store, alice.id)

        let binaries = try ServerBinaries.locate()
        let folder = URL(fileURLWithPath: "/tmp/bb-restore-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        let dump = URL(fileURLWithPath: "/tmp/bb-dump-\(UUID().uuidString.prefix(8)).sql")
        defer { try? FileManager.default.removeItem(at: dump) }
        try await run(binaries.directory + "/pg_dump", ["--no-owner", "--no-privileges", "-f", dump.path, "-d", fixture.database.connectionString])

        if TestCitus.fromEnvironment() != nil {
            // A Citus database's dump creates the citus extension, which only a server that
            // preloads Citus can load: restored on the coordinator's server, a new database
            // whose tables are its own (docs/scale-out.md, backups).
            try await restoreAndSync(try await TestPostgres.shared.cluster(), dump: dump, child: child, old: old, alice: alice, replica: replica)
            return
        }
        let cluster = EmbeddedPostgres(directory: folder, options: .init(durable: false))
        try await cluster.start()
        do {
            try await restoreAndSync(cluster, dump: dump, child: child, old: old, alice: alice, replica: replica)
        } catch {
            try? await cluster.stop(immediate: true)
            throw error
        }
        try await cluster.stop(immediate: true)
    }

    private func restoreAndSync(_ cluster: EmbeddedPostgres, dump: URL, child: Child, old: Event, alice: User, replica: SyncReplica) async throws {
        let binaries = try ServerBinaries.locate()
        let name = "restored_\(UUID().uuidString.prefix(8).lowercased())"
        try await cluster.createDatabase(name)
        try await run(binaries.directory + "/psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump.path, "-d", try cluster.connectionString(database: name)])

        let pool = PostgresPool(configuration: PostgresConfiguration(try cluster.connectionString(database: name)), options: PoolOptions(maximumConnections: 2))
        let restored = Store(pool: pool, deadlines: .forTests)
        let unchanged = try await restored.events.changes(for: alice.id, after: replica.cursor)
        #expect(unchanged.notices.isEmpty && unchanged.events.isEmpty && unchanged.children.isEmpty)
        let new = try await restored.events.log(EventDraft(childID: child.id, payload: .diaper(.dirty), start: at("2026-11-20 09:00", "UTC")), as: alice.id)
        let edited = try await restored.events.update(old.id, with: EventChanges(notes: .some("after the restore")), expectedRevision: 1, as: alice.id)
        let page = try await restored.events.changes(for: alice.id, after: replica.cursor)
        #expect(page.notices.isEmpty)
        #expect(page.events.map(\.id) == [new.id, edited.id])
        #expect(page.events.last?.revision == 2)
        await pool.close()
    }

    /// `store.childChanges()` hears each commit (never a rollback), and says so when its
    /// listening backend was terminated and replaced.
    @Test func pushAtCommitOnlyAndAcrossAReconnect() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let heard = LockedList<ChildChange>()
        let listening = Task {
            for await change in fixture.store.childChanges() { heard.append(change) }
        }
        let listeners: SQL = """
            SELECT count(*)::int FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN "child_changed"'
            """
        try await waitUntil { try await fixture.admin.fetchValue(Int.self, listeners) == 1 }

        do {
            try await fixture.admin.transaction { connection in
                try await connection.execute("""
                    INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                    VALUES (\(child.id), \(alice.id), 'diaper', now(), 'UTC', 0, '{"contents":"wet"}')
                    """)
                try await Task.sleep(for: .milliseconds(300))
                throw RolledBack()
            }
        } catch is RolledBack {}
        #expect(heard.items.isEmpty, "nothing for an uncommitted or rolled-back write")
        let started = ContinuousClock.now
        _ = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        try await waitUntil { !heard.items.isEmpty }
        print("child_changed heard \(ContinuousClock.now - started) after the commit returned")
        try await Task.sleep(for: .milliseconds(200))
        #expect(heard.items == [.changed(childID: child.id)], "one per committed transaction; the rollback sent none")

        // The listening backend is terminated: the stream says changes may have been missed,
        // and goes on with the new connection.
        try await fixture.admin.execute("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN "child_changed"'
            """)
        try await waitUntil { heard.items.contains(.missedSome) }
        try await waitUntil { try await fixture.admin.fetchValue(Int.self, listeners) == 1 }
        _ = try await fixture.log(child, alice, .diaper(.dirty), at("2026-11-20 08:10", "UTC"))
        try await waitUntil { heard.items.last == .changed(childID: child.id) && heard.items.count == 3 }
        listening.cancel()
        await listening.value
        try await waitUntil { try await fixture.admin.fetchValue(Int.self, listeners) == 0 }
    }

    /// At a realistic history the feed's event query reads stamps straight from the index: a
    /// bounded range scan per child, no sort of the child's history.
    @Test func theFeedIsABoundedRangeScanPerChild() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, heavy) = try await fixture.family(zone: "UTC")
        try await fixture.admin.executeUnsafeRawSQL("""
            SET session_replication_role = replica;
            INSERT INTO users (id, email, display_name) SELECT gen_random_uuid(), 'light' || g || '@example.com', 'Light' FROM generate_series(1, 400) g;
            INSERT INTO children (id, name, birth_date, primary_caregiver_id)
                SELECT gen_random_uuid(), 'Light', '2026-01-01', id FROM users WHERE email LIKE 'light%';
            INSERT INTO caregivers (child_id, user_id, role) SELECT id, primary_caregiver_id, 'primary' FROM children WHERE name = 'Light';
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data, change_seq)
                SELECT c.id, c.primary_caregiver_id, 'diaper', now() - g * interval '1 hour', 'UTC', 0, '{"contents":"wet"}', g
                FROM children c, generate_series(1, 40) g WHERE c.name = 'Light';
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data, change_seq)
                SELECT '\(heavy.id.uuidString)', '\(alice.id.uuidString)', 'diaper', now() - g * interval '1 hour', 'UTC', 0, '{"contents":"wet"}', g + 10
                FROM generate_series(1, 20000) g;
            INSERT INTO sync_counters (child_id, last_stamp) SELECT id, 40 FROM children WHERE name = 'Light'
                ON CONFLICT (child_id) DO UPDATE SET last_stamp = greatest(sync_counters.last_stamp, 40);
            UPDATE sync_counters SET last_stamp = greatest(last_stamp, 20010) WHERE child_id = '\(heavy.id.uuidString)';
            SET session_replication_role = DEFAULT;
            ANALYZE;
            """)
        let plan = try await fixture.admin.transaction { connection in
            // The feed's own statements, in its own transaction settings.
            _ = try await connection.query(SyncPageBuilder.children(of: alice.id, only: nil))
            return try await connection.query("EXPLAIN (ANALYZE, BUFFERS) \(SyncPageBuilder.events(of: heavy.id, after: 0, through: 20010, limit: 500))")
                .decodeColumn(String.self).joined(separator: "\n")
        }
        #expect(plan.contains("Index Scan using events_child_change_seq_key"), "\(plan)")
        #expect(!plan.contains("Sort"), "\(plan)")
        // On a Citus cluster: one task, on the child's shard.
        if TestCitus.fromEnvironment() != nil { #expect(plan.contains("Task Count: 1"), "\(plan)") }
        // PostgreSQL 18 prints actual rows with two decimals.
        #expect(plan.contains("rows=500 ") || plan.contains("rows=500.00 "), "\(plan)")
        var replica = SyncReplica()
        try await replica.catchUp(fixture.store, alice.id, limit: 5000)
        // 20,000 events, the child record and its caregiver: five pages of at most 5,000.
        #expect(replica.events.count == 20000 && replica.pages == 5 && replica.repeated.isEmpty)
    }

    /// The feed writes out `sync_events_since()`'s body (Citus cannot run the function inside a
    /// statement on a shard): what a DBA's call lists is what the app's pages deliver, in order.
    @Test func theDBAsFeedIsTheApps() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        var logged: [UUID] = []
        for minute in 0..<7 {
            logged.append(try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 08:0\(minute)", "UTC")).id)
        }
        _ = try await fixture.store.events.softDelete(logged[2], expectedRevision: 1, as: user.id)
        var app: [UUID] = []
        var cursor = SyncCursor.start
        repeat {
            let page = try await fixture.store.events.changes(for: user.id, after: cursor, limit: 3)
            app += page.events.map(\.id)
            cursor = page.next
            if !page.hasMore { break }
        } while true
        let rows = try await dbaIDs(fixture, "SELECT id FROM sync_events_since(\(child.id), \(Int64(0)), \(Int32(100)))",
                                    psql: "SELECT id FROM sync_events_since(:'child', 0, 100)", ["child": child.id.uuidString])
        // The soft delete moved logged[2] to the end of both.
        #expect(rows == app && rows.count == 7 && rows.last == logged[2], "\(rows) \(app)")
    }
}

/// Runs a program and fails the test with its output if it fails. (`ChildProcess`, not
/// Foundation's `Process`, whose `waitUntilExit` can miss a child's exit on Linux.)
func run(_ executable: String, _ arguments: [String]) async throws {
    let result = try await ChildProcess.spawn([executable] + arguments).result()
    if result.status != 0 {
        Issue.record("\(executable) \(arguments.joined(separator: " ")) exited \(result.status): \(result.stdout)\(result.stderr)")
        throw RolledBack()
    }
}

final class ManagedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false
    var value: Bool { lock.withLock { flag } }
    func set() { lock.withLock { flag = true } }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

final class LockedSet<Element: Hashable>: @unchecked Sendable {
    private let lock = NSLock()
    private var set: Set<Element> = []
    func insert(_ element: Element) { _ = lock.withLock { set.insert(element) } }
    func contains(_ element: Element) -> Bool { lock.withLock { set.contains(element) } }
}

final class LockedList<Element: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [Element] = []
    func append(_ element: Element) { lock.withLock { list.append(element) } }
    var items: [Element] { lock.withLock { list } }
}
