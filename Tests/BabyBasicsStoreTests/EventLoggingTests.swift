import BabyBasicsStore
import Foundation
import Postgres
import Testing

@Suite struct EventLoggingTests {
    @Test func theSameLogSentFiveTimesStoresOneRowAndDifferentContentConflicts() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let draft = EventDraft(childID: child.id, payload: .feeding(.breast(startedSide: .left, bothSides: true)), start: at("2026-11-20 08:00"), notes: "calm")
        var results: [Event] = []
        for _ in 0..<5 { results.append(try await fixture.store.events.log(draft, as: user.id)) }
        #expect(Set(results.map(\.id)).count == 1 && results.allSatisfy { $0 == results[0] })
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events") == 1)
        var changed = draft
        changed.notes = "fussy"
        await expectStoreError(.conflict(current: results[0])) { _ = try await fixture.store.events.log(changed, as: user.id) }
        // Concurrent retries of one id: still one row.
        let burst = EventDraft(childID: child.id, payload: .diaper(.wet), start: at("2026-11-20 09:00"))
        let store = fixture.store
        try await withThrowingTaskGroup(of: Event.self) { group in
            for _ in 0..<5 { group.addTask { try await store.events.log(burst, as: user.id) } }
            for try await event in group { #expect(event.id == burst.id) }
        }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events") == 2)
    }

    /// `record` says which call stored the event: of five concurrent sends of one id exactly
    /// one is `created`, and a later retry is not.
    @Test func recordSaysWhichCallStoredTheEvent() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let draft = EventDraft(childID: child.id, payload: .diaper(.both), start: at("2026-11-20 07:00"))
        let store = fixture.store
        let created = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<5 { group.addTask { try await store.events.record(draft, as: user.id).created } }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(created.filter { $0 }.count == 1)
        let again = try await store.events.record(draft, as: user.id)
        #expect(again.created == false)
        #expect(again.event.id == draft.id)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events") == 1)
    }

    @Test func badEventsAreRefusedNamingTheFieldAndWriteNothing() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "Europe/London")
        let before = try await fixture.fingerprint()
        let cases: [(EventDraft, StoreError)] = [
            (EventDraft(childID: child.id, payload: .sleep, start: at("2026-11-20 10:00", "Europe/London"), end: at("2026-11-20 09:00", "Europe/London")),
             .invalid(field: "end", reason: "must not be before the start")),
            (EventDraft(childID: child.id, payload: .sleep, start: at("2026-11-20 10:00", "Europe/London"), end: at("2026-11-21 10:01", "Europe/London")),
             .invalid(field: "end", reason: "an event lasts at most 24 hours")),
            (EventDraft(childID: child.id, payload: .feeding(.bottle(amountMl: 0, preparedMl: nil, remainingMl: nil, feedingStartedAt: nil)), start: at("2026-11-20 10:00", "Europe/London")),
             .invalid(field: "amountMl", reason: "must be more than 0 and at most 2000 mL")),
            (EventDraft(childID: child.id, payload: .feeding(.bottle(amountMl: nil, preparedMl: 100, remainingMl: 120, feedingStartedAt: nil)), start: at("2026-11-20 10:00", "Europe/London")),
             .invalid(field: "remainingMl", reason: "must be between 0 and the amount prepared")),
            (EventDraft(childID: child.id, payload: .note(category: "  "), start: at("2026-11-20 10:00", "Europe/London")),
             .invalid(field: "category", reason: "must not be blank")),
            (EventDraft(childID: child.id, payload: .diaper(.wet), start: EventTimestamp(utc: Date(), timeZone: "Mars/Olympus", offsetSeconds: 0)),
             .invalid(field: "start.timeZone", reason: "\"Mars/Olympus\" is not an IANA time zone")),
            // New York is -04:00 in July: +01:00 would shift every local display by five hours.
            (EventDraft(childID: child.id, payload: .diaper(.wet), start: EventTimestamp(utc: at("2026-07-14 08:00").utc, timeZone: "America/New_York", offsetSeconds: 3600)),
             .invalid(field: "start.offsetSeconds", reason: "is not start.timeZone's UTC offset at that instant")),
            (EventDraft(childID: child.id, payload: .sleep, start: at("2026-07-14 08:00"),
                        end: EventTimestamp(utc: at("2026-07-14 09:00").utc, timeZone: "America/New_York", offsetSeconds: -18000)),
             .invalid(field: "end.offsetSeconds", reason: "is not end.timeZone's UTC offset at that instant")),
        ]
        for (draft, expected) in cases {
            await expectStoreError(expected) { _ = try await fixture.store.events.log(draft, as: user.id) }
        }
        #expect(try await fixture.fingerprint() == before)
    }

    @Test func twentyConcurrentSleepStartsHaveOneWinnerAndNineteenSeeIt() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let store = fixture.store
        let outcomes = await withTaskGroup(of: Result<Event, any Error>.self) { group in
            for minute in 0..<20 {
                group.addTask {
                    do { return .success(try await store.events.startSleep(for: child.id, at: at("2026-11-20 20:\(10 + minute)"), as: user.id)) }
                    catch { return .failure(error) }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let winners = outcomes.compactMap { try? $0.get() }
        #expect(winners.count == 1)
        // Without a winner the rest cannot be checked (and must not crash the run).
        let winner = try #require(winners.first, "no start succeeded: \(outcomes)")
        for outcome in outcomes {
            if case .failure(let error) = outcome {
                #expect(error as? StoreError == .sleepAlreadyActive(existing: winner), "\(error)")
            }
        }
        let ended = try await store.events.endSleep(for: child.id, at: EventTimestamp(winner.start.utc.addingTimeInterval(80 * 60), in: TimeZone(identifier: "America/New_York")!), as: user.id)
        #expect(ended.summary == "Ended sleep (1h 20m)")
        await expectStoreError(.noActiveSleep) { _ = try await store.events.endSleep(for: child.id, at: at("2026-11-20 23:00"), as: user.id) }
        // An ended sleep does not block the next one.
        _ = try await store.events.startSleep(for: child.id, at: at("2026-11-20 23:30"), as: user.id)
    }

    @Test func bottlesThroughTheirStatesWithExpiryFromSettings() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let made = at("2026-11-20 08:00")
        let first = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: made, as: user.id)
        let second = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 90, at: at("2026-11-20 08:05"), as: user.id)
        var bottles = try await fixture.store.events.activeBottles(for: child.id, now: made.utc.addingTimeInterval(600), as: user.id)
        #expect(bottles.map(\.state) == [.prepared, .prepared])
        #expect(bottles.first?.expiresAt == made.utc.addingTimeInterval(120 * 60))

        let started = made.utc.addingTimeInterval(15 * 60)
        _ = try await fixture.store.events.startFeeding(first.id, at: started, as: user.id)
        await expectStoreError(.stateConflict(reason: "this bottle's feeding already started, or it is finished")) {
            _ = try await fixture.store.events.startFeeding(first.id, at: started, as: user.id)
        }
        do {
            _ = try await fixture.store.events.startFeeding(second.id, at: started, as: user.id)
            Issue.record("two bottle feedings in progress")
        } catch StoreError.feedingAlreadyActive(let existing) {
            #expect(existing.id == first.id)
        }
        bottles = try await fixture.store.events.activeBottles(for: child.id, now: started.addingTimeInterval(60), as: user.id)
        #expect(bottles.map(\.state) == [.feeding, .prepared])
        #expect(bottles.first?.expiresAt == started.addingTimeInterval(60 * 60))
        // Two hours and a bit after preparation, the untouched bottle has expired.
        bottles = try await fixture.store.events.activeBottles(for: child.id, now: made.utc.addingTimeInterval(126 * 60), as: user.id)
        #expect(bottles.map(\.state) == [.expired, .expired])

        let before = try await fixture.fingerprint()
        await expectStoreError(.invalid(field: "remainingMl", reason: "the feeding's amounts or sides are not valid (remaining must be between 0 and the amount prepared)")) {
            _ = try await fixture.store.events.finishFeeding(first.id, remainingMl: 130, at: at("2026-11-20 08:40"), as: user.id)
        }
        #expect(try await fixture.fingerprint() == before)
        let finished = try await fixture.store.events.finishFeeding(first.id, remainingMl: 20, at: at("2026-11-20 08:40"), as: user.id)
        #expect(finished.consumedMl == 100)
        let discarded = try await fixture.store.events.discard(second.id, at: at("2026-11-20 10:30"), as: user.id)
        #expect(FinishedBottle(event: discarded).consumedMl == 0)
        #expect(try await fixture.store.events.activeBottles(for: child.id, now: made.utc, as: user.id).isEmpty)

        // A longer window from the child's settings.
        var settings = try await fixture.store.children.get(child.id, as: user.id).settings
        settings.bottleExpiry.preparedMinutes = 1440
        _ = try await fixture.store.children.update(child.id, with: ChildChanges(settings: settings), as: user.id)
        let fridge = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 150, at: made, as: user.id)
        let status = try await fixture.store.events.activeBottles(for: child.id, now: made.utc.addingTimeInterval(5 * 3600), as: user.id)
        #expect(status.map(\.event.id) == [fridge.id] && status.first?.state == .prepared)
    }

    @Test func twoCaregiversEditingOneRevisionOneWinsOneSeesTheCurrentVersion() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family(zone: "America/New_York")
        let partner = try await fixture.user("Partner")
        try await fixture.join(partner, to: child, invitedBy: parent)
        let event = try await fixture.log(child, parent, .diaper(.wet), at("2026-11-20 08:00"))
        let store = fixture.store
        async let a = Result { try await store.events.update(event.id, with: EventChanges(payload: .diaper(.dirty)), expectedRevision: 1, as: parent.id) }
        async let b = Result { try await store.events.update(event.id, with: EventChanges(notes: .some("big one")), expectedRevision: 1, as: partner.id) }
        let outcomes = [await a, await b]
        let winners = outcomes.compactMap { try? $0.get() }
        #expect(winners.count == 1)
        let winner = try #require(winners.first)
        #expect(winner.revision == 2)
        for case .failure(let error) in outcomes {
            #expect(error as? StoreError == .conflict(current: winner), "\(error)")
        }
        // Times are adjustable; the type is not.
        let moved = try await store.events.update(event.id, with: EventChanges(start: at("2026-11-20 07:45")), expectedRevision: 2, as: partner.id)
        #expect(moved.start == at("2026-11-20 07:45") && moved.revision == 3)
        await expectStoreError(.invalid(field: "payload", reason: "cannot change a diaper into a sleep; delete it and log a new one")) {
            _ = try await store.events.update(event.id, with: EventChanges(payload: .sleep), expectedRevision: 3, as: parent.id)
        }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM event_history WHERE event_id = \(event.id)") == 2)
    }

    @Test func softDeleteRestoreWithinThirtyDaysAndPurge() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let event = try await fixture.log(child, user, .note(category: "health"), at("2026-11-20 08:00"), notes: "vitamin D")
        let deleted = try await fixture.store.events.softDelete(event.id, as: user.id)
        #expect(deleted.deletedBy == user.id && deleted.isDeleted)
        #expect(try await fixture.store.events.softDelete(event.id, as: user.id).revision == deleted.revision)
        #expect(try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: user.id).events.isEmpty)
        let restored = try await fixture.store.events.restore(event.id, as: user.id)
        #expect(!restored.isDeleted)
        _ = try await fixture.store.events.softDelete(event.id, as: user.id)
        try await fixture.admin.execute("UPDATE events SET deleted_at = now() - interval '31 days' WHERE id = \(event.id)")
        await expectStoreError(.stateConflict(reason: "the event was deleted more than 30 days ago and can no longer be restored")) {
            _ = try await fixture.store.events.restore(event.id, as: user.id)
        }
        #expect(try await fixture.store.events.purgeDeleted() == 1)
        await expectStoreError(.notFound) { _ = try await fixture.store.events.get(event.id, as: user.id) }
    }

    @Test func possibleDuplicatesAreSameChildAndTypeWithinFiveMinutes() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let target = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 08:00"))
        let close = try await fixture.log(child, user, .diaper(.both), at("2026-11-20 08:04"))
        let closer = try await fixture.log(child, user, .diaper(.dirty), at("2026-11-20 07:58"))
        _ = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 08:06"))
        _ = try await fixture.log(child, user, .note(category: "x"), at("2026-11-20 08:01"))
        let gone = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 08:01"))
        _ = try await fixture.store.events.softDelete(gone.id, as: user.id)
        #expect(try await fixture.store.events.possibleDuplicates(of: target.id, as: user.id).map(\.id) == [closer.id, close.id])
    }

    @Test func ouncesRoundToTheNearestHalf() {
        #expect(Volume.displayOunces(fromMilliliters: 120) == "4 oz")
        #expect(Volume.displayOunces(fromMilliliters: 75) == "2.5 oz")
        #expect(Volume.ounces(fromMilliliters: 0) == 0)
    }
}


@Suite struct ActiveEventLeakTests {
    /// The winner carried by `sleepAlreadyActive` is always the same child's sleep, whichever
    /// call hit the index (here a restore), never another family's.
    @Test func aRefusedRestoreCarriesTheSameChildsSleep() async throws {
        let fixture = try await StoreFixture.make()
        let (bob, bobsChild) = try await fixture.family(zone: "UTC")
        _ = try await fixture.store.events.startSleep(for: bobsChild.id, at: at("2026-11-20 08:00", "UTC"), as: bob.id)
        let (alice, alicesChild) = try await fixture.family(zone: "UTC")
        let old = try await fixture.store.events.startSleep(for: alicesChild.id, at: at("2026-11-20 06:00", "UTC"), as: alice.id)
        _ = try await fixture.store.events.softDelete(old.id, as: alice.id)
        let running = try await fixture.store.events.startSleep(for: alicesChild.id, at: at("2026-11-20 09:00", "UTC"), as: alice.id)
        await expectStoreError(.sleepAlreadyActive(existing: running)) { _ = try await fixture.store.events.restore(old.id, as: alice.id) }
    }
}
