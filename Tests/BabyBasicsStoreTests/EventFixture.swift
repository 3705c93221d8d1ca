import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// Builds an `EventTimestamp` from a local wall-clock time in `zone`.
func at(_ local: String, _ zone: String = "America/New_York") -> EventTimestamp {
    let tz = TimeZone(identifier: zone) ?? .gmt
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = tz
    let parts = local.split(whereSeparator: { $0 == "-" || $0 == " " || $0 == ":" }).compactMap { Int($0) }
    let date = calendar.date(from: DateComponents(year: parts[0], month: parts[1], day: parts[2], hour: parts[3], minute: parts[4])) ?? Date()
    return EventTimestamp(date, in: tz)
}

extension StoreFixture {
    /// A family whose child lives in `zone` and whose day starts at `dayStart`.
    func family(zone: String, dayStart: PostgresTime = PostgresTime(hour: 0, minute: 0)) async throws -> (user: User, child: Child) {
        let user = try await self.user("Parent")
        var settings = ChildSettings()
        settings.timezone = zone
        settings.dayStartTime = dayStart
        let child = try await store.children.create(ChildDraft(name: "Zoë", birthDate: PostgresDate(year: 2025, month: 12, day: 1), settings: settings), as: user.id)
        return (user, child)
    }

    @discardableResult
    func log(_ child: Child, _ user: User, _ payload: EventPayload, _ start: EventTimestamp, end: EventTimestamp? = nil, notes: String? = nil) async throws -> Event {
        try await store.events.log(EventDraft(childID: child.id, payload: payload, start: start, end: end, notes: notes), as: user.id)
    }
}
