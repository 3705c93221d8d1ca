import BabyBasicsStore
import Foundation

/// `GET /children/:childId/dashboard`, with the dashboard spec's field names (seed 000):
///
/// ```json
/// {"last_feeding": {"id": "…", "start_time": "…", "type": "breast", "started_side": "left",
///                   "both_sides": true, "side_indicator": "L+R", "amount_ml": null},
///  "last_diaper": {"id": "…", "start_time": "…", "contents": "both"},
///  "last_sleep": {"id": "…", "start_time": "…", "end_time": "…", "minutes": 95},
///  "active_sleep": {"id": "…", "start_time": "…"},
///  "suggested_side": "right",
///  "today": {"from": "…", "to": "…", "feeds": 3, "pee": 3, "poop": 1, "sleep_minutes": 240, "notes": 0}}
/// ```
///
/// A card with nothing yet is `null`; counts are 0.
struct DashboardJSON: Encodable {
    let dashboard: Dashboard

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: JSONKey.self)
        try container.put(dashboard.lastFeeding.map(LastFeedingJSON.init), "last_feeding")
        try container.put(dashboard.lastDiaper.map(LastDiaperJSON.init), "last_diaper")
        try container.put(dashboard.lastSleep.map(LastSleepJSON.init), "last_sleep")
        try container.put(dashboard.activeSleep.map(ActiveSleepJSON.init), "active_sleep")
        try container.put(dashboard.suggestedSide?.rawValue, "suggested_side")
        try container.put(TodayJSON(today: dashboard.today), "today")
    }

    struct LastFeedingJSON: Encodable {
        let feeding: Dashboard.LastFeeding
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(feeding.id, "id")
            try container.put(feeding.start.utc, "start_time")
            try container.put(feeding.start.timeZone, "start_tz")
            switch feeding.feeding {
            case .breast(let side, let both):
                try container.put("breast", "type")
                try container.put(side.rawValue, "started_side")
                try container.put(both, "both_sides")
            case .bottle:
                try container.put("bottle", "type")
                try container.put(String?.none, "started_side")
                try container.put(Bool?.none, "both_sides")
            }
            try container.put(feeding.sideIndicator, "side_indicator")
            try container.put(feeding.amountMl, "amount_ml")
        }
    }

    struct LastDiaperJSON: Encodable {
        let diaper: Dashboard.LastDiaper
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(diaper.id, "id")
            try container.put(diaper.start.utc, "start_time")
            try container.put(diaper.contents.rawValue, "contents")
        }
    }

    struct LastSleepJSON: Encodable {
        let sleep: Dashboard.LastSleep
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(sleep.id, "id")
            try container.put(sleep.start.utc, "start_time")
            try container.put(sleep.end.utc, "end_time")
            try container.put(sleep.minutes, "minutes")
        }
    }

    struct ActiveSleepJSON: Encodable {
        let sleep: Dashboard.ActiveSleep
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(sleep.id, "id")
            try container.put(sleep.start.utc, "start_time")
        }
    }

    struct TodayJSON: Encodable {
        let today: Dashboard.Today
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(today.from, "from")
            try container.put(today.to, "to")
            try container.put(today.feeds, "feeds")
            try container.put(today.pee, "pee")
            try container.put(today.poop, "poop")
            try container.put(today.sleepMinutes, "sleep_minutes")
            try container.put(today.notes, "notes")
        }
    }
}

/// `GET /children/:childId/timeline?date=today`: the child's day, newest first.
struct TimelineJSON: Encodable {
    let timeline: Timeline

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: JSONKey.self)
        try container.put(timeline.day?.description, "date")
        try container.put(timeline.from, "from")
        try container.put(timeline.to, "to")
        try container.put(timeline.events.map(EventJSON.init), "events")
    }
}
