import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// A timer left running for more than a day (a forgotten sleep, a bottle nobody finished) can
/// always be closed, and every read treats it as the running timer it is, whatever its age.
/// The database allows a running event of any age; only its end is limited (24 hours after
/// its start).
@Suite struct ForgottenTimerTests {
    @Test func aForgottenSleepIsReadAsRunningAndEndsAtTheTimeTheCallerChooses() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "America/New_York")
        let sleep = try await fixture.store.events.startSleep(for: child.id, at: at("2026-11-18 20:00"), as: alice.id)
        let now = at("2026-11-20 11:00").utc          // 39 hours later

        // Read as running, like any running sleep: the dashboard, today's total, the timeline.
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: now, as: alice.id)
        #expect(dashboard.activeSleep?.id == sleep.id)
        #expect(dashboard.today.sleepMinutes == 11 * 60, "today so far: \(dashboard.today)")
        let today = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), now: now, as: alice.id)
        #expect(today.events.map(\.id) == [sleep.id])

        // Ending it now is 39 hours: a typed answer carrying the start, and nothing written.
        await expectStoreError(.timerTooLong(startedAt: sleep.start)) {
            _ = try await fixture.store.events.endSleep(for: child.id, at: at("2026-11-20 11:00"), as: alice.id)
        }
        #expect(try await fixture.store.events.get(sleep.id, as: alice.id) == sleep)
        // "When did the baby wake up?" — at 06:30 the next morning.
        let ended = try await fixture.store.events.endSleep(for: child.id, at: at("2026-11-19 06:30"), as: alice.id)
        #expect(ended.minutes == 10 * 60 + 30)
        // The next sleep can start.
        _ = try await fixture.store.events.startSleep(for: child.id, at: at("2026-11-20 11:05"), as: alice.id)
    }

    @Test func aForgottenBottleCanAlwaysBeDiscardedAndFinishingItLateSaysWhen() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "America/New_York")
        let bottle = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-18 08:00"), as: alice.id)
        await expectStoreError(.timerTooLong(startedAt: bottle.start)) {
            _ = try await fixture.store.events.finishFeeding(bottle.id, remainingMl: 30, at: at("2026-11-20 09:00"), as: alice.id)
        }
        let discarded = try await fixture.store.events.discard(bottle.id, at: at("2026-11-20 09:00"), as: alice.id)
        #expect(discarded.end?.utc == at("2026-11-19 08:00").utc, "it ends 24 hours after it was made, at most")
        #expect(discarded.end?.offsetSeconds == -18000)
    }
}
