public import Foundation
public import Postgres

/// Wake-window prediction (PRD §6): when the next nap is likely, from the child's age and, once
/// there are at least 5 good samples, their own recent wake windows.
///
/// A pure function of its inputs, so it is tested without a database; `predictNextSleep`
/// feeds it from the last 14 days of sleeps.
///
/// ```swift
/// let prediction = WakeWindow.predict(childName: "Zoë", ageDays: 120, lastWake: wake, lastWakeHour: 13, samples: samples)
/// print(prediction.confidence, prediction.explanation)
/// ```
public enum WakeWindow {
    /// One sleep of the history: when it started, how long it lasted, and when the child woke
    /// before it (the previous sleep's end).
    ///
    /// ```swift
    /// let sample = WakeWindow.Sample(sleepStart: start, durationMinutes: 45, previousWake: wake)
    /// ```
    public struct Sample: Sendable, Equatable {
        public var sleepStart: Date
        public var durationMinutes: Double
        public var previousWake: Date?
        public init(sleepStart: Date, durationMinutes: Double, previousWake: Date?) {
            self.sleepStart = sleepStart
            self.durationMinutes = durationMinutes
            self.previousWake = previousWake
        }
    }

    /// How much the prediction relies on the child's own history.
    ///
    /// ```swift
    /// let label = prediction.confidence == .high ? "" : "learning"
    /// ```
    public enum Confidence: String, Sendable, Codable { case high, learning }

    /// A predicted nap window.
    ///
    /// ```swift
    /// napBlock.range = prediction.rangeStart...prediction.rangeEnd
    /// ```
    public struct Prediction: Sendable, Equatable {
        public var rangeStart: Date
        public var rangeEnd: Date
        public var confidence: Confidence
        public var explanation: String
    }

    /// The PRD §6 age table as day ranges (upper bound exclusive; 4-5 months, missing from the
    /// table, uses the 3-4 months row; 18 months and older use the last row).
    static let table: [(untilDay: Int, minMinutes: Double, maxMinutes: Double)] = [
        (28, 30, 60),        // 0-4 weeks
        (84, 60, 90),        // 4-12 weeks
        (150, 75, 120),      // 3-4 months (and 4-5)
        (210, 120, 180),     // 5-7 months
        (300, 150, 210),     // 7-10 months
        (420, 180, 240),     // 10-14 months
        (Int.max, 240, 360), // 14-18 months and older
    ]

    /// The age-based range in minutes.
    public static func ageRange(ageDays: Int) -> (min: Double, max: Double) {
        let row = table.first { ageDays < $0.untilDay } ?? table[table.count - 1]
        return (row.minMinutes, row.maxMinutes)
    }

    /// The range blended over the 7 days from an age threshold, by PRD §12's own numbers:
    /// day 1 (the day the threshold is crossed) 20 % new range, day 4 50 %, day 7 100 %, and
    /// linear between those days. (The PRD's sample code, days / 7, gives 14 % and 57 %.)
    public static func blendedRange(ageDays: Int) -> (min: Double, max: Double) {
        let current = ageRange(ageDays: ageDays)
        let previous = ageRange(ageDays: max(0, ageDays - 7))
        guard current != previous else { return current }
        let lowerBound = table.lazy.map(\.untilDay).filter { $0 <= ageDays }.max() ?? 0
        let factor = blendFactor(daysSinceThreshold: ageDays - lowerBound)
        return (previous.min + (current.min - previous.min) * factor, previous.max + (current.max - previous.max) * factor)
    }

    /// The share of the new range on day `daysSinceThreshold + 1` of the transition.
    static func blendFactor(daysSinceThreshold days: Int) -> Double {
        switch days {
        case ..<0: 0
        case 0...3: 0.2 + 0.1 * Double(days)            // days 1-4: 20 % → 50 %
        case 4...5: 0.5 + 0.5 / 3 * Double(days - 3)    // days 5-6, on to 100 % on day 7
        default: 1
        }
    }

    /// Wake windows (minutes) of samples that qualify: a known previous wake, and a sleep of at
    /// least 20 minutes.
    public static func qualifyingWindows(_ samples: [Sample]) -> [Double] {
        samples.compactMap { sample in
            guard let wake = sample.previousWake, sample.durationMinutes >= 20 else { return nil }
            let minutes = sample.sleepStart.timeIntervalSince(wake) / 60
            return minutes > 0 ? minutes : nil
        }
    }

    /// Follows the PRD §6 pseudocode. `lastWakeHour` is the local hour (0-23) of `lastWake`
    /// in the child's zone.
    public static func predict(childName: String, ageDays: Int, lastWake: Date, lastWakeHour: Int, samples: [Sample]) -> Prediction {
        let base = blendedRange(ageDays: ageDays)
        let windows = qualifyingWindows(samples)
        var low = base.min
        var high = base.max
        if windows.count >= 5 {
            let mean = windows.reduce(0, +) / Double(windows.count)
            let variance = windows.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(windows.count)
            let deviation = variance.squareRoot()
            low = max(mean - deviation, base.min * 0.8)
            high = min(mean + deviation, base.max * 1.2)
            if low > high { (low, high) = (high, low) }
        }
        let adjustment = lastWakeHour < 9 ? 0.9 : (lastWakeHour > 17 ? 1.1 : 1.0)
        let months = ageDays / 30
        let explanation: String
        if windows.count >= 5 {
            let mean = windows.reduce(0, +) / Double(windows.count)
            explanation = "Based on \(childName)'s age (\(months) months) and average wake time this week (\(DurationText.hoursMinutes(Int(mean.rounded()))))"
        } else {
            explanation = "Based on typical wake windows for \(months)-month-olds. Predictions will improve as we learn \(childName)'s patterns."
        }
        return Prediction(
            rangeStart: lastWake.addingTimeInterval(low * adjustment * 60),
            rangeEnd: lastWake.addingTimeInterval(high * adjustment * 60),
            confidence: windows.count >= 10 ? .high : .learning,
            explanation: explanation)
    }

    /// PRD §15 "Prediction Hit Rate": for each sleep with a known previous wake, predict from the
    /// samples before it and count whether it started inside the window.
    public static func hitRate(childName: String, birthDate: PostgresDate, samples: [Sample], localHour: (Date) -> Int) -> (hits: Int, total: Int, rate: Double?) {
        let ordered = samples.sorted { $0.sleepStart < $1.sleepStart }
        var hits = 0
        var total = 0
        for (index, sample) in ordered.enumerated() {
            guard let wake = sample.previousWake else { continue }
            let ageDays = PostgresDate(wake, in: .gmt).daysSince2000 - birthDate.daysSince2000
            let history = Array(ordered[..<index].filter { $0.sleepStart >= wake.addingTimeInterval(-14 * 86_400) })
            let prediction = predict(childName: childName, ageDays: max(0, ageDays), lastWake: wake, lastWakeHour: localHour(wake), samples: history)
            total += 1
            if sample.sleepStart >= prediction.rangeStart && sample.sleepStart <= prediction.rangeEnd { hits += 1 }
        }
        return (hits, total, total == 0 ? nil : Double(hits) / Double(total))
    }
}

extension EventRepository {
    /// The last 14 days of finished sleeps with the wake time before each (the previous
    /// sleep's end), oldest first: the input of `WakeWindow`.
    public func wakeWindowSamples(for childID: UUID, now: Date = Date(), as actingUser: UUID) async throws -> [WakeWindow.Sample] {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                WITH child AS (
                    SELECT c.id FROM children c WHERE c.id = \(childID) AND \(Authorization.isCaregiver(of: "c.id", for: actingUser))
                ), sleeps AS (
                    SELECT e.start_time, e.end_time, lag(e.end_time) OVER (ORDER BY e.start_time) AS previous_wake
                    FROM events e, child
                    WHERE e.child_id = child.id AND e.event_type = 'sleep' AND e.deleted_at IS NULL AND e.end_time IS NOT NULL
                      AND e.start_time >= \(now)::timestamptz - interval '15 days' AND e.start_time <= \(now)
                )
                SELECT (SELECT true FROM child) AS visible, s.start_time, extract(epoch FROM s.end_time - s.start_time)::float8 / 60 AS minutes, s.previous_wake
                FROM (SELECT 1) AS one LEFT JOIN sleeps s ON s.start_time >= \(now)::timestamptz - interval '14 days'
                ORDER BY s.start_time
                """)
            guard let first = rows.first, try first.decode(Bool?.self, column: "visible") == true else { throw StoreError.notFound }
            return try rows.filter { !$0.isNull(at: 1) }.map { row in
                WakeWindow.Sample(
                    sleepStart: try row.decode(Date.self, column: "start_time"),
                    durationMinutes: try row.decode(Double.self, column: "minutes"),
                    previousWake: try row.decode(Date?.self, column: "previous_wake"))
            }
        }
    }

    /// The next nap window, from the last wake (the last sleep's end); `nil` while the child
    /// sleeps or before any sleep is logged.
    public func predictNextSleep(for childID: UUID, now: Date = Date(), as actingUser: UUID) async throws -> WakeWindow.Prediction? {
        let child = try await ChildRepository(routing: routing).get(childID, as: actingUser)
        let dashboard = try await dashboard(for: childID, now: now, as: actingUser)
        guard dashboard.activeSleep == nil, let lastSleep = dashboard.lastSleep else { return nil }
        let samples = try await wakeWindowSamples(for: childID, now: now, as: actingUser)
        // The child's zone, as for the hit rate and the child's day (not the last sleep's).
        let zone = TimeZone(identifier: child.settings.timezone) ?? .gmt
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let ageDays = PostgresDate(now, in: zone).daysSince2000 - child.birthDate.daysSince2000
        return WakeWindow.predict(
            childName: child.name, ageDays: max(0, ageDays), lastWake: lastSleep.end.utc,
            lastWakeHour: calendar.component(.hour, from: lastSleep.end.utc), samples: samples)
    }

    /// The share of the last 14 days' naps that started inside their predicted window.
    public func predictionHitRate(for childID: UUID, now: Date = Date(), as actingUser: UUID) async throws -> (hits: Int, total: Int, rate: Double?) {
        let child = try await ChildRepository(routing: routing).get(childID, as: actingUser)
        let samples = try await wakeWindowSamples(for: childID, now: now, as: actingUser)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: child.settings.timezone) ?? .gmt
        return WakeWindow.hitRate(childName: child.name, birthDate: child.birthDate, samples: samples) { calendar.component(.hour, from: $0) }
    }
}
