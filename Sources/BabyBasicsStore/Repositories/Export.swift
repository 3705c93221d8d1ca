public import Foundation
import Postgres

/// How far back an export goes (PRD §13).
///
/// ```swift
/// try await store.events.exportCSV(for: childID, range: .last7Days, as: userID) { _ in }
/// ```
public enum ExportRange: String, Sendable, CaseIterable {
    case last24Hours, last7Days, last30Days, allTime

    var interval: PostgresInterval? {
        switch self {
        case .last24Hours: PostgresInterval(microseconds: 86_400_000_000)
        case .last7Days: PostgresInterval(days: 7)
        case .last30Days: PostgresInterval(days: 30)
        case .allTime: nil
        }
    }
}

extension EventRepository {
    /// The CSV header: PRD §13's columns, then the zone and UTC offset of each row's start and
    /// the start itself, exact (ISO 8601 in UTC to the microsecond).
    public static let csvHeader = "date,time,event_type,duration_minutes,amount_prepared_oz,amount_consumed_oz,diaper_contents,logged_by,notes,time_zone,utc_offset,start_utc"

    /// How many rows one page of an export reads.
    static let exportPage = 500

    /// Streams a child's events as CSV (RFC 4180: CRLF line ends, quoted fields where needed),
    /// oldest first, with local date and time in each event's own zone. The rows are the
    /// database view `events_export` as it is (one definition for the app and for a DBA);
    /// a note or name that a spreadsheet would run as a formula (it begins with `=`, `+`,
    /// `-`, `@`, a tab or a carriage return) gets a leading `'`, as OWASP advises.
    ///
    /// The rows are read in pages of 500, each page a short read of its own (by the event's
    /// start and id, after the last row of the page before), and `write` is called between
    /// pages with no connection held: a consumer that reads slowly, or stops reading, holds no
    /// database connection and no transaction, however long it takes. Each page is one read
    /// under the store's read deadline and retry policy. The price: the file is not one
    /// snapshot. An event logged while the export runs is in it if it starts after the rows
    /// already written, and an edit made meanwhile shows in the rows not yet written; no event
    /// is ever written twice or left out for being edited.
    ///
    /// ```swift
    /// try await store.events.exportCSV(for: child.id, range: .allTime, as: userID) { chunk in
    ///     try await response.write(chunk)
    /// }
    /// ```
    public func exportCSV(
        for childID: UUID, range: ExportRange, now: Date = Date(), as actingUser: UUID,
        write: @escaping @Sendable (String) async throws -> Void
    ) async throws {
        try await requireCaregiver(of: childID, actingUser)
        try await write(Self.csvHeader + "\r\n")
        let since: SQL = range.interval.map { "AND x.start_time >= \(now)::timestamptz - \($0)" } ?? ""
        var after: PageKey?
        while true {
            let keyset: SQL = after.map { "AND (x.start_time, x.event_id) > (\($0.sql))" } ?? ""
            let rows = try await routing.reading(as: actingUser) { pool in
                try await pool.query("""
                    SELECT x.date, x.time, x.event_type, x.duration_minutes::text, x.amount_prepared_oz::text,
                           x.amount_consumed_oz::text, x.diaper_contents, x.logged_by, x.notes, x.time_zone, x.utc_offset, x.start_utc,
                           \(PageKey.select("x.start_time", "x.event_id"))
                    FROM events_export x
                    WHERE x.child_id = \(childID) \(since) \(keyset)
                      AND \(Authorization.isCaregiver(of: "x.child_id", for: actingUser))
                    ORDER BY x.start_time, x.event_id
                    LIMIT \(Self.exportPage)
                    """)
            }
            var chunk = ""
            for row in rows { chunk += try CSV.line(row, columns: 12) + "\r\n" }
            if !chunk.isEmpty { try await write(chunk) }
            guard rows.count == Self.exportPage, let last = rows.last else { return }
            after = try PageKey(last, at: 12)
        }
    }

    /// Streams everything the acting user may see as one JSON document (PRD §11, GDPR):
    /// their account, their children with caregivers, and every event with ids, zones, offsets,
    /// amounts in mL and who logged it. Read in pages, as `exportCSV` is.
    public func exportJSON(as actingUser: UUID, write: @escaping @Sendable (String) async throws -> Void) async throws {
        let encoder = ExportCoding.encoder
        let user = try await UserRepository(routing: routing).get(actingUser, as: actingUser)
        let children = try await ChildRepository(routing: routing).list(as: actingUser)
        try await write(#"{"format":"babybasics-export-1","user":"# + String(decoding: try encoder.encode(user), as: UTF8.self) + #","children":["#)
        for (index, child) in children.enumerated() {
            let caregivers = try await CaregiverRepository(routing: routing).list(of: child.id, as: actingUser)
            var head = index == 0 ? "" : ","
            head += #"{"child":"# + String(decoding: try encoder.encode(child), as: UTF8.self)
            head += #","caregivers":"# + String(decoding: try encoder.encode(caregivers), as: UTF8.self) + #","events":["#
            try await write(head)
            var first = true
            var after: PageKey?
            while true {
                let keyset: SQL = after.map { "AND (e.start_time, e.id) > (\($0.sql))" } ?? ""
                let rows = try await routing.reading(as: actingUser) { pool in
                    try await pool.query("""
                        SELECT \(Event.columns), \(PageKey.select("e.start_time", "e.id"))
                        FROM events e
                        WHERE e.child_id = \(child.id) \(keyset) AND \(Authorization.isCaregiver(of: "e.child_id", for: actingUser))
                        ORDER BY e.start_time, e.id
                        LIMIT \(Self.exportPage)
                        """)
                }
                var chunk = ""
                let start = rows.isEmpty ? 0 : try Event.Row.start(in: rows.columns)
                for row in rows {
                    let event = ExportedEvent(try Event.Row(row, at: start).event())
                    chunk += (first ? "" : ",") + String(decoding: try encoder.encode(event), as: UTF8.self)
                    first = false
                }
                if !chunk.isEmpty { try await write(chunk) }
                guard rows.count == Self.exportPage, let last = rows.last else { break }
                after = try PageKey(last, at: last.columns.count - 2)
            }
            try await write("]}")
        }
        try await write("]}")
    }

    /// `notFound` unless the acting user is a caregiver of the child: a stranger gets 404
    /// before the first byte of an export.
    func requireCaregiver(of childID: UUID, _ actingUser: UUID) async throws {
        let member = try await routing.reading(as: actingUser) { pool in
            try await pool.query(Authorization.membership(of: childID, for: actingUser)).first != nil
        }
        guard member else { throw StoreError.notFound }
    }
}

/// Where a page of an export ends: the last row's start (exact, in microseconds since 1970)
/// and id; the next page reads what sorts after it.
struct PageKey {
    let microseconds: Int64
    let id: UUID

    /// The two columns a page query adds after its own, from its start and id expressions.
    static func select(_ start: SQL, _ id: SQL) -> SQL {
        "(extract(epoch FROM \(start)) * 1000000)::bigint AS page_at, \(id) AS page_id"
    }

    init(_ row: PostgresRow, at column: Int) throws {
        microseconds = try row.decode(Int64.self, at: column)
        id = try row.decode(UUID.self, at: column + 1)
    }

    /// `(start, id)` to compare a row's `(start_time, id)` with, exactly: whole days and the
    /// microseconds left, each product exact (PostgreSQL multiplies an interval in float8,
    /// which cannot hold every microsecond since 1970 as one number).
    var sql: SQL {
        let days = microseconds >= 0 ? microseconds / 86_400_000_000 : (microseconds - 86_399_999_999) / 86_400_000_000
        let rest = microseconds - days * 86_400_000_000
        return "(timestamp 'epoch' + \(days) * interval '1 day' + \(rest) * interval '1 microsecond') AT TIME ZONE 'UTC', \(id)"
    }
}

enum CSV {
    /// The first `columns` of a row of `events_export` as written: NULL is an empty field,
    /// and no field begins with what a spreadsheet would run as a formula.
    static func line(_ row: PostgresRow, columns: Int) throws -> String {
        try row.columns.indices.prefix(columns).map { column in
            quote(defuse(try row.decode(String?.self, at: column) ?? ""))
        }.joined(separator: ",")
    }

    /// OWASP "CSV injection": a field a spreadsheet would run as a formula (it begins with
    /// `=`, `+`, `-`, `@`, a tab or a carriage return) gets a leading `'`, so it shows as
    /// text. Every column goes through it; only free text (notes, names) ever needs it, the
    /// view writes offsets as `UTC-05:00`.
    static func defuse(_ field: String) -> String {
        guard let first = field.unicodeScalars.first, ["=", "+", "-", "@", "\t", "\r"].contains(first) else { return field }
        return "'" + field
    }

    /// RFC 4180: quote a field holding a comma, a quote, a CR or an LF (each looked for as a
    /// Unicode scalar: in Swift "\r\n" is one Character, equal to neither); double its quotes.
    static func quote(_ field: String) -> String {
        guard field.utf8.contains(where: { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") }) else {
            return field
        }
        // Scalar by scalar: a string search would treat `"` plus a combining accent as one
        // character and leave that quote single.
        var quoted = String.UnicodeScalarView()
        quoted.append("\"")
        for scalar in field.unicodeScalars {
            if scalar == "\"" { quoted.append("\"") }
            quoted.append(scalar)
        }
        quoted.append("\"")
        return String(quoted)
    }
}

/// An event in the JSON export.
///
/// ```swift
/// let amounts = document.children[0].events.compactMap { $0.data["amount_ml"] }
/// ```
public struct ExportedEvent: Codable, Sendable, Equatable {
    public var id: UUID
    public var childID: UUID
    public var type: EventType
    public var start: EventTimestamp
    public var end: EventTimestamp?
    /// The `data` document as stored (amounts in mL).
    public var data: [String: JSONScalar]
    public var notes: String?
    public var loggedBy: UUID?
    public var updatedBy: UUID?
    public var deletedBy: UUID?
    public var createdAt: Date
    public var updatedAt: Date
    public var deletedAt: Date?
    public var revision: Int

    init(_ event: Event) {
        id = event.id
        childID = event.childID
        type = event.type
        start = event.start
        end = event.end
        let document = EventData(event.payload)
        var values: [String: JSONScalar] = [:]
        if let kind = document.kind { values["kind"] = .string(kind) }
        if let side = document.startedSide { values["started_side"] = .string(side.rawValue) }
        if let both = document.bothSides { values["both_sides"] = .bool(both) }
        if let amount = document.amountMl { values["amount_ml"] = .number(amount) }
        if let amount = document.amountPreparedMl { values["amount_prepared_ml"] = .number(amount) }
        if let amount = document.amountRemainingMl { values["amount_remaining_ml"] = .number(amount) }
        if let started = document.feedingStartedAt { values["feeding_started_at"] = .string(started) }
        if let refrigerated = document.refrigerated { values["refrigerated"] = .bool(refrigerated) }
        if let contents = document.contents { values["contents"] = .string(contents.rawValue) }
        if let category = document.category { values["category"] = .string(category) }
        data = values
        notes = event.notes
        loggedBy = event.loggedBy
        updatedBy = event.updatedBy
        deletedBy = event.deletedBy
        createdAt = event.createdAt
        updatedAt = event.updatedAt
        deletedAt = event.deletedAt
        revision = event.revision
    }
}

/// A JSON string, number or boolean.
///
/// ```swift
/// if case .number(let ml) = event.data["amount_ml"] { print(ml) }
/// ```
public enum JSONScalar: Codable, Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else {
            do {
                self = .number(try container.decode(Double.self))
            } catch DecodingError.valueNotFound(let type, let context) {
                throw DecodingError.valueNotFound(type, context)
            } catch DecodingError.typeMismatch {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "must be a string, a number, true or false"))
            } catch {
                // A number the reader cannot hold (1e400): say so, not "expected a String".
                throw DecodingError.dataCorrupted(.init(
                    codingPath: decoder.codingPath, debugDescription: "is a number out of range: give a finite number such as 120.5"))
            }
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        }
    }
}

/// JSON coding for exports: ISO 8601 dates with microseconds, so nothing is lost on the way
/// back in.
///
/// ```swift
/// let document = try ExportCoding.decoder.decode(ExportDocument.self, from: data)
/// ```
public enum ExportCoding {
    public static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(format(date))
        }
        return encoder
    }

    public static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = parse(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 date: \(text)"))
            }
            return date
        }
        return decoder
    }

    /// `2026-11-21T07:15:03.123456Z`: always six fraction digits.
    public static func format(_ date: Date) -> String { ISOTimestamp.format(date, alwaysFraction: true) }

    /// Reads what `format` wrote (and any ISO 8601 timestamp) back to the same `Date`.
    public static func parse(_ text: String) -> Date? { ISOTimestamp.parse(text) }
}

/// The JSON export, for reading it back.
///
/// ```swift
/// let document = try ExportCoding.decoder.decode(ExportDocument.self, from: data)
/// ```
public struct ExportDocument: Codable, Sendable {
    /// One child of the export, with its caregivers and every event.
    ///
    /// ```swift
    /// for child in document.children { print(child.child.name, child.events.count) }
    /// ```
    public struct ChildExport: Codable, Sendable {
        public var child: Child
        public var caregivers: [Caregiver]
        public var events: [ExportedEvent]
    }
    public var format: String
    public var user: User
    public var children: [ChildExport]
}
