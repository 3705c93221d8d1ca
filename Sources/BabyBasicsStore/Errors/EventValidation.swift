import Foundation
import Postgres

extension Validate {
    /// The earliest start an event may have (the database's events_start_from_1900 too).
    static let earliestEvent = ProlepticGregorian.date(microseconds: ProlepticGregorian.days(year: 1900, month: 1, day: 1) * 86_400_000_000)
    /// How far after now an event may start: "not in the future" (PRD §12), with a day for
    /// clocks that disagree and the zones ahead of UTC.
    static let futureAllowance: TimeInterval = 86_400

    /// Checks an event's times and payload before any SQL. Texts are counted in Unicode
    /// scalars (what PostgreSQL's char_length counts).
    static func event(payload: EventPayload, start: EventTimestamp, end: EventTimestamp?, notes: String?, now: Date = Date()) throws {
        try timestamp(start, field: "start", now: now)
        if let end {
            try timestamp(end, field: "end", now: now)
            guard end.utc >= start.utc else { throw StoreError.invalid(field: "end", reason: "must not be before the start") }
            guard end.utc.timeIntervalSince(start.utc) <= 86_400 else { throw StoreError.invalid(field: "end", reason: StoreError.maxDuration) }
        }
        if let notes {
            try storable(notes, field: "notes")
            if notes.unicodeScalars.count > 5000 { throw StoreError.invalid(field: "notes", reason: "must be at most 5000 characters (Unicode scalars)") }
        }
        switch payload {
        case .feeding(.bottle(let amount, let prepared, let remaining, _, _)):
            switch (amount, prepared) {
            case (let amount?, nil):
                try millilitres(amount, field: "amountMl")
                guard remaining == nil else { throw StoreError.invalid(field: "remainingMl", reason: "only applies to a prepared bottle") }
            case (nil, let prepared?):
                try millilitres(prepared, field: "preparedMl")
                if let remaining, !(0...prepared).contains(remaining) {
                    throw StoreError.invalid(field: "remainingMl", reason: "must be between 0 and the amount prepared")
                }
            default:
                throw StoreError.invalid(field: "amountMl", reason: "give either the amount fed or the amount prepared")
            }
        case .note(let category):
            try storable(category, field: "category")
            guard !category.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw StoreError.invalid(field: "category", reason: "must not be blank")
            }
            guard category.unicodeScalars.count <= 100 else {
                throw StoreError.invalid(field: "category", reason: "must be at most 100 characters (Unicode scalars)")
            }
        case .feeding(.breast), .diaper, .sleep:
            break
        }
    }

    /// A known zone, and the offset that zone had at that instant (New York is -04:00 in July,
    /// never +01:00). In a repeated hour each instant has its own offset, so either reading of
    /// 01:30 is a consistent pair. The database checks the same
    /// (`events_start_offset_matches_zone`); this says which field before any SQL.
    ///
    /// And a time an event can have: from 1900-01-01 (UTC) to a day after `now`.
    static func timestamp(_ value: EventTimestamp, field: String, now: Date = Date()) throws {
        guard value.utc >= earliestEvent else {
            throw StoreError.invalid(field: field, reason: "must be in 1900 or later")
        }
        guard value.utc.timeIntervalSince(now) <= futureAllowance else {
            throw StoreError.invalid(field: field, reason: "must not be in the future (more than a day after now)")
        }
        guard !value.timeZone.isEmpty, let zone = TimeZone(identifier: value.timeZone) else {
            throw StoreError.invalid(field: "\(field).timeZone", reason: "\"\(value.timeZone)\" is not an IANA time zone")
        }
        guard abs(value.offsetSeconds) <= 18 * 3600 else {
            throw StoreError.invalid(field: "\(field).offsetSeconds", reason: "must be within ±18 hours")
        }
        guard zone.secondsFromGMT(for: value.utc) == value.offsetSeconds else {
            throw StoreError.invalid(field: "\(field).offsetSeconds", reason: "is not \(field).timeZone's UTC offset at that instant")
        }
    }

    static func millilitres(_ value: Double, field: String) throws {
        guard value.isFinite, value > 0, value <= 2000 else {
            throw StoreError.invalid(field: field, reason: "must be more than 0 and at most 2000 mL")
        }
    }
}
