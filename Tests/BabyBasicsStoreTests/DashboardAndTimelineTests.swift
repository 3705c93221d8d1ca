@testable import BabyBasicsStore
import Foundation
import Postgres
import Testing

@Suite struct DashboardTests {
    @Test func anEmptyChild() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 12:00").utc, as: user.id)
        #expect(dashboard.lastFeeding == nil && dashboard.lastDiaper == nil && dashboard.lastSleep == nil && dashboard.activeSleep == nil)
        #expect(dashboard.suggestedSide == nil)
        #expect(dashboard.today.summary == "0 feeds · 0 pee · 0 poop" && dashboard.today.sleepMinutes == 0 && dashboard.today.notes == 0)
        let stats = try await fixture.store.events.quickStats(for: child.id, now: at("2026-11-20 12:00").utc, as: user.id)
        #expect(stats.lastDiaperAt == nil && stats.lastDiaperContents == nil && stats.lastFeedAt == nil)
    }

    @Test func theSeedCaseAndEveryCard() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        try await fixture.log(child, user, .feeding(.breast(startedSide: .left, bothSides: false)), at("2026-11-20 06:00"))
        try await fixture.log(child, user, .feeding(.bottle(amountMl: 120, preparedMl: nil, remainingMl: nil, feedingStartedAt: nil)), at("2026-11-20 08:00"))
        try await fixture.log(child, user, .feeding(.breast(startedSide: .right, bothSides: true)), at("2026-11-20 10:00"))
        try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 06:30"))
        try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 07:30"))
        try await fixture.log(child, user, .diaper(.both), at("2026-11-20 09:30"))
        try await fixture.log(child, user, .note(category: "health"), at("2026-11-20 09:45"), notes: "Vitamin D")
        // Yesterday's events do not count today.
        try await fixture.log(child, user, .diaper(.dirty), at("2026-11-19 22:00"))
        // A sleep across midnight: only today's 90 minutes count, and it is the last sleep.
        try await fixture.log(child, user, .sleep, at("2026-11-19 23:30"), end: at("2026-11-20 01:30"))
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 11:00").utc, as: user.id)
        #expect(dashboard.today.summary == "3 feeds · 3 pee · 1 poop")
        #expect(dashboard.today.notes == 1 && dashboard.today.sleepMinutes == 90)
        #expect(dashboard.lastFeeding?.sideIndicator == "R+L")
        #expect(dashboard.suggestedSide == .left)
        #expect(dashboard.lastDiaper?.contents == .both)
        #expect(dashboard.lastSleep?.end == at("2026-11-20 01:30") && dashboard.lastSleep?.minutes == 120)
        #expect(dashboard.activeSleep == nil)
        let stats = try await fixture.store.events.quickStats(for: child.id, now: at("2026-11-20 11:00").utc, as: user.id)
        #expect(stats.awakeMinutes == 570 && stats.sleepingMinutes == nil && stats.lastSleepMinutes == 120)
        #expect(stats.lastDiaperAt == at("2026-11-20 09:30").utc && stats.lastDiaperContents == .both, "PRD: last diaper (time + type)")
    }

    @Test(arguments: [
        (BreastSide.left, false, "L", BreastSide.right), (.right, false, "R", .left), (.left, true, "L+R", .right), (.right, true, "R+L", .left),
    ])
    func sideIndicatorAndSuggestedSide(_ side: BreastSide, _ both: Bool, _ indicator: String, _ suggested: BreastSide) async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        try await fixture.log(child, user, .feeding(.breast(startedSide: side, bothSides: both)), at("2026-11-20 06:00"))
        var dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 07:00").utc, as: user.id)
        #expect(dashboard.lastFeeding?.sideIndicator == indicator)
        #expect(dashboard.suggestedSide == suggested)
        // A later bottle: no indicator, and the suggestion still follows the last breast feeding.
        try await fixture.log(child, user, .feeding(.bottle(amountMl: 90, preparedMl: nil, remainingMl: nil, feedingStartedAt: nil)), at("2026-11-20 07:30"))
        dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 08:00").utc, as: user.id)
        #expect(dashboard.lastFeeding?.sideIndicator == nil && dashboard.lastFeeding?.amountMl == 90)
        #expect(dashboard.suggestedSide == suggested)
    }

    /// A day that starts in a DST gap: PostgreSQL reads the missing local time with the offset
    /// before the gap, so the day starts that long after the gap; until then it is still
    /// the day before, never a "today" that starts in the future with every count at 0.
    @Test(arguments: [
        // zone, day start, a diaper before the gap, "now" after the gap but before the day starts, the day's start, after it
        ("America/New_York", 2, 30, "2026-03-08 01:00", "2026-03-08 03:10", "2026-03-08 03:30", "2026-03-08 03:45"),
        ("Australia/Lord_Howe", 2, 15, "2026-10-04 01:00", "2026-10-04 02:40", "2026-10-04 02:45", "2026-10-04 02:50"),
        // Midnight did not exist in São Paulo on 4 Nov 2018 (00:00 → 01:00): the day starts at 01:00.
        ("America/Sao_Paulo", 0, 0, "2018-11-03 23:30", "2018-11-04 00:59", "2018-11-04 01:00", "2018-11-04 01:10"),
    ])
    func aDayThatStartsInADSTGap(_ zone: String, _ hour: Int, _ minute: Int, _ before: String, _ early: String, _ start: String, _ later: String) async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: zone, dayStart: PostgresTime(hour: hour, minute: minute))
        try await fixture.log(child, user, .diaper(.wet), at(before, zone))
        if zone != "America/Sao_Paulo" {
            // Between the gap and the day's start: still yesterday, which holds the diaper.
            let dashboard = try await fixture.store.events.dashboard(for: child.id, now: at(early, zone).utc, as: user.id)
            #expect(dashboard.today.from <= at(early, zone).utc && dashboard.today.pee == 1, "\(zone): \(dashboard.today)")
            #expect(dashboard.today.to == at(start, zone).utc)
        }
        let next = try await fixture.store.events.dashboard(for: child.id, now: at(later, zone).utc, as: user.id)
        #expect(next.today.from == at(start, zone).utc && next.today.pee == 0, "\(zone): \(next.today)")
    }

    /// Two caregivers logging the same nap (or overlapping ones) count the time once: the
    /// day's sleep is the union of its sleeps, never more than the day.
    @Test func overlappingSleepsCountOnce() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        try await fixture.log(child, user, .sleep, at("2026-11-20 08:00"), end: at("2026-11-20 10:00"))
        try await fixture.log(child, user, .sleep, at("2026-11-20 09:00"), end: at("2026-11-20 11:00"))
        try await fixture.log(child, user, .sleep, at("2026-11-20 09:30"), end: at("2026-11-20 09:45"))
        try await fixture.log(child, user, .sleep, at("2026-11-20 13:00"), end: at("2026-11-20 13:30"))
        var dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 14:00").utc, as: user.id)
        #expect(dashboard.today.sleepMinutes == 180 + 30)
        // Sleeps over the whole day, twice over, and across both of its edges: 24 hours at most.
        try await fixture.log(child, user, .sleep, at("2026-11-19 20:00"), end: at("2026-11-20 12:30"))
        try await fixture.log(child, user, .sleep, at("2026-11-20 12:00"), end: at("2026-11-21 06:00"))
        dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 23:59").utc, as: user.id)
        #expect(dashboard.today.sleepMinutes == 1440, "\(dashboard.today)")
    }

    @Test func anActiveSleepCountsUpToNow() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let sleep = try await fixture.store.events.startSleep(for: child.id, at: at("2026-11-20 10:15"), as: user.id)
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("2026-11-20 11:00").utc, as: user.id)
        #expect(dashboard.activeSleep == Dashboard.ActiveSleep(id: sleep.id, start: sleep.start))
        #expect(dashboard.today.sleepMinutes == 45)
        let stats = try await fixture.store.events.quickStats(for: child.id, now: at("2026-11-20 11:00").utc, as: user.id)
        #expect(stats.sleepingMinutes == 45 && stats.awakeMinutes == nil)
    }
}

@Suite struct TimelineTests {
    /// One definition: a DBA's `timeline_events()` in psql and the app's timeline are the same
    /// rows in the same order (a forgotten running sleep, an ended sleep across the day's
    /// start, an instant, a bottle).
    @Test func theDBAsTimelineIsTheApps() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "Europe/London")
        try await fixture.log(child, user, .sleep, at("2026-11-19 22:00", "Europe/London"), end: at("2026-11-20 06:00", "Europe/London"))
        try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 07:00", "Europe/London"))
        _ = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 08:00", "Europe/London"), as: user.id)
        let forgotten = try await fixture.store.events.startSleep(for: child.id, at: at("2026-11-18 12:00", "Europe/London"), as: user.id)
        let now = at("2026-11-20 12:00", "Europe/London").utc
        let app = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), now: now, as: user.id)
        let rows = try await dbaIDs(fixture, "SELECT id FROM timeline_events(\(child.id), \(app.from), \(app.to), \(now))",
                                    psql: "SELECT id FROM timeline_events(:'child', :'from', :'to', :'now')",
                                    ["child": child.id.uuidString, "from": psqlInstant(app.from), "to": psqlInstant(app.to), "now": psqlInstant(now)])
        #expect(rows == app.events.map(\.id) && rows.count == 4 && rows.last == forgotten.id, "\(rows)")
    }

    /// A day's length and which of the events placed around its edges belong to it.
    @Test(arguments: [
        ("America/New_York", "2026-03-08", 23), ("America/New_York", "2026-11-01", 25),
        ("Europe/London", "2026-03-29", 23), ("Europe/London", "2026-10-25", 25),
        ("Australia/Adelaide", "2026-10-04", 23), ("Australia/Adelaide", "2026-04-05", 25),
        ("Australia/Adelaide", "2026-06-10", 24),
    ])
    func daysAcrossDSTSwitches(_ zone: String, _ day: String, _ hours: Int) async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: zone)
        let parts = day.split(separator: "-").compactMap { Int($0) }
        let date = PostgresDate(year: parts[0], month: parts[1], day: parts[2])
        let next = date.adding(days: 1)
        let previous = date.adding(days: -1)
        let inside1 = try await fixture.log(child, user, .diaper(.wet), at("\(day) 00:00", zone))
        let inside2 = try await fixture.log(child, user, .diaper(.dirty), at("\(day) 12:00", zone))
        let inside3 = try await fixture.log(child, user, .diaper(.both), at("\(day) 23:59", zone))
        _ = try await fixture.log(child, user, .diaper(.wet), at("\(previous) 23:59", zone))
        _ = try await fixture.log(child, user, .diaper(.wet), at("\(next) 00:00", zone))
        let timeline = try await fixture.store.events.timeline(for: child.id, day: date, now: at("\(next) 12:00", zone).utc, as: user.id)
        #expect(timeline.to.timeIntervalSince(timeline.from) == TimeInterval(hours * 3600), "\(zone) \(day)")
        #expect(timeline.events.map(\.id) == [inside3.id, inside2.id, inside1.id])
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: at("\(day) 23:59", zone).utc.addingTimeInterval(30), as: user.id)
        #expect(dashboard.today.summary == "0 feeds · 2 pee · 2 poop")
        #expect(dashboard.today.to.timeIntervalSince(dashboard.today.from) == TimeInterval(hours * 3600))
    }

    @Test func aDayStartingAt6AMASleepAcrossMidnightAndAnActiveSleep() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "Europe/London", dayStart: PostgresTime(hour: 6, minute: 0))
        let zone = "Europe/London"
        let early = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 05:59", zone))
        let onTime = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 06:00", zone))
        let night = try await fixture.log(child, user, .sleep, at("2026-11-20 23:00", zone), end: at("2026-11-21 02:00", zone))
        let day20 = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: user.id)
        let day19 = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 19), as: user.id)
        #expect(day20.events.map(\.id) == [night.id, onTime.id])
        #expect(day19.events.map(\.id) == [early.id])
        #expect(day20.from == at("2026-11-20 06:00", zone).utc && day20.to == at("2026-11-21 06:00", zone).utc)

        // With a midnight start, the 23:00-02:00 sleep is on both calendar days.
        var settings = try await fixture.store.children.get(child.id, as: user.id).settings
        settings.dayStartTime = PostgresTime(hour: 0, minute: 0)
        _ = try await fixture.store.children.update(child.id, with: ChildChanges(settings: settings), as: user.id)
        let on20 = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: user.id)
        let on21 = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 21), as: user.id)
        #expect(on20.events.contains { $0.id == night.id } && on21.events.contains { $0.id == night.id })

        // An active sleep started last evening runs until now, so it is on today's timeline too.
        let active = try await fixture.store.events.startSleep(for: child.id, at: at("2026-11-21 21:00", zone), as: user.id)
        let now = at("2026-11-22 01:00", zone).utc
        let today = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 22), now: now, as: user.id)
        #expect(today.events.map(\.id) == [active.id])
        let window = try await fixture.store.events.range(for: child.id, from: now.addingTimeInterval(-6 * 3600), to: now.addingTimeInterval(3 * 3600), now: now, as: user.id)
        #expect(window.events.map(\.id) == [active.id])
    }

    @Test func aThousandEventsInOneDay() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        try await fixture.admin.execute("""
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            SELECT \(child.id), \(user.id), 'diaper', timestamptz '2026-11-20 00:00+00' + n * interval '1 minute', 'UTC', 0, '{"contents":"wet"}'
            FROM generate_series(0, 1199) AS n
            """)
        let timeline = try await fixture.store.events.timeline(for: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), as: user.id)
        #expect(timeline.events.count == 1200)
        #expect(zip(timeline.events, timeline.events.dropFirst()).allSatisfy { $0.start.utc > $1.start.utc })
    }

    /// The app's own statements, over a history of every event type (breast and bottle
    /// feedings, prepared bottles, diapers, ended sleeps, notes): index scans, no Seq Scan.
    @Test func theTimelineQueryUsesItsIndex() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        try await fixture.admin.execute("""
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, end_time, end_tz, end_offset_seconds, data)
            SELECT \(child.id), \(user.id), (ARRAY['feeding', 'diaper', 'sleep', 'note', 'feeding', 'feeding'])[n % 6 + 1],
                   t, 'UTC', 0,
                   CASE WHEN n % 6 IN (2, 5) THEN t + interval '30 minutes' END, CASE WHEN n % 6 IN (2, 5) THEN 'UTC' END,
                   CASE WHEN n % 6 IN (2, 5) THEN 0 END,
                   (ARRAY['{"kind":"breast","started_side":"left","both_sides":true}', '{"contents":"wet"}', '{}', '{"category":"health"}',
                          '{"kind":"bottle","amount_ml":90}',
                          '{"kind":"bottle","amount_prepared_ml":120,"amount_remaining_ml":20,"feeding_started_at":"' || to_char(t + interval '5 minutes', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || '"}'])[n % 6 + 1]::jsonb
            FROM generate_series(0, 30000) AS n, LATERAL (SELECT timestamptz '2025-01-01 00:00+00' + n * interval '37 minutes' AS t) AS s
            """)
        try await fixture.admin.execute("ANALYZE events")
        let now = Date(timeIntervalSince1970: 1_737_000_000)
        let from = now.addingTimeInterval(-6 * 3600)
        let to = now.addingTimeInterval(3 * 3600)
        let timeline = EventRepository.overlapping(child: child.id, from: "\(from)::timestamptz", to: "\(to)::timestamptz", now: now)
        let plan = try await fixture.admin.query("EXPLAIN \(timeline)").decodeColumn(String.self).joined(separator: "\n")
        #expect(plan.contains("idx_events_child_time") && !plan.contains("Seq Scan on events"), "\(plan)")
        let dashboard = try await fixture.admin.query("EXPLAIN \(Dashboard.statement(child: child.id, now: now, as: user.id))")
            .decodeColumn(String.self).joined(separator: "\n")
        #expect(dashboard.contains("idx_events_child_time"), "\(dashboard)")
        #expect(!dashboard.contains("Seq Scan on events"), "\(dashboard)")
    }

    /// Five years of diapers and nothing else: the dashboard's "last feeding", "last sleep"
    /// and "last breast side" find nothing with one index probe each, instead of walking the
    /// child's whole history looking for a category that was never logged (PRD §12: a family
    /// that tracks only diapers).
    @Test func aCategoryNeverLoggedDoesNotWalkTheChildsHistory() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        try await fixture.admin.execute("""
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            SELECT \(child.id), \(user.id), 'diaper', timestamptz '2021-11-20 00:00+00' + n * interval '3 hours', 'UTC', 0, '{"contents":"wet"}'
            FROM generate_series(0, 5 * 365 * 8) AS n
            """)
        try await fixture.admin.execute("ANALYZE events")
        let now = Date(timeIntervalSince1970: 1_795_000_000) // 2026-11-18
        let plan = try await fixture.admin.query("EXPLAIN (ANALYZE, BUFFERS) \(Dashboard.statement(child: child.id, now: now, as: user.id))")
            .decodeColumn(String.self)
        let removed = plan.compactMap { line -> Int? in
            guard let range = line.range(of: "Rows Removed by Filter: ") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
        #expect((removed.max() ?? 0) < 100, "\(plan.joined(separator: "\n"))")
        #expect(plan.joined().contains("idx_events_child_type_time"), "\(plan.joined(separator: "\n"))")
        let dashboard = try await fixture.store.events.dashboard(for: child.id, now: now, as: user.id)
        #expect(dashboard.lastFeeding == nil && dashboard.lastSleep == nil && dashboard.lastDiaper != nil)
    }

    /// The statements the store runs are public, for psql's EXPLAIN or another client: run by
    /// a plain connection with their own text and values, they still answer a caregiver and
    /// refuse anyone else (the membership check is inside each statement).
    @Test func thePublicStatementsCarryTheirOwnMembershipCheck() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family()
        let stranger = try await fixture.user("Stranger")
        let now = Date()
        let day = PostgresDate(now, in: TimeZone(identifier: "UTC") ?? .gmt)
        let start = EventTimestamp(now, in: TimeZone(identifier: "UTC") ?? .gmt)
        func rows(_ sql: SQL) async throws -> PostgresRows { try await fixture.admin.query(sql) }

        #expect(try await rows(Dashboard.statement(child: child.id, now: now, as: user.id)).count == 1)
        #expect(try await rows(Dashboard.statement(child: child.id, now: now, as: stranger.id)).isEmpty)
        #expect(try await rows(Timeline.statement(child: child.id, day: day, now: now, as: user.id)).count == 1)
        #expect(try await rows(Timeline.statement(child: child.id, day: day, now: now, as: stranger.id)).isEmpty)

        let refused = EventDraft(childID: child.id, payload: .diaper(.wet), start: start)
        #expect(try await rows(EventRepository.recordStatement(refused, as: stranger.id)).isEmpty)
        let answer = try #require(try await rows(EventRepository.recordedStatement(refused, as: stranger.id)).first)
        #expect(try answer.decode(String?.self, column: "my_role") == nil && answer.isNull(at: try #require(answer.columnIndex("id"))))
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events WHERE id = \(refused.id)") == 0)

        let accepted = EventDraft(childID: child.id, payload: .diaper(.wet), start: start)
        let stored = try #require(try await rows(EventRepository.recordStatement(accepted, as: user.id)).first)
        #expect(try stored.decode(Bool.self, column: "created"))
        #expect(try await fixture.store.events.timeline(for: child.id, day: day, now: now, as: user.id).events.map(\.id).contains(accepted.id))
        // Sent again, it stores nothing; the caregiver's second statement finds it, the same.
        #expect(try await rows(EventRepository.recordStatement(accepted, as: user.id)).isEmpty)
        let again = try #require(try await rows(EventRepository.recordedStatement(accepted, as: user.id)).first)
        #expect(try again.decode(String?.self, column: "my_role") == "primary")
        #expect(try again.decode(Bool.self, column: "same") && !(try again.decode(Bool.self, column: "created")))
        #expect(try again.decode(UUID.self, column: "id") == accepted.id)
    }
}
