import BabyBasicsStore
import Foundation
import Postgres

/// A moment as a client sends it: the instant and the device's IANA time zone, kept as sent
/// (`UTC` stays `UTC`; the offset is the zone's at that instant).
struct Moment {
    static func timestamp(_ date: Date, zone: String, field: String = "time_zone") throws -> EventTimestamp {
        guard let timestamp = EventTimestamp(date, zoneNamed: zone) else {
            throw APIError.invalid(field: field, reason: "\"\(zone)\" is not an IANA time zone such as America/New_York or UTC")
        }
        return timestamp
    }
}

/// The API's names for the store's fields, per kind of body: a 422 names what the client sent.
enum FieldNames {
    /// `POST /events` and `PATCH /events/:id`.
    static let event: [String: String] = [
        "start": "start_time", "start.timeZone": "time_zone", "start.offsetSeconds": "start_time",
        "end": "end_time", "end.timeZone": "time_zone", "end.offsetSeconds": "end_time",
        "amountMl": "data.amount_ml", "preparedMl": "data.prepared_ml", "remainingMl": "data.remaining_ml",
        "category": "data.category", "payload": "data", "offsetSeconds": "start_time",
    ]
    /// The sleep and bottle steps.
    static let step: [String: String] = [
        "start": "at", "start.timeZone": "time_zone", "start.offsetSeconds": "at",
        "end": "at", "end.timeZone": "time_zone", "end.offsetSeconds": "at",
        "amountMl": "prepared_ml", "preparedMl": "prepared_ml", "remainingMl": "remaining_ml", "offsetSeconds": "at",
    ]

    /// Runs `body`, naming a refused field as the client sent it.
    static func translating<T>(_ names: [String: String], isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch StoreError.invalid(let field, let reason) {
            throw APIError.invalid(field: names[field] ?? field, reason: reason)
        }
    }
}

/// `POST /children/:childId/events`: the client picks the id, so a retry is the same event.
///
/// ```json
/// {"id": "…", "type": "feeding", "start_time": "2026-11-25T07:15:00Z", "time_zone": "America/New_York",
///  "data": {"kind": "breast", "started_side": "left", "both_sides": false}}
/// ```
struct NewEventBody: Decodable {
    var id: UUID
    var type: EventType
    var startTime: Date
    var timeZone: String
    var endTime: Date?
    var data: [String: JSONScalar]?
    var notes: String?

    enum CodingKeys: String, CodingKey {
        case id, type, data, notes
        case startTime = "start_time", timeZone = "time_zone", endTime = "end_time"
    }

    func draft(child: UUID) throws -> EventDraft {
        EventDraft(
            id: id, childID: child, payload: try Payload.make(type, data ?? [:]),
            start: try Moment.timestamp(startTime, zone: timeZone),
            end: try endTime.map { try Moment.timestamp($0, zone: timeZone) }, notes: notes)
    }
}

/// `PATCH /children/:childId/events/:eventId`: only what changes, and the revision the client
/// saw (a stale one is 409 with both versions).
///
/// ```json
/// {"expected_revision": 2, "notes": "fussy", "end_time": "2026-11-25T08:00:00Z", "time_zone": "UTC"}
/// ```
public struct EventPatch: Codable, Sendable {
    public var expectedRevision: Int
    public var startTime: Date?
    public var endTime: Date?
    public var timeZone: String?
    public var data: [String: JSONScalar]?
    public var notes: String?

    enum CodingKeys: String, CodingKey {
        case data, notes
        case expectedRevision = "expected_revision", startTime = "start_time", endTime = "end_time", timeZone = "time_zone"
    }

    /// The changes to `event`. A `time_zone` alone moves the event's times to that zone (the
    /// same instants, another wall clock); an unknown zone is refused, never ignored.
    func changes(of event: Event) throws -> EventChanges {
        var changes = EventChanges()
        let zone = timeZone ?? event.start.timeZone
        if let timeZone { _ = try Moment.timestamp(event.start.utc, zone: timeZone) }
        if let startTime { changes.start = try Moment.timestamp(startTime, zone: zone) } else if timeZone != nil {
            changes.start = try Moment.timestamp(event.start.utc, zone: zone)
        }
        if let endTime { changes.end = .some(try Moment.timestamp(endTime, zone: zone)) } else if timeZone != nil, let end = event.end {
            changes.end = .some(try Moment.timestamp(end.utc, zone: zone))
        }
        if let data { changes.payload = try Payload.make(event.type, data) }
        if let notes { changes.notes = .some(notes) }
        return changes
    }
}

/// Sleep and bottle steps: when (default: now) and in which zone, and the revision seen.
struct StepBody: Decodable {
    var id: UUID?
    var at: Date?
    var timeZone: String?
    var expectedRevision: Int?
    var preparedMl: Double?
    var remainingMl: Double?
    var refrigerated: Bool?
    var notes: String?

    enum CodingKeys: String, CodingKey {
        case id, at, notes, refrigerated
        case timeZone = "time_zone", expectedRevision = "expected_revision", preparedMl = "prepared_ml", remainingMl = "remaining_ml"
    }

    func moment(now: Date) throws -> EventTimestamp {
        try Moment.timestamp(at ?? now, zone: timeZone ?? "UTC")
    }
}

/// An event's type-specific `data`, read by type, each missing or wrong member named.
enum Payload {
    static func make(_ type: EventType, _ data: [String: JSONScalar]) throws -> EventPayload {
        func string(_ name: String) throws -> String {
            guard case .string(let value)? = data[name] else { throw APIError.invalid(field: "data.\(name)", reason: "is required (a string)") }
            return value
        }
        func number(_ name: String) throws -> Double? {
            switch data[name] {
            case nil: return nil
            case .number(let value)?: return value
            default: throw APIError.invalid(field: "data.\(name)", reason: "must be a number")
            }
        }
        func bool(_ name: String) throws -> Bool? {
            switch data[name] {
            case nil: return nil
            case .bool(let value)?: return value
            default: throw APIError.invalid(field: "data.\(name)", reason: "must be true or false")
            }
        }
        switch type {
        case .feeding:
            switch try string("kind") {
            case "breast":
                guard let side = BreastSide(rawValue: try string("started_side")) else {
                    throw APIError.invalid(field: "data.started_side", reason: "must be left or right")
                }
                return .feeding(.breast(startedSide: side, bothSides: try bool("both_sides") ?? false))
            case "bottle":
                return .feeding(.bottle(amountMl: try number("amount_ml"), preparedMl: try number("prepared_ml"), remainingMl: try number("remaining_ml"),
                                        feedingStartedAt: nil, refrigerated: try bool("refrigerated") ?? false))
            default:
                throw APIError.invalid(field: "data.kind", reason: "must be breast or bottle")
            }
        case .diaper:
            guard let contents = DiaperContents(rawValue: try string("contents")) else {
                throw APIError.invalid(field: "data.contents", reason: "must be wet, dirty or both")
            }
            return .diaper(contents)
        case .sleep:
            return .sleep
        case .note:
            return .note(category: try string("category"))
        }
    }
}
