import BabyBasicsStore
import Foundation

/// An event as the API sends it.
///
/// ```json
/// {"id": "…", "child_id": "…", "type": "feeding", "start_time": "2026-11-25T07:15:00.000000Z",
///  "start_tz": "America/New_York", "start_offset_seconds": -18000, "end_time": null, …,
///  "data": {"kind": "breast", "started_side": "left", "both_sides": true},
///  "notes": null, "revision": 1, "deleted_at": null}
/// ```
struct EventJSON: Encodable {
    let event: Event
    init(_ event: Event) { self.event = event }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: JSONKey.self)
        try container.put(event.id, "id")
        try container.put(event.childID, "child_id")
        try container.put(event.type.rawValue, "type")
        try container.put(event.start.utc, "start_time")
        try container.put(event.start.timeZone, "start_tz")
        try container.put(event.start.offsetSeconds, "start_offset_seconds")
        try container.put(event.end?.utc, "end_time")
        try container.put(event.end?.timeZone, "end_tz")
        try container.put(event.end?.offsetSeconds, "end_offset_seconds")
        try container.put(PayloadJSON(event.payload), "data")
        try container.put(event.notes, "notes")
        try container.put(event.revision, "revision")
        try container.put(event.loggedBy, "logged_by")
        try container.put(event.updatedAt, "updated_at")
        try container.put(event.deletedAt, "deleted_at")
    }
}

/// An event's `data`, by type: a breast feeding's `started_side` and `both_sides`, a
/// bottle's amounts in mL, a diaper's `contents`, a note's `category`.
struct PayloadJSON: Encodable {
    let payload: EventPayload
    init(_ payload: EventPayload) { self.payload = payload }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: JSONKey.self)
        switch payload {
        case .feeding(.breast(let side, let both)):
            try container.put("breast", "kind")
            try container.put(side.rawValue, "started_side")
            try container.put(both, "both_sides")
        case .feeding(.bottle(let amount, let prepared, let remaining, let started, let refrigerated)):
            try container.put("bottle", "kind")
            // What the baby drank, when known: the amount fed, or prepared − remaining.
            var drank = amount
            if drank == nil, let prepared, let remaining { drank = prepared - remaining }
            try container.put(drank, "amount_ml")
            try container.put(prepared, "prepared_ml")
            try container.put(remaining, "remaining_ml")
            try container.put(started, "feeding_started_at")
            try container.put(refrigerated, "refrigerated")
        case .diaper(let contents):
            try container.put(contents.rawValue, "contents")
        case .note(let category):
            try container.put(category, "category")
        case .sleep:
            break
        }
    }
}
