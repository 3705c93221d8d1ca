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
        guard case .feeding(.bottle(_, _, _, let startedAt?)) = started.payload else {
            Issue.record("the hand-written bottle did not start: \(started.payload)")
            return
        }
        #expect(startedAt == at("2026-11-20 08:35", "UTC").utc)
    }
}
