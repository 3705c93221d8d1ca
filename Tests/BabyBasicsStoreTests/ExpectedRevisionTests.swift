import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// Every change of an event can say which version the caller saw: a delete, a restore, the
/// end of a sleep and each bottle step then never silently beat a concurrent edit. A stale
/// revision is `conflict(current:)` with the version in the database, and writes nothing; the
/// right one is applied; no revision keeps the old behaviour.
@Suite struct ExpectedRevisionTests {
    /// Someone else's edit moves the event to revision 2 behind the caller's back.
    func editedBehindTheCallersBack(_ fixture: StoreFixture, _ event: Event, by user: User) async throws -> Event {
        try await fixture.store.events.update(event.id, with: EventChanges(notes: "changed by the other parent"), expectedRevision: event.revision, as: user.id)
    }

    @Test func softDeleteAndRestore() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let seen = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        let theirs = try await editedBehindTheCallersBack(fixture, seen, by: alice)
        await expectStoreError(.conflict(current: theirs)) { _ = try await fixture.store.events.softDelete(seen.id, expectedRevision: seen.revision, as: alice.id) }
        #expect(try await fixture.store.events.get(seen.id, as: alice.id) == theirs, "nothing written")
        let deleted = try await fixture.store.events.softDelete(seen.id, expectedRevision: theirs.revision, as: alice.id)
        #expect(deleted.isDeleted && deleted.revision == theirs.revision + 1)

        await expectStoreError(.conflict(current: deleted)) { _ = try await fixture.store.events.restore(seen.id, expectedRevision: theirs.revision, as: alice.id) }
        #expect(try await fixture.store.events.get(seen.id, as: alice.id).isDeleted)
        let restored = try await fixture.store.events.restore(seen.id, expectedRevision: deleted.revision, as: alice.id)
        #expect(!restored.isDeleted)
        // Without a revision: as before (last writer wins, deleting twice is a no-op).
        _ = try await fixture.store.events.softDelete(seen.id, as: alice.id)
        #expect(try await fixture.store.events.softDelete(seen.id, as: alice.id).isDeleted)
    }

    @Test func endSleep() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let sleep = try await fixture.store.events.startSleep(for: child.id, at: at("2026-11-20 08:00", "UTC"), as: alice.id)
        let theirs = try await editedBehindTheCallersBack(fixture, sleep, by: alice)
        await expectStoreError(.conflict(current: theirs)) {
            _ = try await fixture.store.events.endSleep(for: child.id, at: at("2026-11-20 09:00", "UTC"), expectedRevision: sleep.revision, as: alice.id)
        }
        #expect(try await fixture.store.events.get(sleep.id, as: alice.id).end == nil, "still running")
        let ended = try await fixture.store.events.endSleep(for: child.id, at: at("2026-11-20 09:00", "UTC"), expectedRevision: theirs.revision, as: alice.id)
        #expect(ended.minutes == 60)
        await expectStoreError(.noActiveSleep) {
            _ = try await fixture.store.events.endSleep(for: child.id, at: at("2026-11-20 09:30", "UTC"), expectedRevision: ended.event.revision, as: alice.id)
        }
    }

    @Test func bottleSteps() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let bottle = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 08:00", "UTC"), as: alice.id)
        let theirs = try await editedBehindTheCallersBack(fixture, bottle, by: alice)
        await expectStoreError(.conflict(current: theirs)) {
            _ = try await fixture.store.events.startFeeding(bottle.id, at: at("2026-11-20 08:05", "UTC").utc, expectedRevision: bottle.revision, as: alice.id)
        }
        let feeding = try await fixture.store.events.startFeeding(bottle.id, at: at("2026-11-20 08:05", "UTC").utc, expectedRevision: theirs.revision, as: alice.id)
        await expectStoreError(.conflict(current: feeding)) {
            _ = try await fixture.store.events.finishFeeding(bottle.id, remainingMl: 20, at: at("2026-11-20 08:30", "UTC"), expectedRevision: theirs.revision, as: alice.id)
        }
        await expectStoreError(.conflict(current: feeding)) {
            _ = try await fixture.store.events.discard(bottle.id, at: at("2026-11-20 08:30", "UTC"), expectedRevision: bottle.revision, as: alice.id)
        }
        #expect(try await fixture.store.events.get(bottle.id, as: alice.id) == feeding, "nothing written by the refused steps")
        let finished = try await fixture.store.events.finishFeeding(bottle.id, remainingMl: 20, at: at("2026-11-20 08:30", "UTC"), expectedRevision: feeding.revision, as: alice.id)
        #expect(finished.event.end != nil)
    }
}
