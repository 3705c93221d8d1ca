import BabyBasicsStore
import Foundation
import Postgres
import Testing

@Suite struct WakeWindowTests {
    let wake = Date(timeIntervalSince1970: 1_763_650_800) // a fixed instant

    @Test func coldStartUsesTheAgeTable() {
        let prediction = WakeWindow.predict(childName: "Zoë", ageDays: 100, lastWake: wake, lastWakeHour: 12, samples: [])
        #expect(prediction.rangeStart == wake.addingTimeInterval(75 * 60) && prediction.rangeEnd == wake.addingTimeInterval(120 * 60))
        #expect(prediction.confidence == .learning)
        #expect(prediction.explanation == "Based on typical wake windows for 3-month-olds. Predictions will improve as we learn Zoë's patterns.")
        #expect(WakeWindow.ageRange(ageDays: 0) == (30, 60))
        #expect(WakeWindow.ageRange(ageDays: 27) == (30, 60) && WakeWindow.ageRange(ageDays: 28) == (60, 90))
        #expect(WakeWindow.ageRange(ageDays: 600) == (240, 360))
    }

    @Test func timeOfDayAdjustsTheWindow() {
        let morning = WakeWindow.predict(childName: "Zoë", ageDays: 100, lastWake: wake, lastWakeHour: 7, samples: [])
        let evening = WakeWindow.predict(childName: "Zoë", ageDays: 100, lastWake: wake, lastWakeHour: 19, samples: [])
        #expect(morning.rangeStart == wake.addingTimeInterval(75 * 0.9 * 60) && morning.rangeEnd == wake.addingTimeInterval(120 * 0.9 * 60))
        #expect(evening.rangeStart == wake.addingTimeInterval(75 * 1.1 * 60) && evening.rangeEnd == wake.addingTimeInterval(120 * 1.1 * 60))
    }

    func samples(_ windows: [Double], sleepMinutes: Double = 45) -> [WakeWindow.Sample] {
        windows.enumerated().map { index, minutes in
            let previousWake = wake.addingTimeInterval(Double(-86_400 * (index + 1)))
            return WakeWindow.Sample(sleepStart: previousWake.addingTimeInterval(minutes * 60), durationMinutes: sleepMinutes, previousWake: previousWake)
        }
    }

    @Test func personalisesFromFiveSamplesWithinClamps() {
        // Mean 100, population deviation 10 → 90...110, inside 60...144 (0.8 × 75, 1.2 × 120).
        let five = WakeWindow.predict(childName: "Zoë", ageDays: 100, lastWake: wake, lastWakeHour: 12, samples: samples([90, 110, 90, 110, 100]))
        #expect(five.rangeStart == wake.addingTimeInterval(100 * 60 - 8.94427190999916 * 60))
        #expect(five.confidence == .learning)
        #expect(five.explanation == "Based on Zoë's age (3 months) and average wake time this week (1h 40m)")
        // Short sleeps and unknown wakes do not count: four good samples stay a cold start.
        let four = WakeWindow.predict(childName: "Zoë", ageDays: 100, lastWake: wake, lastWakeHour: 12, samples: samples([90, 110, 90, 110]) + samples([100], sleepMinutes: 19))
        #expect(four.rangeStart == wake.addingTimeInterval(75 * 60))
        // Far outside the age range: clamped to 0.8 × min and 1.2 × max.
        let extreme = WakeWindow.predict(childName: "Zoë", ageDays: 100, lastWake: wake, lastWakeHour: 12, samples: samples([10, 12, 300, 310, 320, 305, 15, 11, 299, 301]))
        #expect(extreme.rangeStart >= wake.addingTimeInterval(60 * 60) && extreme.rangeEnd <= wake.addingTimeInterval(144 * 60))
        #expect(extreme.confidence == .high)
    }

    /// PRD §12's example, by its own numbers: at the 12-week threshold (60-90 → 75-120 min),
    /// day 1 is 80 % old / 20 % new, day 4 50 / 50, day 7 all new.
    @Test func blendsOverSevenDaysAtAnAgeThreshold() {
        #expect(WakeWindow.blendedRange(ageDays: 83) == (60, 90), "the day before: the old range")
        #expect(WakeWindow.blendedRange(ageDays: 84) == (63, 96), "day 1: 20 % new")
        #expect(WakeWindow.blendedRange(ageDays: 84 + 3) == (67.5, 105), "day 4: 50 %")
        let day5 = WakeWindow.blendedRange(ageDays: 84 + 4)
        #expect(day5.min > 67.5 && day5.min < 75, "between day 4 and day 7")
        #expect(WakeWindow.blendedRange(ageDays: 84 + 6) == (75, 120), "day 7: the new range")
        #expect(WakeWindow.blendedRange(ageDays: 84 + 7) == (75, 120))
    }

    @Test func theQueryFeedsTheLastFourteenDaysAndTheHitRateIsMeasured() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        // Naps every day: wake at 10:00, sleep at 11:40 (100 min) for 60 minutes, 20 days back.
        let day = 86_400.0
        let base = Date(timeIntervalSince1970: 1_763_596_800) // 2025-11-20 00:00 UTC
        for offset in 0..<20 {
            let midnight = base.addingTimeInterval(Double(offset) * day)
            let morning = EventTimestamp(midnight.addingTimeInterval(7 * 3600), in: .gmt)
            try await fixture.log(child, user, .sleep, EventTimestamp(morning.utc.addingTimeInterval(-3 * 3600), in: .gmt), end: EventTimestamp(midnight.addingTimeInterval(10 * 3600), in: .gmt))
            try await fixture.log(child, user, .sleep, EventTimestamp(midnight.addingTimeInterval(11 * 3600 + 40 * 60), in: .gmt), end: EventTimestamp(midnight.addingTimeInterval(12 * 3600 + 40 * 60), in: .gmt))
        }
        let now = base.addingTimeInterval(19 * day + 13 * 3600)
        let samples = try await fixture.store.events.wakeWindowSamples(for: child.id, now: now, as: user.id)
        #expect(samples.count >= 27 && samples.allSatisfy { $0.sleepStart >= now.addingTimeInterval(-14 * day) })
        #expect(samples.filter { $0.previousWake != nil }.count == samples.count)
        let prediction = try #require(try await fixture.store.events.predictNextSleep(for: child.id, now: now, as: user.id))
        #expect(prediction.confidence == .high)
        let rate = try await fixture.store.events.predictionHitRate(for: child.id, now: now, as: user.id)
        #expect(rate.total == samples.count && (rate.rate ?? 0) > 0.4)
    }

    /// The prediction reads the last wake's hour in the child's zone, as the hit rate does: a
    /// nap logged from a phone still set to Tokyo does not turn a New York evening (window
    /// stretched by 10 %) into a Tokyo morning (shortened by 10 %).
    @Test func thePredictionUsesTheChildsZone() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let start = at("2026-11-20 17:00"), end = at("2026-11-20 18:30")
        try await fixture.log(child, user, .sleep, EventTimestamp(start.utc, in: TimeZone(identifier: "Asia/Tokyo") ?? .gmt),
                              end: EventTimestamp(end.utc, in: TimeZone(identifier: "Asia/Tokyo") ?? .gmt))
        let now = at("2026-11-20 18:45").utc
        let prediction = try #require(try await fixture.store.events.predictNextSleep(for: child.id, now: now, as: user.id))
        let ageDays = PostgresDate(now, in: TimeZone(identifier: "America/New_York") ?? .gmt).daysSince2000 - child.birthDate.daysSince2000
        let samples = try await fixture.store.events.wakeWindowSamples(for: child.id, now: now, as: user.id)
        let newYork = WakeWindow.predict(childName: child.name, ageDays: ageDays, lastWake: end.utc, lastWakeHour: 18, samples: samples)
        let tokyo = WakeWindow.predict(childName: child.name, ageDays: ageDays, lastWake: end.utc, lastWakeHour: 8, samples: samples)
        #expect(newYork != tokyo)
        #expect(prediction == newYork)
    }
}
