public import Foundation
import Postgres

/// A moment as it was recorded (PRD §8): the UTC instant, plus the IANA zone and UTC offset of
/// the device, so an event is shown in the local time it happened, even after travel or across
/// the repeated hour of a DST change.
///
/// ```swift
/// let now = EventTimestamp(Date(), in: TimeZone(identifier: "America/New_York")!)
/// print(now.localDescription)   // 2026-11-21 07:15
/// ```
public struct EventTimestamp: Codable, Sendable, Equatable, Hashable {
    public var utc: Date
    public var timeZone: String
    public var offsetSeconds: Int

    public init(utc: Date, timeZone: String, offsetSeconds: Int) {
        self.utc = utc
        self.timeZone = timeZone
        self.offsetSeconds = offsetSeconds
    }

    /// `date` in `zone`, with the zone's offset at that instant. The zone's name is Foundation's
    /// (`TimeZone(identifier: "UTC")` calls itself `GMT`): to keep the name a client sent, use
    /// ``init(_:zoneNamed:)``.
    public init(_ date: Date, in zone: TimeZone) {
        self.init(utc: date, timeZone: zone.identifier, offsetSeconds: zone.secondsFromGMT(for: date))
    }

    /// `date` in the IANA zone `name`, kept exactly as given (`UTC` stays `UTC`), with that
    /// zone's offset at that instant; nil when `name` is empty or no zone.
    ///
    /// ```swift
    /// let start = EventTimestamp(Date(), zoneNamed: "America/New_York")
    /// ```
    public init?(_ date: Date, zoneNamed name: String) {
        guard !name.isEmpty, !name.utf8.contains(0), let zone = TimeZone(identifier: name) else { return nil }
        self.init(utc: date, timeZone: name, offsetSeconds: zone.secondsFromGMT(for: date))
    }

    /// Local wall-clock time, `yyyy-MM-dd HH:mm`, from the stored offset (proleptic
    /// Gregorian, as PostgreSQL's).
    public var localDescription: String {
        let micros = (ProlepticGregorian.microseconds(of: utc) ?? 0) + Int64(offsetSeconds) * 1_000_000
        return String(ISOTimestamp.format(microseconds: micros).prefix(16)).replacingOccurrences(of: "T", with: " ")
    }
}

/// An event's kind, as stored in `events.event_type`.
///
/// ```swift
/// let diapers = events.filter { $0.type == .diaper }
/// ```
public enum EventType: String, Codable, Sendable, CaseIterable, PostgresCodable {
    case feeding, diaper, sleep, note
}

/// The breast a feeding started on.
///
/// ```swift
/// let next = lastSide.opposite   // .right after .left
/// ```
public enum BreastSide: String, Codable, Sendable, PostgresCodable {
    case left, right
    public var opposite: BreastSide { self == .left ? .right : .left }
}

/// What a diaper held (wet counts as pee, dirty as poop, both as one of each).
///
/// ```swift
/// let payload: EventPayload = .diaper(.both)
/// ```
public enum DiaperContents: String, Codable, Sendable, PostgresCodable {
    /// Pee.
    case wet
    /// Poop.
    case dirty
    /// One of each.
    case both
}

/// What was fed.
///
/// ```swift
/// let bottle: Feeding = .bottle(amountMl: nil, preparedMl: 120, remainingMl: nil, feedingStartedAt: nil)
/// ```
public enum Feeding: Sendable, Equatable {
    /// Breastfeeding, starting on `startedSide`, switching sides when `bothSides`.
    case breast(startedSide: BreastSide, bothSides: Bool)
    /// A bottle: either just an amount fed (`amountMl`), or the prepared-bottle life cycle
    /// (`preparedMl`, then `feedingStartedAt`, then `remainingMl` when finished). mL always.
    /// A `refrigerated` prepared bottle keeps 24 hours from preparation instead of 2.
    case bottle(amountMl: Double?, preparedMl: Double?, remainingMl: Double?, feedingStartedAt: Date?, refrigerated: Bool = false)
}

/// An event's type-specific content.
///
/// ```swift
/// let payload: EventPayload = .feeding(.breast(startedSide: .left, bothSides: true))
/// ```
public enum EventPayload: Sendable, Equatable {
    case feeding(Feeding)
    case diaper(DiaperContents)
    case sleep
    case note(category: String)

    public var type: EventType {
        switch self {
        case .feeding: .feeding
        case .diaper: .diaper
        case .sleep: .sleep
        case .note: .note
        }
    }
}

/// One logged event, as stored.
///
/// `revision` starts at 1 and grows with every change; pass it back to `update` so that an
/// edit never silently overwrites someone else's (PRD §7.4).
///
/// ```swift
/// let event = try await store.events.log(EventDraft(childID: child.id, payload: .diaper(.both), start: now), as: userID)
/// print(event.revision)   // 1
/// ```
public struct Event: Sendable, Equatable, Identifiable {
    public var id: UUID
    public var childID: UUID
    public var payload: EventPayload
    public var start: EventTimestamp
    public var end: EventTimestamp?
    public var notes: String?
    public var loggedBy: UUID?
    public var updatedBy: UUID?
    public var deletedBy: UUID?
    public var createdAt: Date
    public var updatedAt: Date
    public var deletedAt: Date?
    /// Optimistic-concurrency revision.
    public var revision: Int

    public var type: EventType { payload.type }
    public var isDeleted: Bool { deletedAt != nil }

    /// `end - start`, when ended.
    public var duration: TimeInterval? { end.map { $0.utc.timeIntervalSince(start.utc) } }

    /// The columns of `events e` that fill an `Event`.
    static let columns: SQL = """
        e.id, e.child_id, e.event_type, e.start_time, e.start_tz, e.start_offset_seconds,
        e.end_time, e.end_tz, e.end_offset_seconds, e.data, e.notes, e.logged_by, e.updated_by,
        e.deleted_by, e.created_at, e.updated_at, e.deleted_at, e.revision
        """

    /// `Event.columns` by name, in order: `Row` reads them by position.
    static let columnNames = [
        "id", "child_id", "event_type", "start_time", "start_tz", "start_offset_seconds",
        "end_time", "end_tz", "end_offset_seconds", "data", "notes", "logged_by", "updated_by",
        "deleted_by", "created_at", "updated_at", "deleted_at", "revision",
    ]

    /// The columns of `Event.columns`, read by position from where they start in a result
    /// (found and checked by name once per result, not once per value: a sync page decodes
    /// 500 of these, and the name lookups of `Decodable` were most of its time).
    struct Row {
        var id: UUID
        var childId: UUID
        var eventType: EventType
        var startTime: Date
        var startTz: String
        var startOffsetSeconds: Int
        var endTime: Date?
        var endTz: String?
        var endOffsetSeconds: Int?
        var data: EventData
        var notes: String?
        var loggedBy: UUID?
        var updatedBy: UUID?
        var deletedBy: UUID?
        var createdAt: Date
        var updatedAt: Date
        var deletedAt: Date?
        var revision: Int

        /// The position of `id` in `columns`, after checking that `Event.columns` follow it
        /// in order (a query that selects something else is a decoding error, naming it).
        static func start(in columns: [PostgresColumn]) throws -> Int {
            let names = Event.columnNames
            guard let first = columns.firstIndex(where: { $0.name == names[0] }) else {
                throw PostgresDecodingError(column: names[0], columnIndex: -1, postgresType: .unspecified, swiftType: "Event",
                                            reason: "the result has no such column; it has: \(columns.map(\.name).joined(separator: ", "))")
            }
            try ColumnLayout.check(columns, from: first, are: names, swiftType: "Event", what: "Event.columns")
            return first
        }

        /// Every row of `rows` (the layout is checked once).
        static func all(_ rows: PostgresRows) throws -> [Row] {
            guard !rows.isEmpty else { return [] }
            let start = try start(in: rows.columns)
            return try rows.map { try Row($0, at: start) }
        }

        /// One row, its layout checked.
        init(_ row: PostgresRow) throws {
            try self.init(row, at: Self.start(in: row.columns))
        }

        init(_ row: PostgresRow, at start: Int) throws {
            id = try row.decode(UUID.self, at: start)
            childId = try row.decode(UUID.self, at: start + 1)
            eventType = try row.decode(EventType.self, at: start + 2)
            startTime = try row.decode(Date.self, at: start + 3)
            startTz = try row.decode(String.self, at: start + 4)
            startOffsetSeconds = try row.decode(Int.self, at: start + 5)
            endTime = try row.decode(Date?.self, at: start + 6)
            endTz = try row.decode(String?.self, at: start + 7)
            endOffsetSeconds = try row.decode(Int?.self, at: start + 8)
            data = try row.decode(EventData.self, at: start + 9)
            notes = try row.decode(String?.self, at: start + 10)
            loggedBy = try row.decode(UUID?.self, at: start + 11)
            updatedBy = try row.decode(UUID?.self, at: start + 12)
            deletedBy = try row.decode(UUID?.self, at: start + 13)
            createdAt = try row.decode(Date.self, at: start + 14)
            updatedAt = try row.decode(Date.self, at: start + 15)
            deletedAt = try row.decode(Date?.self, at: start + 16)
            revision = try row.decode(Int.self, at: start + 17)
        }

        func event() throws -> Event {
            var end: EventTimestamp?
            if let endTime, let endTz, let endOffsetSeconds {
                end = EventTimestamp(utc: endTime, timeZone: endTz, offsetSeconds: endOffsetSeconds)
            }
            return Event(
                id: id, childID: childId, payload: try data.payload(for: eventType),
                start: EventTimestamp(utc: startTime, timeZone: startTz, offsetSeconds: startOffsetSeconds),
                end: end, notes: notes, loggedBy: loggedBy, updatedBy: updatedBy, deletedBy: deletedBy,
                createdAt: createdAt, updatedAt: updatedAt, deletedAt: deletedAt, revision: revision)
        }
    }
}

/// The `events.data` jsonb document: snake_case keys, only those that apply (the schema
/// refuses unknown keys).
struct EventData: Codable, Sendable, Equatable {
    var kind: String?
    var startedSide: BreastSide?
    var bothSides: Bool?
    var amountMl: Double?
    var amountPreparedMl: Double?
    var amountRemainingMl: Double?
    var feedingStartedAt: String?
    var refrigerated: Bool?
    var contents: DiaperContents?
    var category: String?

    enum CodingKeys: String, CodingKey {
        case kind, startedSide = "started_side", bothSides = "both_sides", amountMl = "amount_ml"
        case amountPreparedMl = "amount_prepared_ml", amountRemainingMl = "amount_remaining_ml"
        case feedingStartedAt = "feeding_started_at", refrigerated, contents, category
    }

    init(_ payload: EventPayload) {
        switch payload {
        case .feeding(.breast(let side, let both)):
            kind = "breast"; startedSide = side; bothSides = both
        case .feeding(.bottle(let amount, let prepared, let remaining, let started, let cold)):
            kind = "bottle"; amountMl = amount; amountPreparedMl = prepared; amountRemainingMl = remaining
            feedingStartedAt = started.map(EventData.iso8601)
            refrigerated = cold ? true : nil
        case .diaper(let value): contents = value
        case .sleep: break
        case .note(let value): category = value
        }
    }

    func payload(for type: EventType) throws -> EventPayload {
        switch type {
        case .feeding where kind == "breast":
            guard let startedSide, let bothSides else { throw StoreError.invalid(field: "data", reason: "a breast feeding without its side") }
            return .feeding(.breast(startedSide: startedSide, bothSides: bothSides))
        case .feeding:
            return .feeding(.bottle(amountMl: amountMl, preparedMl: amountPreparedMl, remainingMl: amountRemainingMl,
                                    feedingStartedAt: feedingStartedAt.flatMap(EventData.parseISO8601), refrigerated: refrigerated ?? false))
        case .diaper:
            guard let contents else { throw StoreError.invalid(field: "data", reason: "a diaper without contents") }
            return .diaper(contents)
        case .sleep: return .sleep
        case .note: return .note(category: category ?? "")
        }
    }

    /// `feeding_started_at` as stored in `data`: ISO 8601 to the microsecond, like every other
    /// instant of the store (the same text PostgreSQL's `to_char` and the CSV read).
    static func iso8601(_ date: Date) -> String { ISOTimestamp.format(date, alwaysFraction: true) }

    static func parseISO8601(_ text: String) -> Date? { ISOTimestamp.parse(text) }
}

/// A new event, as the client sends it. `id` is the client's UUID, so a retry is idempotent.
///
/// ```swift
/// let draft = EventDraft(id: clientID, childID: child.id, payload: .diaper(.wet), start: EventTimestamp(Date(), in: .current))
/// ```
public struct EventDraft: Sendable, Equatable {
    public var id: UUID
    public var childID: UUID
    public var payload: EventPayload
    public var start: EventTimestamp
    public var end: EventTimestamp?
    public var notes: String?

    /// `id`: the client's; a new random one when none is given.
    public init(id: UUID? = nil, childID: UUID, payload: EventPayload, start: EventTimestamp, end: EventTimestamp? = nil, notes: String? = nil) {
        self.id = id ?? .version4()
        self.childID = childID
        self.payload = payload
        self.start = start
        self.end = end
        self.notes = notes
    }
}

/// Changes to an event; `nil` keeps a field. The payload's type must stay the same.
///
/// ```swift
/// var changes = EventChanges()
/// changes.start = corrected
/// try await store.events.update(event.id, with: changes, expectedRevision: event.revision, as: userID)
/// ```
public struct EventChanges: Sendable {
    public var payload: EventPayload?
    public var start: EventTimestamp?
    /// `.some(nil)` clears the end (makes a sleep active again).
    public var end: EventTimestamp??
    /// `.some(nil)` clears the notes.
    public var notes: String??

    public init(payload: EventPayload? = nil, start: EventTimestamp? = nil, end: EventTimestamp?? = nil, notes: String?? = nil) {
        self.payload = payload
        self.start = start
        self.end = end
        self.notes = notes
    }

    /// Whether applying these changes to `event` would leave it as it is.
    func changesNothing(in event: Event) -> Bool {
        (payload.map { $0 == event.payload } ?? true) && (start.map { $0 == event.start } ?? true)
            && (end.map { $0 == event.end } ?? true) && (notes.map { $0 == event.notes } ?? true)
    }
}

/// Millilitres ↔ ounces for display (PRD: stored in mL; oz = mL / 29.5735, to the nearest 0.5).
///
/// ```swift
/// Volume.ounces(fromMilliliters: 120)          // 4.0
/// Volume.displayOunces(fromMilliliters: 75)    // "2.5 oz"
/// ```
public enum Volume {
    public static let millilitersPerOunce = 29.5735

    /// Rounded to the nearest 0.5 oz.
    public static func ounces(fromMilliliters ml: Double) -> Double {
        (ml / millilitersPerOunce * 2).rounded() / 2
    }

    /// `"4 oz"`, `"2.5 oz"`.
    public static func displayOunces(fromMilliliters ml: Double) -> String {
        format(ounces(fromMilliliters: ml)) + " oz"
    }

    /// `4` → "4", `2.5` → "2.5".
    static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
