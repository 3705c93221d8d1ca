import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// Event ids and invite codes are unique per child (migration 0022, for Citus): what the store
/// does when one exists in another child.
@Suite struct PerChildKeyTests {
    /// An event id is unique per child (migration 0025's one rule, the primary key's): one id
    /// for two children of a user is two events, in whatever order, and a retry for either
    /// child is that child's event again. Another family's event with the same id is a row of
    /// its own, which neither family sees or changes.
    @Test func anEventIdIsOneEventPerChild() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, first) = try await fixture.family(zone: "UTC")
        let twin = try await fixture.store.children.create(ChildDraft(name: "Twin", birthDate: PostgresDate(year: 2025, month: 12, day: 1)), as: parent.id)
        let (stranger, theirs) = try await fixture.family(zone: "UTC")
        let start = at("2026-11-20 08:00", "UTC")
        let logged = try await fixture.store.events.log(EventDraft(childID: first.id, payload: .diaper(.wet), start: start), as: parent.id)
        let twins = try await fixture.store.events.log(EventDraft(id: logged.id, childID: twin.id, payload: .diaper(.dirty), start: start), as: parent.id)
        #expect(twins.childID == twin.id && twins.id == logged.id && twins.payload == .diaper(.dirty))
        #expect(try await fixture.store.events.log(EventDraft(id: logged.id, childID: first.id, payload: .diaper(.wet), start: start), as: parent.id) == logged)
        #expect(try await fixture.store.events.log(EventDraft(id: logged.id, childID: twin.id, payload: .diaper(.dirty), start: start), as: parent.id) == twins)

        let strangers = try await fixture.store.events.log(EventDraft(id: logged.id, childID: theirs.id, payload: .diaper(.dirty), start: start), as: stranger.id)
        #expect(strangers.childID == theirs.id && strangers.id == logged.id)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*)::int FROM events WHERE id = \(logged.id)") == 3)
        #expect(try await fixture.store.events.scoped(to: first.id).get(logged.id, as: parent.id) == logged)
        #expect(try await fixture.store.events.scoped(to: twin.id).get(logged.id, as: parent.id) == twins)
        #expect(try await fixture.store.events.get(logged.id, as: stranger.id) == strangers)
        _ = try await fixture.store.events.softDelete(logged.id, as: stranger.id)
        #expect(try await fixture.store.events.scoped(to: first.id).get(logged.id, as: parent.id) == logged, "the other family's delete touched this row")
    }

    /// Twenty parallel sends of one id to each of two children: one event per child, never
    /// two (the key decides, not a check beside the INSERT), and every send answers.
    @Test func parallelSendsOfOneIdToTwoChildrenMakeOneEventEach() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, first) = try await fixture.family(zone: "UTC")
        let twin = try await fixture.store.children.create(ChildDraft(name: "Twin", birthDate: PostgresDate(year: 2025, month: 12, day: 1)), as: parent.id)
        let id = UUID()
        let start = at("2026-11-20 08:00", "UTC")
        let created = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<40 {
                let child = index % 2 == 0 ? first.id : twin.id
                group.addTask { try await fixture.store.events.record(EventDraft(id: id, childID: child, payload: .diaper(.wet), start: start), as: parent.id).created }
            }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(created == 2)
        #expect(try await fixture.admin.query("SELECT child_id FROM events WHERE id = \(id) ORDER BY child_id").decodeColumn(UUID.self) == [first.id, twin.id].sorted { $0.uuidString < $1.uuidString })
    }

    /// A code that invites of two children share (only by hand: the store never draws a code
    /// another invite uses) lets nobody in; revoking it removes only the acting primary's
    /// invite, after which the code is one invite again and redeems.
    @Test func aCodeSharedByTwoChildrenOpensNeither() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, alicesChild) = try await fixture.family("Alice")
        let (bob, bobsChild) = try await fixture.family("Bob")
        let guest = try await fixture.user("Guest")
        for (user, child) in [(alice, alicesChild), (bob, bobsChild)] {
            try await fixture.admin.execute("INSERT INTO invites (code, child_id, created_by) VALUES ('TWNCDE23', \(child.id), \(user.id))")
        }
        await expectStoreError(.inviteNotFound) { try await fixture.store.invites.redeem("TWNCDE23", as: guest.id) }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*)::int FROM caregivers WHERE user_id = \(guest.id)") == 0)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*)::int FROM invites WHERE redeemed_at IS NOT NULL") == 0)

        try await fixture.store.invites.revoke("twncde23", as: alice.id)
        #expect(try await fixture.admin.query("SELECT child_id FROM invites WHERE code = 'TWNCDE23'").decodeColumn(UUID.self) == [bobsChild.id])
        #expect(try await fixture.store.invites.redeem("twncde23", as: guest.id) == bobsChild.id)
        await expectStoreError(.notFound) { _ = try await fixture.store.children.get(alicesChild.id, as: guest.id) }
    }
}
