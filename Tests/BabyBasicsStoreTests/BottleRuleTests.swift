import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// "Feeding started" is one rule: the partial unique index's (`feeding_started_at` present
/// and not JSON null). A bottle a DBA wrote with `"feeding_started_at": null` has not started.
@Suite struct BottleRuleTests {
    @Test func aJSONNullStartIsNotStarted() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let handWritten = UUID()
        try await fixture.admin.execute("""
            INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            VALUES (\(handWritten), \(child.id), \(alice.id), 'feeding', '2026-11-20 08:00+00', 'UTC', 0,
                    '{"kind":"bottle","amount_prepared_ml":120,"feeding_started_at":null}')
            """)
        let other = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 90, at: at("2026-11-20 08:10", "UTC"), as: alice.id)
        let feeding = try await fixture.store.events.startFeeding(other.id, at: at("2026-11-20 08:15", "UTC").utc, as: alice.id)
        // The index allows one feeding in progress; the one in progress is the other bottle.
        await expectStoreError(.feedingAlreadyActive(existing: feeding)) {
            _ = try await fixture.store.events.startFeeding(handWritten, at: at("2026-11-20 08:20", "UTC").utc, as: alice.id)
        }
        _ = try await fixture.store.events.finishFeeding(other.id, remainingMl: 0, at: at("2026-11-20 08:30", "UTC"), as: alice.id)
        let started = try await fixture.store.events.startFeeding(handWritten, at: at("2026-11-20 08:35", "UTC").utc, as: alice.id)
        guard case .feeding(.bottle(_, _, _, let startedAt?, _)) = started.payload else {
            Issue.record("the hand-written bottle did not start: \(started.payload)")
            return
        }
        #expect(startedAt == at("2026-11-20 08:35", "UTC").utc)
    }
}

/// A bottle counts as a feed when the baby feeds: from its first sip, on the day of that sip,
/// with what was drunk once known; a bottle nobody drank is not a feed.
@Suite struct BottleFeedTests {
    @Test func aBottleIsAFeedFromItsFirstSipOnTheDayOfThatSip() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "America/New_York")
        try await fixture.log(child, alice, .feeding(.breast(startedSide: .left, bothSides: false)), at("2026-11-19 21:00"))
        // Made at 23:55, first sip at 00:10: today's feed, not yesterday's.
        let late = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-19 23:55"), as: alice.id)
        _ = try await fixture.store.events.startFeeding(late.id, at: at("2026-11-20 00:10").utc, as: alice.id)
        var dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 00:20").utc, as: alice.id)
        #expect(dashboard.today.feeds == 1)
        #expect(dashboard.lastFeeding?.id == late.id && dashboard.lastFeeding?.start == at("2026-11-20 00:10"))
        #expect(dashboard.lastFeeding?.amountMl == nil, "not the 120 mL prepared: nobody knows yet what was drunk")
        #expect(try await fixture.store.events.quickStats(for: child.id, now: at("2026-11-20 00:20").utc, as: alice.id).lastFeedAmountMl == nil)
        _ = try await fixture.store.events.finishFeeding(late.id, remainingMl: 30, at: at("2026-11-20 00:30"), as: alice.id)
        dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 00:40").utc, as: alice.id)
        #expect(dashboard.lastFeeding?.amountMl == 90)

        // Made, never drunk, thrown away: not a feed, and the last feed stays the one before.
        let unfed = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 03:00"), as: alice.id)
        _ = try await fixture.store.events.discard(unfed.id, at: at("2026-11-20 05:30"), as: alice.id)
        _ = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 90, at: at("2026-11-20 06:00"), as: alice.id)
        dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 06:30").utc, as: alice.id)
        #expect(dashboard.today.feeds == 1 && dashboard.lastFeeding?.id == late.id, "\(dashboard.today)")
    }

    /// PRD §5: whichever comes first, 2 hours from preparation and 1 hour from the first sip.
    @Test func expiryIsWhicheverComesFirst() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let early = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 08:00", "UTC"), as: alice.id)
        _ = try await fixture.store.events.startFeeding(early.id, at: at("2026-11-20 08:30", "UTC").utc, as: alice.id)
        var bottles = try await fixture.store.events.activeBottles(for: child.id, now: at("2026-11-20 09:00", "UTC").utc, as: alice.id)
        #expect(bottles.map(\.expiresAt) == [at("2026-11-20 09:30", "UTC").utc], "one hour from the first sip")
        _ = try await fixture.store.events.finishFeeding(early.id, remainingMl: 0, at: at("2026-11-20 09:10", "UTC"), as: alice.id)

        let late = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 10:00", "UTC"), as: alice.id)
        _ = try await fixture.store.events.startFeeding(late.id, at: at("2026-11-20 11:55", "UTC").utc, as: alice.id)
        bottles = try await fixture.store.events.activeBottles(for: child.id, now: at("2026-11-20 12:01", "UTC").utc, as: alice.id)
        #expect(bottles.map(\.expiresAt) == [at("2026-11-20 12:00", "UTC").utc], "two hours from preparation, not 12:55")
        #expect(bottles.map(\.state) == [.expired])
    }
}

/// Refrigerated bottles keep 24 hours (PRD §5), and a first sip lies within the bottle's life.
@Suite struct BottleLifeTests {
    @Test func aRefrigeratedBottleKeepsADayAndTheFirstSipStillCounts() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let bottle = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 150, at: at("2026-11-20 08:00", "UTC"), as: alice.id)
        let cold = try await fixture.store.events.setRefrigerated(bottle.id, as: alice.id)
        guard case .feeding(.bottle(_, _, _, _, let refrigerated)) = cold.payload else { Issue.record("\(cold.payload)"); return }
        #expect(refrigerated)
        var status = try await fixture.store.events.activeBottles(for: child.id, now: at("2026-11-20 12:00", "UTC").utc, as: alice.id)
        #expect(status.map(\.expiresAt) == [at("2026-11-21 08:00", "UTC").utc] && status.map(\.state) == [.prepared])
        _ = try await fixture.store.events.startFeeding(bottle.id, at: at("2026-11-20 15:00", "UTC").utc, as: alice.id)
        status = try await fixture.store.events.activeBottles(for: child.id, now: at("2026-11-20 15:30", "UTC").utc, as: alice.id)
        #expect(status.map(\.expiresAt) == [at("2026-11-20 16:00", "UTC").utc], "an hour from the first sip comes first")
        _ = try await fixture.store.events.setRefrigerated(bottle.id, false, as: alice.id)
        status = try await fixture.store.events.activeBottles(for: child.id, now: at("2026-11-20 15:30", "UTC").utc, as: alice.id)
        #expect(status.map(\.expiresAt) == [at("2026-11-20 10:00", "UTC").utc] && status.map(\.state) == [.expired])
    }

    @Test func aFirstSipLiesWithinTheBottlesLife() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        let bottle = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 150, at: at("2026-11-20 08:00", "UTC"), as: alice.id)
        let before = try await fixture.fingerprint()
        let refusal = StoreError.invalid(field: "at", reason: "the first sip must be after the bottle was made (at most 24 hours after) and before it was finished")
        await expectStoreError(refusal) { _ = try await fixture.store.events.startFeeding(bottle.id, at: at("2026-11-20 07:59", "UTC").utc, as: alice.id) }
        await expectStoreError(refusal) { _ = try await fixture.store.events.startFeeding(bottle.id, at: at("2026-11-21 08:01", "UTC").utc, as: alice.id) }
        await expectStoreError(.invalid(field: "at", reason: "the first sip cannot be in the future")) {
            _ = try await fixture.store.events.startFeeding(bottle.id, at: Date().addingTimeInterval(3600), as: alice.id)
        }
        #expect(try await fixture.fingerprint() == before)
        _ = try await fixture.store.events.startFeeding(bottle.id, at: at("2026-11-21 08:00", "UTC").utc, as: alice.id)

        // The database's own rules, for a DBA's hand: a boolean flag, a first sip in the bottle's life.
        await expectDatabaseRefusal(fixture, "events_feeding_data_valid",
            "UPDATE events SET data = data || '{\"refrigerated\": \"yes\"}' WHERE id = \(bottle.id)")
        await expectDatabaseRefusal(fixture, "events_bottle_first_sip_within_life",
            "UPDATE events SET data = data || '{\"feeding_started_at\": \"2026-11-19T08:00:00Z\"}' WHERE id = \(bottle.id)")
        try await fixture.admin.execute("UPDATE events SET data = data || '{\"refrigerated\": true}' WHERE id = \(bottle.id)")
    }

    private func expectDatabaseRefusal(_ fixture: StoreFixture, _ constraint: String, _ sql: SQL) async {
        let error = await #expect(throws: PostgresError.self) { try await fixture.admin.execute(sql) }
        #expect(error?.sqlState == "23514" && error?.declaredConstraint == constraint, "\(String(describing: error))")
    }
}
