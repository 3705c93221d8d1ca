import Foundation
import Postgres

/// Field-level checks that run before any SQL. The database constraints back every rule.
enum Validate {
    /// PostgreSQL's text cannot hold a NUL character: refused by name, before any SQL.
    static func storable(_ value: String, field: String) throws {
        guard !value.utf8.contains(0) else { throw StoreError.invalid(field: field, reason: "must not contain a NUL character (U+0000)") }
    }

    static func displayName(_ value: String) throws -> String {
        try storable(value, field: "displayName")
        let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw StoreError.invalid(field: "displayName", reason: "must not be blank") }
        guard trimmed.unicodeScalars.count <= 100 else { throw StoreError.invalid(field: "displayName", reason: "must be at most 100 characters (Unicode scalars)") }
        return trimmed
    }

    static func email(_ value: String) throws -> String {
        try storable(value, field: "email")
        let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.wholeMatch(of: /[^@\s]+@[^@\s]+\.[^@\s]+/) != nil, trimmed.utf8.count <= 254 else {
            throw StoreError.invalid(field: "email", reason: "is not an email address")
        }
        return trimmed
    }

    static func childName(_ value: String) throws -> String {
        try storable(value, field: "name")
        let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw StoreError.invalid(field: "name", reason: "must not be blank") }
        guard trimmed.unicodeScalars.count <= 100 else { throw StoreError.invalid(field: "name", reason: "must be at most 100 characters (Unicode scalars)") }
        return trimmed
    }

    /// Not before 1900, not after today in the child's time zone.
    static func birthDate(_ value: PostgresDate, timezone: String, now: Date = Date()) throws {
        guard value >= PostgresDate(year: 1900, month: 1, day: 1) else {
            throw StoreError.invalid(field: "birthDate", reason: "must be in 1900 or later")
        }
        let today = PostgresDate(now, in: TimeZone(identifier: timezone) ?? .gmt)
        guard value <= today else { throw StoreError.invalid(field: "birthDate", reason: "must not be in the future") }
    }

    static func settings(_ settings: ChildSettings) throws {
        guard settings.timezone.contains("/") || settings.timezone == "UTC", TimeZone(identifier: settings.timezone) != nil else {
            throw StoreError.invalid(field: "timezone", reason: "\"\(settings.timezone)\" is not an IANA time zone such as Europe/London")
        }
        guard (1...500).contains(settings.defaultBottleMl) else {
            throw StoreError.invalid(field: "defaultBottleMl", reason: "must be between 1 and 500 mL")
        }
        guard settings.dayStartTime.microsecondsSinceMidnight < 86_400_000_000 else {
            throw StoreError.invalid(field: "dayStartTime", reason: "must be before 24:00")
        }
        let expiry = settings.bottleExpiry
        for (field, minutes) in [("bottleExpiry.preparedMinutes", expiry.preparedMinutes), ("bottleExpiry.feedingMinutes", expiry.feedingMinutes),
                                 ("bottleExpiry.refrigeratedMinutes", expiry.refrigeratedMinutes)] where !(1...2880).contains(minutes) {
            throw StoreError.invalid(field: field, reason: "must be between 1 and 2880 minutes")
        }
    }
}
