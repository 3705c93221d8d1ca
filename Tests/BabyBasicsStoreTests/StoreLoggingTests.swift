import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Logging
import Postgres
import Testing

/// Every repository call logs through the pool's logger, down to `trace`, and no record ever
/// holds a value a family gave (names, emails, notes, ids, invite codes, credentials).
@Suite struct StoreLoggingTests {
    @Test func noRepositoryCallEverLogsAValue() async throws {
        let capture = LogCapture()
        let fixture = try await StoreFixture.make { configuration in
            configuration.logger = capture.logger(level: .trace)
            configuration.slowQueryThreshold = .zero // every statement also logs as slow, at warning
        }
        let store = fixture.store
        // The push channel listens on a connection of its own (it logs its LISTEN too).
        let listening = Task { for await _ in store.childChanges() {} }
        defer { listening.cancel() }
        let tag = "Zq7\(UUID().uuidString.prefix(6))"
        var secrets: [String] = [tag]
        func remember(_ ids: UUID...) { secrets += ids.map(\.uuidString) }

        // Users
        let parent = try await store.users.create(
            email: "parent-\(tag)@example.com", displayName: "Parent \(tag)", passwordHash: "hash-\(tag)", appleUserID: "apple-\(tag)")
        let partner = try await store.users.create(email: "partner-\(tag)@example.com", displayName: "Partner \(tag)")
        let nanny = try await store.users.create(email: "nanny-\(tag)@example.com", displayName: "Nanny \(tag)")
        remember(parent.id, partner.id, nanny.id)
        _ = try await store.users.get(parent.id, as: parent.id)
        _ = try await store.users.get(email: "parent-\(tag)@example.com", as: parent.id)
        _ = try await store.users.credentials(email: "parent-\(tag)@example.com")
        _ = try await store.users.rename(to: "Renamed \(tag)", as: parent.id)

        // Children, invites, caregivers
        var settings = ChildSettings()
        settings.timezone = "America/New_York"
        let child = try await store.children.create(ChildDraft(name: "Baby \(tag)", birthDate: PostgresDate(year: 2026, month: 3, day: 8), settings: settings), as: parent.id)
        let sibling = try await store.children.create(ChildDraft(name: "Sibling \(tag)", birthDate: PostgresDate(year: 2024, month: 1, day: 2)), as: parent.id)
        remember(child.id, sibling.id)
        _ = try await store.children.list(as: parent.id)
        _ = try await store.children.get(child.id, as: parent.id)
        _ = try await store.children.update(child.id, with: ChildChanges(name: "Baby Renamed \(tag)"), as: parent.id)
        let invite = try await store.invites.create(for: child.id, as: parent.id)
        let second = try await store.invites.create(for: child.id, as: parent.id)
        let third = try await store.invites.create(for: child.id, as: parent.id)
        secrets += [invite.code, second.code, third.code]
        _ = try await store.invites.pending(for: child.id, as: parent.id)
        _ = try await store.invites.redeem(invite.code, as: partner.id)
        _ = try await store.invites.redeem(second.code, as: nanny.id)
        try await store.invites.revoke(third.code, as: parent.id)
        _ = try await store.caregivers.list(of: child.id, as: parent.id)
        try await store.caregivers.remove(nanny.id, from: child.id, as: parent.id)
        try await store.caregivers.leave(child.id, as: partner.id)

        // Events: every way in, every way of changing one
        let zone = TimeZone(identifier: "America/New_York") ?? .gmt
        let now = Date()
        func stamp(_ minutesAgo: Double) -> EventTimestamp { EventTimestamp(now.addingTimeInterval(-minutesAgo * 60), in: zone) }
        let diaper = try await store.events.log(EventDraft(childID: child.id, payload: .diaper(.both), start: stamp(300), notes: "note \(tag)"), as: parent.id)
        let note = try await store.events.log(EventDraft(childID: child.id, payload: .note(category: "category-\(tag)"), start: stamp(290)), as: parent.id)
        let breast = try await store.events.log(EventDraft(
            childID: child.id, payload: .feeding(.breast(startedSide: .left, bothSides: true)), start: stamp(280), end: stamp(260)), as: parent.id)
        remember(diaper.id, note.id, breast.id)
        let sleep = try await store.events.startSleep(for: child.id, at: stamp(240), notes: "sleep \(tag)", as: parent.id)
        remember(sleep.id)
        _ = try await store.events.endSleep(for: child.id, at: stamp(180), as: parent.id)
        let bottle = try await store.events.prepareBottle(for: child.id, preparedMl: 120, at: stamp(120), notes: "bottle \(tag)", as: parent.id)
        remember(bottle.id)
        let refrigerated = try await store.events.setRefrigerated(bottle.id, as: parent.id)
        _ = try await store.events.startFeeding(bottle.id, at: now.addingTimeInterval(-110 * 60), expectedRevision: refrigerated.revision, as: parent.id)
        _ = try await store.events.finishFeeding(bottle.id, remainingMl: 20, at: stamp(100), as: parent.id)
        let spare = try await store.events.prepareBottle(for: child.id, preparedMl: 90, at: stamp(60), as: parent.id)
        remember(spare.id)
        _ = try await store.events.activeBottles(for: child.id, as: parent.id)
        _ = try await store.events.discard(spare.id, at: stamp(50), as: parent.id)
        let updated = try await store.events.update(diaper.id, with: EventChanges(notes: .some("changed \(tag)")), expectedRevision: diaper.revision, as: parent.id)
        _ = try await store.events.get(diaper.id, as: parent.id)
        let deleted = try await store.events.softDelete(note.id, as: parent.id)
        _ = try await store.events.restore(note.id, expectedRevision: deleted.revision, as: parent.id)
        _ = try await store.events.possibleDuplicates(of: updated.id, as: parent.id)
        _ = try await store.events.softDelete(note.id, as: parent.id)
        _ = try await store.events.purgeDeleted()

        // Reads
        let today = PostgresDate(year: Calendar.current.component(.year, from: now), month: Calendar.current.component(.month, from: now), day: Calendar.current.component(.day, from: now))
        _ = try await store.events.timeline(for: child.id, day: today, as: parent.id)
        _ = try await store.events.range(for: child.id, from: now.addingTimeInterval(-86_400), to: now, as: parent.id)
        _ = try await store.events.dashboard(for: child.id, as: parent.id)
        _ = try await store.events.quickStats(for: child.id, as: parent.id)
        _ = try await store.events.wakeWindowSamples(for: child.id, as: parent.id)
        _ = try await store.events.predictNextSleep(for: child.id, as: parent.id)
        _ = try await store.events.predictionHitRate(for: child.id, as: parent.id)
        let page = try await store.events.changes(for: parent.id, after: .start)
        _ = try await store.events.changes(for: parent.id, child: child.id, after: page.next)
        try await store.events.exportCSV(for: child.id, range: .allTime, as: parent.id) { _ in }
        try await store.events.exportJSON(as: parent.id) { _ in }

        // A refused call logs too, and still no value.
        await #expect(throws: StoreError.self) {
            _ = try await store.users.create(email: "parent-\(tag)@example.com", displayName: "Again \(tag)")
        }

        // Endings
        try await store.children.transferPrimary(of: sibling.id, to: parent.id, as: parent.id)
        try await store.children.delete(sibling.id, as: parent.id)
        try await store.children.delete(child.id, as: parent.id)
        try await store.users.deleteAccount(as: partner.id)

        try await waitUntil { capture.records.contains { $0.metadata["db.query.text"]?.contains("LISTEN") == true } }
        let records = capture.records
        // Each call reached the log: a statement record per call at least, at debug and as "slow" at warning.
        #expect(records.filter { $0.message == "slow statement" }.count >= 50)
        #expect(records.contains { $0.message == "statement failed" && $0.metadata["error.constraint"] != nil })
        for record in records {
            // Case-blind: the server folds some values (a unique index on lower(email)).
            let line = record.description.lowercased()
            for secret in secrets where line.contains(secret.lowercased()) {
                Issue.record("a log record holds a value (\(secret)): \(line)")
            }
        }
    }
}
