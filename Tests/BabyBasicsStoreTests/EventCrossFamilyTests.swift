import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// Every event call, as another family's user: `notFound`, and nothing changes.
@Suite struct EventCrossFamilyTests {
    @Test func anotherFamilysEventsDoNotExist() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, _) = try await fixture.family(zone: "UTC")
        let (bob, bobsChild) = try await fixture.family(zone: "UTC")
        let diaper = try await fixture.log(bobsChild, bob, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        let bottle = try await fixture.store.events.prepareBottle(for: bobsChild.id, preparedMl: 120, at: at("2026-11-20 08:30", "UTC"), as: bob.id)
        _ = try await fixture.store.events.startSleep(for: bobsChild.id, at: at("2026-11-20 09:00", "UTC"), as: bob.id)
        let deleted = try await fixture.store.events.softDelete(try await fixture.log(bobsChild, bob, .note(category: "x"), at("2026-11-20 07:00", "UTC")).id, as: bob.id)
        let store = fixture.store
        let now = at("2026-11-20 10:00", "UTC")
        let before = try await fixture.fingerprint()
        let calls: [(String, @Sendable () async throws -> Void)] = [
            ("log", { _ = try await store.events.log(EventDraft(childID: bobsChild.id, payload: .diaper(.wet), start: now), as: alice.id) }),
            ("log same id", { _ = try await store.events.log(EventDraft(id: diaper.id, childID: bobsChild.id, payload: .diaper(.wet), start: diaper.start), as: alice.id) }),
            ("startSleep", { _ = try await store.events.startSleep(for: bobsChild.id, at: now, as: alice.id) }),
            ("endSleep", { _ = try await store.events.endSleep(for: bobsChild.id, at: now, as: alice.id) }),
            ("prepareBottle", { _ = try await store.events.prepareBottle(for: bobsChild.id, preparedMl: 90, at: now, as: alice.id) }),
            ("startFeeding", { _ = try await store.events.startFeeding(bottle.id, at: now.utc, as: alice.id) }),
            ("finishFeeding", { _ = try await store.events.finishFeeding(bottle.id, remainingMl: 0, at: now, as: alice.id) }),
            ("discard", { _ = try await store.events.discard(bottle.id, at: now, as: alice.id) }),
            ("activeBottles", { _ = try await store.events.activeBottles(for: bobsChild.id, as: alice.id) }),
            ("get", { _ = try await store.events.get(diaper.id, as: alice.id) }),
            ("update", { _ = try await store.events.update(diaper.id, with: EventChanges(payload: .diaper(.dirty)), expectedRevision: 1, as: alice.id) }),
            ("softDelete", { _ = try await store.events.softDelete(diaper.id, as: alice.id) }),
            ("restore", { _ = try await store.events.restore(deleted.id, as: alice.id) }),
            ("possibleDuplicates", { _ = try await store.events.possibleDuplicates(of: diaper.id, as: alice.id) }),
            ("timeline", { _ = try await store.events.timeline(for: bobsChild.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: alice.id) }),
            ("range", { _ = try await store.events.range(for: bobsChild.id, from: now.utc.addingTimeInterval(-21_600), to: now.utc, as: alice.id) }),
            ("dashboard", { _ = try await store.events.dashboard(for: bobsChild.id, as: alice.id) }),
            ("quickStats", { _ = try await store.events.quickStats(for: bobsChild.id, as: alice.id) }),
            ("exportCSV", { try await store.events.exportCSV(for: bobsChild.id, range: .allTime, as: alice.id) { _ in } }),
            ("wakeWindowSamples", { _ = try await store.events.wakeWindowSamples(for: bobsChild.id, as: alice.id) }),
            ("predictNextSleep", { _ = try await store.events.predictNextSleep(for: bobsChild.id, as: alice.id) }),
        ]
        await expectAllNotFound(calls)
        // Bob's events are in his feed; Alice's has none of them, even asking for his child.
        #expect(try await fixture.store.events.changes(for: bob.id, after: .start).events.isEmpty == false)
        let alicesPage = try await fixture.store.events.changes(for: alice.id, after: .start)
        #expect(alicesPage.children.allSatisfy { $0.id != bobsChild.id } && alicesPage.events.allSatisfy { $0.childID != bobsChild.id })
        let asked = try await fixture.store.events.changes(for: alice.id, child: bobsChild.id, after: .start)
        #expect(asked.events.isEmpty && asked.children.isEmpty && asked.caregivers.isEmpty && asked.notices.isEmpty)
        let export = TextBuffer()
        try await fixture.store.events.exportJSON(as: alice.id) { export.append($0) }
        #expect(!export.text.contains(bobsChild.id.uuidString) && !export.text.contains(diaper.id.uuidString))
        #expect(try await fixture.fingerprint() == before)
    }
}
